"""Client-side history of operations, and the checker that judges it (Jepsen's way).

A test records every operation it sends as it happens: ``invoke`` when it is sent,
then ``ok``, ``fail`` (the broker refused it: it did not happen) or ``unknown`` (the
connection died first: it may or may not have happened). After the run the broker is
drained and each job's final record is read; :func:`check` then looks for what a
trustworthy queue must never do:

- **lost**: an add that was acknowledged (``ok``) whose job is nowhere at the end;
- **unexpected**: a job at the end that no add (``ok`` or ``unknown``) could have made;
- **not terminal**: after a drain, a job that is not completed or failed;
- **completed twice**: two acknowledged completions of one job with no redelivery in
  between (a redelivery is how a lease expiry shows to a client);
- **redelivered after ACK**: a delivery of a job that starts after an acknowledged
  completion of that job;
- **counters going back**: ``attempts`` or ``stallCount`` of a job smaller than a value
  seen earlier (in a delivery or in the final record).

:func:`two_live_holders` (given the lock time the workers asked for) also finds a job
delivered to a second worker while the first one certainly still held it live.

The checker never trusts the broker's own account of what happened: only what clients
saw, plus the final state read at the end.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any

INVOKE = "invoke"
OK = "ok"
FAIL = "fail"
UNKNOWN = "unknown"

ADD = "add"
PULL = "pull"
ACK = "ack"
NACK = "fail"  # a FAIL command (the job failed an attempt)
LOST = "lost"  # a client's connection died: the jobs it held are no longer held live

TERMINAL_STATES = frozenset({"completed", "failed"})


@dataclass
class Op:
    """One operation: its invocation and (once known) its outcome."""

    index: int
    process: str
    kind: str
    job_id: str | None
    invoked_at: float
    status: str = INVOKE
    completed_at: float | None = None
    error: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


class History:
    """An append-only record of what clients sent and saw. Not thread-safe: record
    from one trio program (any number of tasks)."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self._clock = time.monotonic
        self._ids = itertools.count()

    def invoke(self, process: str, kind: str, job_id: str | None = None,
               **detail: Any) -> Op:
        op = Op(next(self._ids), process, kind, job_id, self._clock(), detail=detail)
        self.ops.append(op)
        return op

    def ok(self, op: Op, job_id: str | None = None, **detail: Any) -> None:
        self._finish(op, OK, job_id, None, detail)

    def fail(self, op: Op, error: str) -> None:
        self._finish(op, FAIL, None, error, {})

    def unknown(self, op: Op, error: str) -> None:
        self._finish(op, UNKNOWN, None, error, {})

    def _finish(self, op: Op, status: str, job_id: str | None, error: str | None,
                detail: dict[str, Any]) -> None:
        if op.status != INVOKE:
            raise ValueError(f"operation {op.index} already ended as {op.status}")
        op.status = status
        op.completed_at = self._clock()
        op.error = error
        if job_id is not None:
            op.job_id = job_id
        op.detail.update(detail)

    def pending_as_unknown(self, error: str = "still pending at the end") -> None:
        """Operations cut off by a crash: their outcome is unknown."""
        for op in self.ops:
            if op.status == INVOKE:
                self.unknown(op, error)

    def by_kind(self, kind: str, status: str | None = None) -> list[Op]:
        return [op for op in self.ops
                if op.kind == kind and (status is None or op.status == status)]


@dataclass
class CheckResult:
    problems: list[str] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return not self.problems

    def report(self) -> str:
        lines = [f"{name}: {count}" for name, count in sorted(self.stats.items())]
        if self.problems:
            lines.append(f"{len(self.problems)} problem(s):")
            lines.extend(f"  - {p}" for p in self.problems)
        else:
            lines.append("no problem found")
        return "\n".join(lines)

    def assert_valid(self) -> None:
        if self.problems:
            raise AssertionError(self.report())


def check(history: History, final: dict[str, dict[str, Any] | None], *,
          drained: bool = True) -> CheckResult:
    """Judge ``history`` against ``final``: job id -> its record at the end (a Job map
    with ``state``, ``attempts``, ``stallCount``), or None when the job was not found.

    ``final`` must hold every job id the history mentions (read them all at the end);
    ``drained`` says every job was processed to an end, so every one must be terminal.
    """
    result = CheckResult()
    problems = result.problems
    adds_ok = {op.job_id for op in history.by_kind(ADD, OK)}
    adds_maybe = adds_ok | {op.job_id for op in history.by_kind(ADD, UNKNOWN)}
    adds_maybe |= {op.job_id for op in history.by_kind(ADD, INVOKE)}
    result.stats = {
        "adds acknowledged": len(adds_ok),
        "adds unknown": len(adds_maybe - adds_ok),
        "deliveries": len(history.by_kind(PULL, OK)),
        "completions acknowledged": len(history.by_kind(ACK, OK)),
        "jobs at the end": sum(1 for record in final.values() if record is not None),
    }
    for job_id in sorted(j for j in adds_ok if j is not None):
        if final.get(job_id) is None:
            problems.append(f"lost: {job_id} was acknowledged by its add but is gone")
    for job_id, record in sorted(final.items()):
        if record is None:
            continue
        if job_id not in adds_maybe:
            problems.append(f"unexpected: {job_id} exists but no add could have made it")
        if drained and record.get("state") not in TERMINAL_STATES:
            problems.append(f"not terminal: {job_id} is {record.get('state')} after the drain")
    _check_deliveries(history, final, problems)
    return result


def _check_deliveries(history: History, final: dict[str, dict[str, Any] | None],
                      problems: list[str]) -> None:
    by_job: dict[str, list[Op]] = {}
    for op in history.ops:
        if op.job_id is not None and op.kind in (PULL, ACK) and op.status == OK:
            by_job.setdefault(op.job_id, []).append(op)
    for job_id, ops in sorted(by_job.items()):
        ops.sort(key=lambda op: op.invoked_at)
        last_ack: Op | None = None
        redelivered_since_ack = False
        seen: tuple[int, int] = (-1, -1)
        for op in ops:
            if op.kind == PULL:
                if last_ack is not None and last_ack.completed_at is not None and (
                        op.invoked_at > last_ack.completed_at):
                    problems.append(
                        f"redelivered after ACK: {job_id} was delivered again (op "
                        f"{op.index}) after its completion was acknowledged (op "
                        f"{last_ack.index})")
                    redelivered_since_ack = True
                counters = (int(op.detail.get("attempts", 0)),
                            int(op.detail.get("stallCount", 0)))
                if counters[0] < seen[0] or counters[1] < seen[1]:
                    problems.append(
                        f"counters went back: {job_id} delivered with attempts/stalls "
                        f"{counters} after {seen} (op {op.index})")
                seen = (max(seen[0], counters[0]), max(seen[1], counters[1]))
            else:
                if last_ack is not None and not redelivered_since_ack:
                    problems.append(
                        f"completed twice: {job_id} (ops {last_ack.index} and {op.index}) "
                        f"with no redelivery in between")
                last_ack = op
                redelivered_since_ack = False
        record = final.get(job_id)
        if record is not None:
            end = (int(record.get("attempts", 0)), int(record.get("stallCount", 0)))
            if end[0] < seen[0] or end[1] < seen[1]:
                problems.append(
                    f"counters went back: {job_id} ended with attempts/stalls {end} after "
                    f"{seen} was seen")


def two_live_holders(history: History, lock_ttl_ms: int) -> list[str]:
    """Jobs delivered while another worker certainly still held them live.

    A delivery's lock runs from the moment the broker handed the job out (after the
    PULL was sent) for ``lock_ttl_ms`` at least (renewals only lengthen it), unless the
    holder acknowledged or failed the job first, or lost its connection. A second
    delivery received before the first PULL's sending plus the lock time, with the first
    holder still connected and its job not settled, means two live holders at once.
    """
    ttl_s = lock_ttl_ms / 1000
    lost_at: dict[str, float] = {}
    settled: dict[tuple[str, str], list[float]] = {}
    deliveries: dict[str, list[Op]] = {}
    for op in history.ops:
        if op.kind == LOST:
            lost_at.setdefault(op.process, op.invoked_at)
        elif op.job_id is None:
            continue
        elif op.kind in (ACK, NACK) and op.status != INVOKE:
            settled.setdefault((op.process, op.job_id), []).append(op.invoked_at)
        elif op.kind == PULL and op.status == OK and op.completed_at is not None:
            deliveries.setdefault(op.job_id, []).append(op)
    problems = []
    for job_id, ops in sorted(deliveries.items()):
        ops.sort(key=lambda op: op.completed_at or 0.0)
        for first, second in itertools.pairwise(ops):
            got = second.completed_at
            assert got is not None
            live_until = min(first.invoked_at + ttl_s,
                             lost_at.get(first.process, float("inf")),
                             *(t for t in settled.get((first.process, job_id), ())
                               if t >= first.invoked_at), float("inf"))
            if got < live_until:
                problems.append(
                    f"two live holders: {job_id} delivered to {second.process} (op "
                    f"{second.index}) while {first.process} still held it (op "
                    f"{first.index})")
    return problems
