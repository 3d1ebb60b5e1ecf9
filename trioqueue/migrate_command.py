"""``trioqueue migrate``: create or migrate the PostgreSQL schema, and nothing else.

The broker migrates when it starts; this command lets a deployment do it as a step of
its own (before rolling brokers, from a job with the rights to change the schema while
brokers run with fewer). It takes the same advisory lock as a starting broker, so the
two never collide. Exit status 0 when the schema is current, 4 when the store cannot be
opened (the same status as ``serve``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from .server.serve_exit import EXIT_CANNOT_OPEN_STORAGE


def add_command(sub: Any) -> None:
    migrate = sub.add_parser(
        "migrate", help="create or migrate the PostgreSQL schema, then exit",
        description="Apply the pending schema migrations to a PostgreSQL database "
                    "(the broker does the same when it starts).")
    migrate.add_argument("--storage", dest="storage_url", metavar="postgresql://...",
                         help="the database (default: TRIOQUEUE_STORAGE)")
    migrate.add_argument("--pg-outage-s", dest="pg_outage_s", type=float, default=30.0,
                         help="how long to wait for a server that is not up yet "
                              "(default 30)")


def run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    url = args.storage_url or env.get("TRIOQUEUE_STORAGE")
    if not url:
        sys.stderr.write("error: give the database: --storage postgresql://... or "
                         "TRIOQUEUE_STORAGE\n")
        return 2
    try:
        from .storage.pg.connection import PgLink, StorageUnavailable, redact
        from .storage.pg.layout import LATEST_VERSION
        from .storage.pg.schema import SchemaTooNew, migrate
    except ImportError as exc:
        sys.stderr.write(f"error: PostgreSQL storage needs psycopg: pip install "
                         f"'trioqueue[postgres]' ({exc})\n")
        return EXIT_CANNOT_OPEN_STORAGE
    link = PgLink(url, outage_s=args.pg_outage_s)
    try:
        applied = link.write(migrate)
    except (StorageUnavailable, SchemaTooNew) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return EXIT_CANNOT_OPEN_STORAGE
    finally:
        link.close()
    where = redact(url)
    if applied:
        done = ", ".join(map(str, applied))
        print(f"{where}: applied migration(s) {done}; schema at version {LATEST_VERSION}")
    else:
        print(f"{where}: schema already at version {LATEST_VERSION}")
    return 0
