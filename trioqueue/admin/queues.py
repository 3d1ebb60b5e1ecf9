"""Queue commands: ``queues`` (names with counts), ``pause``, ``resume``, and the three
that delete jobs, ``drain``, ``clean`` and ``obliterate``, which ask first."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from .connection import Session
from .output import EXIT_OK, table

# GetJobCounts' states, in the order a job goes through them.
COUNT_STATES = ("waiting", "prioritized", "delayed", "paused", "waiting-children", "active",
                "completed", "failed")
CLEAN_STATES = ("waiting", "wait", "prioritized", "delayed", "paused", "completed", "failed")


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser("queues", parents=[common], help="list queues with job counts")
    parser.set_defaults(run=list_queues)
    for name, paused, text in (("pause", True, "stop handing out the queue's jobs"),
                               ("resume", False, "hand out the queue's jobs again")):
        parser = sub.add_parser(name, parents=[common], help=text)
        parser.add_argument("queue")
        parser.set_defaults(run=set_paused, paused=paused)
    parser = sub.add_parser("drain", parents=[common],
                            help="delete the queue's waiting, prioritized and delayed jobs")
    _destructive(parser, drain)
    parser = sub.add_parser("clean", parents=[common],
                            help="delete the queue's jobs older than --grace in one state")
    parser.add_argument("--grace", type=int, default=0, metavar="MS",
                        help="only jobs older than this many ms (default 0: all)")
    parser.add_argument("--state", default="completed", choices=CLEAN_STATES,
                        help="which jobs (default completed)")
    parser.add_argument("--limit", type=int, default=1000, metavar="N",
                        help="at most this many (default 1000)")
    _destructive(parser, clean)
    parser = sub.add_parser("obliterate", parents=[common],
                            help="delete the queue: jobs in every state, DLQ, settings")
    _destructive(parser, obliterate)


def _destructive(parser: argparse.ArgumentParser, run: Any) -> None:
    parser.add_argument("queue")
    parser.add_argument("-y", "--yes", action="store_true",
                        help="do not ask for confirmation (needed without a terminal)")
    parser.set_defaults(run=run)


async def list_queues(session: Session) -> int:
    names = sorted((await session.call("ListQueues"))["queues"])
    rows: list[dict[str, Any]] = []
    for name in names:
        counts = (await session.call("GetJobCounts", queue=name))["counts"]
        paused = (await session.call("IsPaused", queue=name))["paused"]
        rows.append({"name": name, "paused": bool(paused), "counts": counts})

    def render(console: Console) -> None:
        if not rows:
            console.print("no queues")
            return
        console.print(table(None, ("queue", "is paused", *COUNT_STATES),
                            ([row["name"], row["paused"],
                              *(row["counts"].get(state, 0) for state in COUNT_STATES)]
                             for row in rows)))

    session.out.emit({"queues": rows}, render)
    return EXIT_OK


async def set_paused(session: Session) -> int:
    """``pause`` or ``resume``, as ``args.paused`` says."""
    queue, paused = session.args.queue, session.args.paused
    await session.call("Pause" if paused else "Resume", queue=queue)
    session.out.said({"queue": queue, "paused": paused},
                     f"{'paused' if paused else 'resumed'} {queue}")
    return EXIT_OK


async def drain(session: Session) -> int:
    args = session.args
    session.out.confirm(f"Delete every waiting, prioritized and delayed job of "
                        f"{args.queue!r}?", args.yes, "drain")
    count = (await session.call("Drain", queue=args.queue))["count"]
    _removed(session, args.queue, count)
    return EXIT_OK


async def clean(session: Session) -> int:
    args = session.args
    session.out.confirm(f"Delete up to {args.limit} {args.state} jobs of {args.queue!r} "
                        f"older than {args.grace} ms?", args.yes, "clean")
    reply = await session.call("Clean", queue=args.queue, grace=args.grace,
                               state=args.state, limit=args.limit)
    _removed(session, args.queue, reply["count"], reply.get("ids", []))
    return EXIT_OK


async def obliterate(session: Session) -> int:
    args = session.args
    session.out.confirm(f"Delete queue {args.queue!r} with all its jobs, DLQ entries and "
                        f"settings?", args.yes, "obliterate")
    await session.call("Obliterate", queue=args.queue)
    session.out.said({"queue": args.queue, "obliterated": True}, f"obliterated {args.queue}")
    return EXIT_OK


def _removed(session: Session, queue: str, count: int, ids: list[str] | None = None) -> None:
    document: dict[str, Any] = {"queue": queue, "count": count}
    if ids is not None:
        document["ids"] = ids
    session.out.said(document, f"removed {count} job{'' if count == 1 else 's'} from {queue}")
