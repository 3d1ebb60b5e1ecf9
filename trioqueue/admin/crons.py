"""``cron list|add|rm``: the broker's cron schedules (Cron, CronList, CronDelete)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from .connection import Session
from .jobs import json_argument, with_options
from .output import EXIT_OK, number_text, table, when


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    cron = sub.add_parser("cron", help="cron schedules that add jobs")
    actions = cron.add_subparsers(dest="cron_command", required=True)
    parser = actions.add_parser("list", parents=[common], help="list the schedules")
    parser.set_defaults(run=cron_list)

    parser = actions.add_parser("add", parents=[common],
                                help="add (or replace) a schedule by name")
    parser.add_argument("name")
    parser.add_argument("--queue", required=True, help="the queue its jobs go to")
    when_group = parser.add_mutually_exclusive_group(required=True)
    when_group.add_argument("--pattern", help="a cron pattern, e.g. '*/5 * * * *'")
    when_group.add_argument("--every", type=int, metavar="MS", help="every this many ms")
    parser.add_argument("--data", default="null", metavar="JSON",
                        help="each job's data as JSON (default null)")
    parser.add_argument("--job-name", help="each job's name (default the schedule's)")
    parser.add_argument("--timezone", help="the pattern's IANA time zone (default UTC)")
    parser.add_argument("--limit", type=int, metavar="N",
                        help="stop after this many jobs (default never)")
    parser.set_defaults(run=cron_add)

    parser = actions.add_parser("rm", parents=[common], help="delete a schedule")
    parser.add_argument("name")
    parser.set_defaults(run=cron_rm)


def _rows(crons: list[dict[str, Any]]) -> Any:
    for cron in crons:
        every = cron.get("repeatEvery")
        schedule = cron.get("schedule") or (
            f"every {number_text(every)} ms" if every is not None else None)
        yield [cron.get("name"), cron.get("queue"), cron.get("jobName"), schedule,
               when(cron.get("nextRun")), cron.get("executions"), cron.get("maxLimit")]


_COLUMNS = ("name", "queue", "job name", "schedule", "next run", "runs", "limit")


async def cron_list(session: Session) -> int:
    crons = (await session.call("CronList"))["crons"]

    def render(console: Console) -> None:
        if not crons:
            console.print("no cron schedules")
        else:
            console.print(table(None, _COLUMNS, _rows(crons)))

    session.out.emit({"crons": crons}, render)
    return EXIT_OK


async def cron_add(session: Session) -> int:
    args = session.args
    fields = with_options({"name": args.name, "queue": args.queue,
                           "data": json_argument(args.data, "--data")},
                          (("schedule", args.pattern), ("repeatEvery", args.every),
                           ("jobName", args.job_name), ("timezone", args.timezone),
                           ("maxLimit", args.limit)))
    cron = (await session.call("Cron", **fields))["cron"]
    session.out.emit({"cron": cron},
                     lambda console: console.print(table(None, _COLUMNS, _rows([cron]))))
    return EXIT_OK


async def cron_rm(session: Session) -> int:
    name = session.args.name
    await session.call("CronDelete", name=name)
    session.out.said({"name": name, "removed": True}, f"removed cron {name}")
    return EXIT_OK
