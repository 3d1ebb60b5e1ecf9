"""trioqueue: a durable job-queue broker on trio that speaks bunqueue's protocol v3."""

__version__ = "0.1.0"
