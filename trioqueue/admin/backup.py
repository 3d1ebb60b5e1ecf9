"""``backup DEST``: a consistent, compacted copy of a live broker's LMDB store, taken in
this process while the broker keeps serving (:mod:`trioqueue.storage.lmdb.backup`).

The store's directory comes from the broker (``StorageStatus``: ``engine`` and
``path``), or from ``--data-dir`` without asking it (a broker that is down, or one on
another version). The copy is this machine's: the command must run where the store's
files are. ``trioqueue serve --data-dir DEST`` serves the copy.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import trio

from ..storage.lmdb.backup import BackupError, copy_store
from .connection import Session
from .output import EXIT_FAILED, EXIT_OK, CliError


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser("backup", parents=[common],
                            help="copy the live LMDB store to DEST (a new or empty directory)")
    parser.add_argument("dest")
    parser.add_argument("--data-dir", metavar="DIR",
                        help="the store's directory (default: ask the broker)")
    parser.set_defaults(run=backup)


async def store_path(session: Session) -> str:
    """The directory of the broker's LMDB store, as the broker says."""
    data = (await session.call("StorageStatus"))["data"]
    if data.get("engine") == "memory":
        raise CliError("the broker keeps its jobs in memory (--memory): there is no store "
                       "to back up", EXIT_FAILED)
    path = data.get("path")
    if data.get("engine") == "postgresql":
        raise CliError(f"the broker keeps its jobs in PostgreSQL ({path}): back it up with "
                       "PostgreSQL's own tools (pg_dump, pg_basebackup, WAL archiving)",
                       EXIT_FAILED)
    if data.get("engine") != "lmdb" or not isinstance(path, str):
        raise CliError("the broker does not say where its store is: pass --data-dir",
                       EXIT_FAILED)
    return path


async def backup(session: Session) -> int:
    args = session.args
    source = args.data_dir or await store_path(session)
    started = time.perf_counter()
    try:
        # A thread: the copy takes as long as the store is large.
        size = await trio.to_thread.run_sync(copy_store, source, args.dest)
    except BackupError as exc:
        raise CliError(str(exc)) from None
    seconds = round(time.perf_counter() - started, 3)
    summary = {"source": source, "dest": args.dest, "bytes": size, "seconds": seconds}
    session.out.said(summary, f"backed up {source} to {args.dest}: {size} bytes in "
                              f"{seconds:g} s")
    return EXIT_OK
