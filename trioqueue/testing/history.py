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
  seen earlier (in a delivery or in the final record);
- **stale token applied**: an ``ACK``, ``FAIL`` or heartbeat that the broker accepted
  with the lock token of a delivery another delivery of the same job had certainly
  superseded (the broker took an outdated holder's word).

Given the lock time the workers asked for (``lock_ttl_ms``), :func:`check` also finds
**two live holders**: a job delivered to a second worker while the first one certainly
still held it live (its lease, lengthened by each acknowledged heartbeat, had not run
out, and it had neither settled the job nor lost its connection); and **a live holder
refused**: a holder's heartbeat, ``ACK`` or ``FAIL`` refused for its lease while that
lease certainly still ran and no other delivery could have superseded it.

Tokens: a delivery records the lock token it came with (``detail["token"]``), and each
``ACK``, ``FAIL`` and heartbeat the token it used; histories without tokens are judged
by process and job instead, as before.

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
HEARTBEAT = "heartbeat"  # a lock renewal (JobHeartbeat with the delivery's token)
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
          drained: bool = True, lock_ttl_ms: float | None = None) -> CheckResult:
    """Judge ``history`` against ``final``: job id -> its record at the end (a Job map
    with ``state``, ``attempts``, ``stallCount``), or None when the job was not found.

    ``final`` must hold every job id the history mentions (read them all at the end);
    ``drained`` says every job was processed to an end, so every one must be terminal.
    ``lock_ttl_ms`` (the lock time the workers asked for) adds the lease checks: two
    live holders, and a live holder refused.
    """
    result = CheckResult()
    problems = result.problems
    adds_ok = {op.job_id for op in history.by_kind(ADD, OK)}
    adds_maybe = adds_ok | {op.job_id for op in history.by_kind(ADD, UNKNOWN)}
    adds_maybe |= {op.job_id for op in history.by_kind(ADD, INVOKE)}
    result.stats = {
        "adds acknowledged": len(adds_ok),
        "adds unknown": len(adds_maybe - adds_ok),
        "adds refused": len(history.by_kind(ADD, FAIL)),
        "deliveries": len(history.by_kind(PULL, OK)),
        "completions acknowledged": len(history.by_kind(ACK, OK)),
        "failures acknowledged": len(history.by_kind(NACK, OK)),
        "heartbeats acknowledged": len(history.by_kind(HEARTBEAT, OK)),
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
    problems.extend(stale_tokens(history))
    if lock_ttl_ms is not None:
        problems.extend(two_live_holders(history, lock_ttl_ms))
        problems.extend(refused_live_holders(history, lock_ttl_ms))
    return result


def _check_deliveries(history: History, final: dict[str, dict[str, Any] | None],
                      problems: list[str]) -> None:
    """Completions and deliveries of each job. Deliveries are ordered by their reply
    (the broker handed the job out before it): a pull may wait in the broker a while
    before it takes a job, so its sending says little about when it did."""
    by_job: dict[str, list[Op]] = {}
    for op in history.ops:
        if op.job_id is not None and op.kind in (PULL, ACK) and op.status == OK:
            by_job.setdefault(op.job_id, []).append(op)
    for job_id, ops in sorted(by_job.items()):
        ops.sort(key=lambda op: (op.completed_at or 0.0) if op.kind == PULL
                 else op.invoked_at)
        last_ack: Op | None = None
        redelivered_since_ack = False
        acked_tokens: dict[str, Op] = {}
        for op in ops:
            if op.kind == PULL:
                if last_ack is not None and last_ack.completed_at is not None and (
                        op.invoked_at > last_ack.completed_at):
                    problems.append(
                        f"redelivered after ACK: {job_id} was delivered again (op "
                        f"{op.index}) after its completion was acknowledged (op "
                        f"{last_ack.index})")
                    redelivered_since_ack = True
            else:
                token = op.detail.get("token")
                twice = acked_tokens.get(token) if token is not None else None
                if twice is None and not redelivered_since_ack:
                    twice = last_ack
                if twice is not None:
                    problems.append(
                        f"completed twice: {job_id} (ops {twice.index} and {op.index}) "
                        f"with no redelivery in between")
                if token is not None:
                    acked_tokens[token] = op
                last_ack = op
                redelivered_since_ack = False
        _check_counters(job_id, [op for op in ops if op.kind == PULL], final.get(job_id),
                        problems)


def _counters(values: dict[str, Any]) -> tuple[int, int]:
    return int(values.get("attempts", 0)), int(values.get("stallCount", 0))


def _check_counters(job_id: str, deliveries: list[Op], record: dict[str, Any] | None,
                    problems: list[str]) -> None:
    """``attempts`` and ``stallCount`` never go back: between two deliveries certainly
    handed out in that order, and from any delivery to the final record."""
    reported: set[int] = set()
    for i, earlier in enumerate(deliveries):
        for later in deliveries[i + 1:]:
            order = _handed_out_first(earlier, later)
            if order is None:
                continue
            first, second = (earlier, later) if order else (later, earlier)
            before, after = _counters(first.detail), _counters(second.detail)
            if (after[0] < before[0] or after[1] < before[1]) and second.index not in reported:
                reported.add(second.index)
                problems.append(
                    f"counters went back: {job_id} delivered with attempts/stalls "
                    f"{after} after {before} (op {second.index})")
    seen = (max((_counters(op.detail)[0] for op in deliveries), default=-1),
            max((_counters(op.detail)[1] for op in deliveries), default=-1))
    if record is not None:
        end = _counters(record)
        if end[0] < seen[0] or end[1] < seen[1]:
            problems.append(
                f"counters went back: {job_id} ended with attempts/stalls {end} after "
                f"{seen} was seen")


class _Leases:
    """Each job's deliveries, and what each holder did with its lease: the
    heartbeats the broker acknowledged, the outcomes it sent, the moment its
    connection was lost. Built once from a history for the lease checks."""

    def __init__(self, history: History, lock_ttl_ms: float) -> None:
        self.ttl_s = lock_ttl_ms / 1000
        self.lost_at: dict[str, float] = {}
        self.deliveries: dict[str, list[Op]] = {}
        self.by_token: dict[str, Op] = {}
        self.renewals: list[Op] = []  # every heartbeat, ACK and FAIL with its job
        for op in history.ops:
            if op.kind == LOST:
                self.lost_at.setdefault(op.process, op.invoked_at)
            elif op.job_id is None:
                continue
            elif op.kind == PULL and op.status == OK and op.completed_at is not None:
                self.deliveries.setdefault(op.job_id, []).append(op)
                if op.detail.get("token") is not None:
                    self.by_token[op.detail["token"]] = op
            elif op.kind in (ACK, NACK, HEARTBEAT):
                self.renewals.append(op)
        self._mine: dict[int, list[Op]] = {}
        for op in self.renewals:
            delivery = self.delivery_of(op)
            if delivery is not None:
                self._mine.setdefault(delivery.index, []).append(op)

    def delivery_of(self, op: Op) -> Op | None:
        """The delivery whose lease ``op`` used: by its token, or (no token recorded)
        the latest delivery of its job to its process sent before it."""
        token = op.detail.get("token")
        if token is not None:
            found = self.by_token.get(token)
            return found if found is not None and found.job_id == op.job_id else None
        candidates = [d for d in self.deliveries.get(op.job_id or "", ())
                      if d.process == op.process and d.invoked_at <= op.invoked_at
                      and d.detail.get("token") is None]
        return max(candidates, key=lambda d: d.invoked_at, default=None)

    def live_until(self, delivery: Op, before: float = float("inf")) -> float:
        """Until when the holder of ``delivery`` certainly held it live, counting only
        what it did before ``before``: the lease runs from the handout (after the PULL
        was sent) for the ttl at least, each acknowledged heartbeat lengthens it to the
        heartbeat's sending plus the ttl at least; it ends for sure at the holder's
        first ACK or FAIL (whatever the answer) and at the loss of its connection."""
        ttl_s = float(delivery.detail.get("lock_ttl_ms", self.ttl_s * 1000)) / 1000
        until = delivery.invoked_at + ttl_s
        end = self.lost_at.get(delivery.process, float("inf"))
        for op in self._mine.get(delivery.index, ()):
            if op.invoked_at >= before:
                continue
            if op.kind == HEARTBEAT:
                if op.status == OK:
                    until = max(until, op.invoked_at + ttl_s)
            else:  # an ACK or FAIL, answered or not: the holder let go
                end = min(end, op.invoked_at)
        return min(until, end)


def _handed_out_first(a: Op, b: Op) -> bool | None:
    """Whether delivery ``a`` was certainly handed out before ``b`` (True), certainly
    after (False), or either could be (None): a handout happens between the PULL's
    sending and its reply."""
    assert a.completed_at is not None and b.completed_at is not None
    if a.completed_at <= b.invoked_at:
        return True
    if b.completed_at <= a.invoked_at:
        return False
    return None


def two_live_holders(history: History, lock_ttl_ms: float) -> list[str]:
    """Jobs delivered while another worker certainly still held them live.

    A delivery's lock runs from the moment the broker handed the job out (after the
    PULL was sent) for ``lock_ttl_ms`` at least, and each heartbeat the broker
    acknowledged lengthens it to the heartbeat's sending plus the ttl at least; the
    holder gives it up when it acknowledges or fails the job, or loses its connection.
    A second delivery received before then means two live holders at once. When the
    two handouts could have happened in either order, both orders must be violations
    to report one.
    """
    leases = _Leases(history, lock_ttl_ms)
    problems = []
    for job_id, ops in sorted(leases.deliveries.items()):
        ops.sort(key=lambda op: op.completed_at or 0.0)
        for i, first in enumerate(ops):
            for second in ops[i + 1:]:
                order = _handed_out_first(first, second)
                assert second.completed_at is not None and first.completed_at is not None
                one_way = second.completed_at < leases.live_until(first)
                other_way = first.completed_at < leases.live_until(second)
                if (one_way if order else other_way if order is False
                        else one_way and other_way):
                    problems.append(
                        f"two live holders: {job_id} delivered to {second.process} (op "
                        f"{second.index}) while {first.process} still held it (op "
                        f"{first.index})")
    return problems


def stale_tokens(history: History) -> list[str]:
    """ACKs, FAILs and heartbeats the broker accepted with a superseded token.

    A token is superseded once another delivery of the same job, certainly handed
    out after the token's own delivery, has reached its worker: from then on only the
    new holder's token may settle or renew the job. Operations without a recorded
    token are not judged."""
    by_token: dict[str, Op] = {}
    deliveries: dict[str, list[Op]] = {}
    for op in history.ops:
        if op.kind == PULL and op.status == OK and op.job_id is not None and (
                op.detail.get("token") is not None and op.completed_at is not None):
            by_token[op.detail["token"]] = op
            deliveries.setdefault(op.job_id, []).append(op)
    problems = []
    for op in history.ops:
        token = op.detail.get("token")
        if op.kind not in (ACK, NACK, HEARTBEAT) or op.status != OK or token is None:
            continue
        own = by_token.get(token)
        if own is None or own.job_id != op.job_id:
            continue
        for later in deliveries.get(op.job_id or "", ()):
            assert later.completed_at is not None
            if (later is not own and _handed_out_first(own, later)
                    and later.completed_at < op.invoked_at):
                problems.append(
                    f"stale token applied: {op.kind} of {op.job_id} by {op.process} (op "
                    f"{op.index}) accepted with the token of op {own.index}, superseded "
                    f"by the delivery to {later.process} (op {later.index})")
                break
    return problems


def refused_live_holders(history: History, lock_ttl_ms: float) -> list[str]:
    """Heartbeats, ACKs and FAILs of a holder whose lease certainly still ran, refused
    as if it held nothing (the lock and token rules' refusals, not an error that says
    the command could not reach its queue for now), while no other delivery of the job
    could have superseded it: the broker took a live worker's lease away."""
    leases = _Leases(history, lock_ttl_ms)
    problems = []
    reported: set[int] = set()  # one report per lease: its first refusal
    for op in leases.renewals:
        if op.status != FAIL or op.completed_at is None or not _lease_refusal(op.error):
            continue
        own = leases.delivery_of(op)
        if own is None or own.detail.get("token") is None or own.index in reported:
            continue
        superseded = any(
            other is not own and other.invoked_at < op.completed_at
            and _handed_out_first(other, own) is not True
            for other in leases.deliveries.get(op.job_id or "", ()))
        if not superseded and op.completed_at < leases.live_until(own, op.invoked_at):
            reported.add(own.index)
            problems.append(
                f"live holder refused: {op.kind} of {op.job_id} by {op.process} (op "
                f"{op.index}) refused ({op.error}) while its lease (op {own.index}) "
                f"certainly still ran")
    return problems


# How the broker says a holder holds the job no longer: the token rule, a job that is
# not active (any more), a FAIL not applied (the job was queued again meanwhile).
LEASE_REFUSALS = ("token", "not in processing", "not active", "not applied")


def _lease_refusal(error: str | None) -> bool:
    """A refusal for the lease itself, not one that says the command could not reach
    its queue for now (a broker unreachable, a queue moving: retry)."""
    return error is not None and any(phrase in error for phrase in LEASE_REFUSALS)
