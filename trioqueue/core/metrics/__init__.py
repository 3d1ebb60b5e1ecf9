"""The broker's numbers: what it measures beyond the queues' own counts
(:mod:`.broker_stats`, held by the router) and their Prometheus text
(:mod:`.prometheus`); the commands that answer with them are core/commands/stats.py
and core/commands/dashboard.py."""
