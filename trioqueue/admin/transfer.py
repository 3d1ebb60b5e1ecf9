"""``export QUEUE FILE`` and ``import FILE``: a queue's jobs as JSON lines, and back.

Export writes each job of the queue as the broker shows it (``GetJobs``, with its
``state``), one JSON object a line, a state at a time and a page at a time within one
(a page of one state costs the broker O(page); a page of all states at once costs
O(offset), which made an export of 100,000 jobs take 97 s). States are read in the
order jobs move through them, so a job that moves on while the export runs is met
again later (written once: ids already written are skipped). It is a reading of a live
queue, not a snapshot: a job that leaves a state before the export reaches it can shift
the pages of that state and make one not yet read be missed. Pause the queue (and let
active jobs finish) for a complete export, or take a ``backup``.

Import re-pushes (``PUSHB``, in batches) the jobs that had not finished, each into its
own queue (or ``--queue``), keeping what a push can set (:func:`job_input`): its id
(as ``customId``, so importing twice adds nothing twice), name, data, priority,
``createdAt`` and ``runAt`` (a delayed job stays delayed until the same time), attempts
allowed, backoff, ttl, timeout, unique key and dedup settings, tags, group, lifo, the
removeOn flags, stall timeout and stack-trace limit. Waiting, prioritized, delayed and
paused jobs come back waiting or delayed; active ones come back waiting (their worker is
gone: they run again). Not carried: attempts already made, progress, logs, results,
repeat settings, the queue's paused flag and settings; completed and failed (DLQ) jobs
and jobs waiting for children (their flow links would point at jobs not re-pushed) are
skipped and counted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import IO, Any

from rich.progress import Progress

from .connection import Session
from .output import EXIT_NOT_DONE, EXIT_OK, CliError, to_json

EXPORT_PAGE_JOBS = 500
IMPORT_BATCH_JOBS = 500
# The order an export reads states in: the order jobs move through them.
EXPORT_STATES = ("waiting-children", "delayed", "prioritized", "waiting", "paused",
                 "active", "completed", "failed")
# Never re-pushed: finished, or tied into a flow by ids that may not come back.
SKIPPED_STATES = ("completed", "failed", "waiting-children")
# Job fields a push takes under the same name.
_SAME_NAME = ("name", "priority", "maxAttempts", "ttl", "timeout", "uniqueKey", "tags",
              "groupId", "lifo", "removeOnComplete", "removeOnFail", "stallTimeout",
              "stackTraceLimit", "keepLogs", "sizeLimit", "debounceId", "debounceTtl")


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser("export", parents=[common],
                            help="write a queue's jobs as JSON lines ('-': stdout)")
    parser.add_argument("queue")
    parser.add_argument("file")
    parser.add_argument("--page-size", type=int, default=EXPORT_PAGE_JOBS, metavar="N",
                        help=f"jobs asked for at a time (default {EXPORT_PAGE_JOBS})")
    parser.set_defaults(run=export_jobs)
    parser = sub.add_parser("import", parents=[common],
                            help="re-push the unfinished jobs of an export ('-': stdin)")
    parser.add_argument("file")
    parser.add_argument("--queue", help="push every job into this queue instead of its own")
    parser.add_argument("--batch-size", type=int, default=IMPORT_BATCH_JOBS, metavar="N",
                        help=f"jobs per PUSHB (default {IMPORT_BATCH_JOBS}; at most 1000)")
    parser.set_defaults(run=import_jobs)


@contextmanager
def _progress(session: Session, description: str, total: float | None) -> Iterator[Any]:
    """A rich progress bar on a terminal's stderr; elsewhere a stand-in that shows
    nothing. Yields ``advance(n)``."""
    if not session.out.interactive:
        yield lambda amount: None
        return
    from rich.console import Console

    with Progress(console=Console(file=session.out.stderr), transient=True) as progress:
        task = progress.add_task(description, total=total)
        yield lambda amount: progress.advance(task, amount)


@contextmanager
def _opened(path: str, mode: str) -> Iterator[IO[str]]:
    """The file, or stdin/stdout for '-'; a failure to open as one line."""
    if path == "-":
        yield sys.stdout if "w" in mode else sys.stdin
        return
    try:
        handle = open(path, mode, encoding="utf-8")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise CliError(f"cannot open {path}: {exc.strerror or exc}") from None
    with handle:
        yield handle


async def export_jobs(session: Session) -> int:
    args = session.args
    if args.page_size < 1:
        raise CliError("--page-size must be at least 1", EXIT_NOT_DONE)
    counts = (await session.call("GetJobCounts", queue=args.queue))["counts"]
    states: Counter[str] = Counter()
    written: set[str] = set()
    with _opened(args.file, "w") as sink, \
            _progress(session, f"export {args.queue}", sum(counts.values())) as advance:
        for state in EXPORT_STATES:
            async for page in _pages(session, args.queue, state, args.page_size):
                for job in page:
                    if job["id"] not in written:
                        written.add(job["id"])
                        sink.write(_line(job) + "\n")
                        states[str(job.get("state"))] += 1
                advance(len(page))
        sink.flush()
    summary = {"queue": args.queue, "file": args.file, "jobs": len(written),
               "states": states}
    text = (f"exported {len(written)} jobs of {args.queue} to {args.file}"
            + _by_state(states))
    _summarise(session, summary, text, to_stderr=args.file == "-")
    return EXIT_OK


async def _pages(session: Session, queue: str, state: str, size: int
                 ) -> AsyncIterator[list[dict[str, Any]]]:
    """The jobs of ``queue`` in ``state``, a page at a time, oldest first."""
    offset = 0
    while True:
        page = (await session.call("GetJobs", queue=queue, state=state, limit=size,
                                   offset=offset))["jobs"]
        if page:
            yield page
        if len(page) < size:
            return
        offset += len(page)


def _line(job: dict[str, Any]) -> str:
    try:
        return to_json(job)
    except (TypeError, ValueError) as exc:
        raise CliError(f"job {job.get('id')} cannot be written as JSON: {exc}") from None


def _by_state(states: Counter[str]) -> str:
    if not states:
        return ""
    return " (" + ", ".join(f"{state} {count}" for state, count in sorted(states.items())) + ")"


def _summarise(session: Session, summary: dict[str, Any], text: str, to_stderr: bool) -> None:
    """The closing summary; on stderr when stdout carries the jobs."""
    if to_stderr:
        session.out.stderr.write((to_json(summary) if session.out.json else text) + "\n")
    else:
        session.out.said(summary, text)


def job_input(job: dict[str, Any]) -> dict[str, Any]:
    """The PUSHB item that re-creates an exported job (see the module's docstring)."""
    item: dict[str, Any] = {"data": job.get("data"), "customId": job["id"]}
    for name in _SAME_NAME:
        if job.get(name) is not None:
            item[name] = job[name]
    created, run_at = job.get("createdAt"), job.get("runAt")
    if isinstance(created, (int, float)):
        item["timestamp"] = created
        if isinstance(run_at, (int, float)) and run_at > created:
            item["delay"] = run_at - created  # the same runAt as before
    item["backoff"] = job.get("backoffConfig") or job.get("backoff")
    if item["backoff"] is None:
        del item["backoff"]
    if job.get("uniqueKey") is not None:
        dedup = {"extend": bool(job.get("deduplicationExtend")),
                 "replace": bool(job.get("deduplicationReplace"))}
        if job.get("deduplicationTtl") is not None:
            dedup["ttl"] = job["deduplicationTtl"]
        item["dedup"] = dedup
    return item


class _Importer:
    """Batches per queue, each sent when full and the rest at the end."""

    def __init__(self, session: Session, batch_jobs: int) -> None:
        self.session = session
        self.batch_jobs = batch_jobs
        self.batches: dict[str, list[dict[str, Any]]] = {}
        self.pushed = 0

    async def add(self, queue: str, item: dict[str, Any]) -> None:
        batch = self.batches.setdefault(queue, [])
        batch.append(item)
        if len(batch) >= self.batch_jobs:
            await self.send(queue)

    async def send(self, queue: str) -> None:
        batch = self.batches.pop(queue, [])
        if batch:
            ids = (await self.session.call("PUSHB", queue=queue, jobs=batch))["ids"]
            self.pushed += len(ids)

    async def finish(self) -> None:
        for queue in list(self.batches):
            await self.send(queue)


async def import_jobs(session: Session) -> int:
    args = session.args
    if not 1 <= args.batch_size <= 1000:
        raise CliError("--batch-size must be from 1 to 1000", EXIT_NOT_DONE)
    importer = _Importer(session, args.batch_size)
    skipped: Counter[str] = Counter()
    read = 0
    total = None if args.file == "-" else _size(args.file)
    with _opened(args.file, "r") as source, \
            _progress(session, f"import {args.file}", total) as advance:
        for number, text in enumerate(source, 1):
            advance(len(text.encode()))
            if not text.strip():
                continue
            job = _parse(text, args.file, number, importer.pushed)
            read += 1
            if job.get("state") in SKIPPED_STATES:
                skipped[str(job["state"])] += 1
                continue
            await importer.add(args.queue or job["queue"], job_input(job))
        await importer.finish()
    summary = {"file": args.file, "read": read, "pushed": importer.pushed,
               "skipped": skipped}
    text = f"imported {importer.pushed} of {read} jobs from {args.file}"
    if skipped:
        text += "; skipped" + _by_state(skipped)
    _summarise(session, summary, text, to_stderr=False)
    return EXIT_OK


def _parse(text: str, path: str, number: int, pushed: int) -> dict[str, Any]:
    try:
        job = json.loads(text.strip())
    except ValueError as exc:
        raise CliError(f"{path} line {number} is not JSON ({exc}); {pushed} jobs were "
                       f"pushed before it") from None
    if not isinstance(job, dict) or not isinstance(job.get("id"), str) or \
            not isinstance(job.get("queue"), str):
        raise CliError(f"{path} line {number} is not an exported job (an object with id "
                       f"and queue); {pushed} jobs were pushed before it")
    return job


def _size(path: str) -> int | None:
    try:
        return os.path.getsize(path)
    except OSError:
        return None  # said by the open that follows
