"""trioqueue's Python client: Queue, Worker, QueueEvents, FlowProducer and Job.

Async, on trio or asyncio alike (written on anyio); ``trioqueue.sync`` wraps the
producer and query side for code without an event loop. One switch picks the mode::

    async with open_connection("127.0.0.1", 6789) as conn:       # a broker over TCP
    async with open_connection(embedded=True) as conn:           # a broker in process

and the rest of the code is the same.
"""

from .connection import Connection, EventStream, open_connection
from .errors import (
    AuthenticationError,
    CommandError,
    CommandTimeout,
    ConnectionLost,
    JobFailed,
    JobNotFound,
    LockError,
    TrioqueueError,
    ValidationError,
    WaitTimeout,
)
from .events import QueueEvent, QueueEvents
from .flow import FlowNode, FlowProducer
from .job import Job
from .options import Backoff, BulkJob, Deduplication, JobOptions
from .queue import Queue
from .repeat import Repeat
from .worker import UnrecoverableError, Worker

__all__ = [
    "AuthenticationError",
    "Backoff",
    "BulkJob",
    "CommandError",
    "CommandTimeout",
    "Connection",
    "ConnectionLost",
    "Deduplication",
    "EventStream",
    "FlowNode",
    "FlowProducer",
    "Job",
    "JobFailed",
    "JobOptions",
    "JobNotFound",
    "LockError",
    "Queue",
    "QueueEvent",
    "QueueEvents",
    "Repeat",
    "TrioqueueError",
    "UnrecoverableError",
    "ValidationError",
    "WaitTimeout",
    "Worker",
    "open_connection",
]
