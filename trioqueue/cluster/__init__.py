"""Several brokers on one PostgreSQL database (docs/scale-out.md), layered on the broker.

The broker knows of no cluster: its router asks a placement port and it drives a
membership (actors/ports.py), whose one-broker defaults are null objects. This package
implements both, and is wired in from above (server/run.py, cli.py); nothing in core/,
storage/, transport/ or actors/ imports it.
"""
