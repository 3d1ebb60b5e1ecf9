"""Job commands: ``jobs QUEUE`` (a page of a queue's jobs), ``job ID`` (one job with its
state, result, logs and progress), ``add`` (PUSH), and ``dlq list|retry|purge``."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.console import Console

from ..client.errors import CommandError
from ..core.fields import coerce_numeric_string
from .connection import Session
from .output import EXIT_NOT_DONE, EXIT_OK, CliError, pairs, table, when

JOB_STATES = ("waiting", "prioritized", "delayed", "paused", "waiting-children", "active",
              "completed", "failed")


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser("jobs", parents=[common], help="list a page of a queue's jobs")
    parser.add_argument("queue")
    parser.add_argument("--state", action="append", choices=(*JOB_STATES, "wait"),
                        help="only jobs in this state (repeat for several; default all)")
    parser.add_argument("--limit", type=int, default=100, metavar="N",
                        help="at most this many (default 100)")
    parser.add_argument("--offset", type=int, default=0, metavar="N",
                        help="skip this many first (default 0)")
    parser.add_argument("--desc", action="store_true", help="newest first")
    parser.set_defaults(run=list_jobs)

    parser = sub.add_parser("job", parents=[common],
                            help="show a job: data, state, result, logs, progress")
    parser.add_argument("id")
    parser.set_defaults(run=show_job)

    parser = sub.add_parser("add", parents=[common], help="add a job to a queue")
    parser.add_argument("queue")
    parser.add_argument("name")
    parser.add_argument("--data", default="null", metavar="JSON",
                        help="the job's data as JSON (default null)")
    # The option values are taken as text and judged by the broker's own validator
    # (the one every entry point shares): the same values pass, the same are refused
    # with the same one line.
    parser.add_argument("--delay", metavar="MS", help="run after this many ms")
    parser.add_argument("--priority", help="higher runs first")
    parser.add_argument("--attempts", "--max-attempts", metavar="N",
                        help="attempts before the DLQ (default 3)")
    parser.add_argument("--backoff", metavar="MS",
                        help="the first retry's delay (default 1000; doubles each retry)")
    parser.add_argument("--backoff-max-delay", metavar="MS",
                        help="no retry waits longer than this (at most 86400000)")
    parser.add_argument("--ttl", metavar="MS", help="expire if not run within this")
    parser.add_argument("--timeout", metavar="MS", help="fail a run that takes longer")
    parser.add_argument("--job-id", help="a custom id (adding it again adds nothing)")
    parser.set_defaults(run=add_job)

    dlq = sub.add_parser("dlq", help="the dead-letter queue of a queue")
    actions = dlq.add_subparsers(dest="dlq_command", required=True)
    parser = actions.add_parser("list", parents=[common], help="list DLQ entries")
    parser.add_argument("queue")
    parser.add_argument("--limit", type=int, default=100, metavar="N",
                        help="at most this many (default 100)")
    parser.set_defaults(run=dlq_list)
    parser = actions.add_parser("retry", parents=[common],
                                help="re-queue DLQ entries as fresh waiting jobs")
    parser.add_argument("queue")
    parser.add_argument("--job-id", help="only this job (default every entry)")
    parser.set_defaults(run=dlq_retry)
    parser = actions.add_parser("purge", parents=[common],
                                help="delete every DLQ entry of the queue")
    parser.add_argument("queue")
    parser.add_argument("-y", "--yes", action="store_true",
                        help="do not ask for confirmation (needed without a terminal)")
    parser.set_defaults(run=dlq_purge)


def json_argument(text: str, flag: str) -> Any:
    """A flag's JSON value, or the one-line refusal (exit 2: nothing was sent)."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CliError(f"{flag} is not valid JSON: {exc}", EXIT_NOT_DONE) from None


def with_options(fields: dict[str, Any], options: tuple[tuple[str, Any], ...]
                 ) -> dict[str, Any]:
    """``fields`` with each option that was given (not None) added under its wire name."""
    fields.update((name, value) for name, value in options if value is not None)
    return fields


async def list_jobs(session: Session) -> int:
    args = session.args
    fields: dict[str, Any] = {"queue": args.queue, "limit": args.limit,
                              "offset": args.offset, "asc": not args.desc}
    if args.state:
        fields["state"] = args.state
    found = (await session.call("GetJobs", **fields))["jobs"]

    def render(console: Console) -> None:
        console.print(table(None, ("id", "name", "state", "created", "attempts", "priority"),
                            ([job.get("id"), job.get("name"), job.get("state"),
                              when(job.get("createdAt")), job.get("attempts"),
                              job.get("priority")] for job in found)))
        more = (f"; more with --offset {args.offset + len(found)}"
                if len(found) == args.limit else "")
        console.print(f"{len(found)} job{'' if len(found) == 1 else 's'} from offset "
                      f"{args.offset}{more}", markup=False)

    session.out.emit({"queue": args.queue, "jobs": found}, render)
    return EXIT_OK


async def show_job(session: Session) -> int:
    job_id = session.args.id
    job = (await session.call("GetJob", id=job_id))["job"]
    state = (await session.call("GetState", id=job_id))["state"]
    result = (await session.call("GetResult", id=job_id)).get("result")
    logs = (await session.call("GetLogs", id=job_id))["data"]["logs"]
    progress: dict[str, Any] | None = None
    if state == "active":
        try:
            progress = await session.call("GetProgress", id=job_id)
        except CommandError:
            progress = None  # it finished between the two questions
    document = {"job": job, "state": state, "result": result, "logs": logs,
                "progress": progress}

    def render(console: Console) -> None:
        console.print(pairs(f"job {job_id}", [
            ("queue", job.get("queue")), ("name", job.get("name")), ("state", state),
            ("data", job.get("data")), ("result", result),
            ("progress", None if progress is None else
             f"{progress.get('progress')}% {progress.get('message') or ''}".strip()),
            ("attempts", f"{job.get('attempts')} of {job.get('maxAttempts')}"),
            ("priority", job.get("priority")), ("created", when(job.get("createdAt"))),
            ("run at", when(job.get("runAt"))), ("started", when(job.get("startedAt"))),
            ("completed", when(job.get("completedAt"))),
            ("stacktrace", "\n".join(job.get("stacktrace") or []) or None)]))
        if logs:
            console.print(table("logs", ("time", "level", "message"),
                                ([when(log.get("timestamp")), log.get("level"),
                                  log.get("message")] for log in logs)))

    session.out.emit(document, render)
    return EXIT_OK


def _number(text: str | None) -> Any:
    """A numeric flag as the wire carries it: a plain decimal number as its number,
    any other text as it is, for the broker's validator to refuse in its words."""
    return None if text is None else coerce_numeric_string(text)


def _backoff(args: argparse.Namespace) -> Any:
    """``--backoff`` alone is the number; with ``--backoff-max-delay``, the map."""
    delay, cap = _number(args.backoff), _number(args.backoff_max_delay)
    if cap is None:
        return delay
    return {"maxDelay": cap} if delay is None else {"delay": delay, "maxDelay": cap}


async def add_job(session: Session) -> int:
    args = session.args
    fields = with_options({"queue": args.queue, "name": args.name,
                           "data": json_argument(args.data, "--data")},
                          (("delay", _number(args.delay)),
                           ("priority", _number(args.priority)),
                           ("maxAttempts", _number(args.attempts)),
                           ("backoff", _backoff(args)), ("ttl", _number(args.ttl)),
                           ("timeout", _number(args.timeout)), ("jobId", args.job_id)))
    job_id = (await session.call("PUSH", **fields))["id"]
    session.out.said({"queue": args.queue, "id": job_id}, f"added {job_id} to {args.queue}")
    return EXIT_OK


async def dlq_list(session: Session) -> int:
    args = session.args
    entries = (await session.call("Dlq", queue=args.queue, count=args.limit))["entries"]

    def render(console: Console) -> None:
        if not entries:
            console.print(f"the DLQ of {args.queue} is empty", markup=False)
            return
        console.print(table(f"DLQ of {args.queue}",
                            ("id", "name", "reason", "error", "entered", "attempts",
                             "retries"),
                            ([entry["job"].get("id"), entry["job"].get("name"),
                              entry.get("reason"), entry.get("error"),
                              when(entry.get("enteredAt")), len(entry.get("attempts") or ()),
                              entry.get("retryCount")] for entry in entries)))

    session.out.emit({"queue": args.queue, "entries": entries}, render)
    return EXIT_OK


async def dlq_retry(session: Session) -> int:
    args = session.args
    fields = with_options({"queue": args.queue}, (("jobId", args.job_id),))
    count = (await session.call("RetryDlq", **fields))["count"]
    session.out.said({"queue": args.queue, "count": count},
                     f"re-queued {count} job{'' if count == 1 else 's'} of {args.queue}")
    return EXIT_OK


async def dlq_purge(session: Session) -> int:
    args = session.args
    session.out.confirm(f"Delete every DLQ entry of {args.queue!r}?", args.yes, "dlq purge")
    count = (await session.call("PurgeDlq", queue=args.queue))["count"]
    session.out.said({"queue": args.queue, "count": count},
                     f"deleted {count} DLQ entr{'y' if count == 1 else 'ies'} of {args.queue}")
    return EXIT_OK

