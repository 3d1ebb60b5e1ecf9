"""What a spent attempt leads to: one table for the five ways a job's attempt is charged.

A processor's FAIL, a processing timeout, the stall detector, a lock expiry and startup
recovery each charge the job one attempt (the last three a stall too), then retry it
after its backoff, requeue it at once, or bury it in the dead-letter queue. bunqueue
gives the five slightly different rules on purpose; they are written here side by side,
as rows, so the differences can be read instead of hunted for in five ``if`` chains.

The one difference worth naming: ``maxStalls: 0`` means "bury at the first stall" for
the stall detector, and "no stall limit" for lock expiry and recovery (bunqueue's
behaviour, kept so its clients see the same outcomes). That is the
``zero_max_stalls_buries`` column.

procrastinate's ``retry.py`` is the model: one place decides, callers carry it out.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from .job import JobRecord

RETRY = "retry"  # back to the queue after the job's backoff
REQUEUE = "requeue"  # back to the queue at once, runAt unchanged (it goes first)
BURY = "bury"  # to the dead-letter queue


class Cause(Enum):
    FAIL = "fail"
    TIMEOUT = "timeout"
    STALL = "stall"
    LOCK_EXPIRY = "lock_expiry"
    RECOVERY = "recovery"


@dataclass(frozen=True, slots=True)
class Rule:
    """How one cause charges a job and where the job goes next."""

    charges_stall: bool
    # What maxStalls 0 means for this cause: bury at the first stall (True) or never.
    zero_max_stalls_buries: bool
    # (DLQ reason, error text) once the attempts are spent; "{error}" is the caller's
    # error, "{max}" the job's maxAttempts.
    out_of_attempts: tuple[str, str]
    # (DLQ reason, error text) once the stalls are spent; None: stalls never bury.
    out_of_stalls: tuple[str, str] | None
    otherwise: str  # RETRY or REQUEUE


STALLED = ("stalled", "Job stalled more than allowable limit")

RULES: dict[Cause, Rule] = {
    Cause.FAIL: Rule(False, False, ("max_attempts_exceeded", "{error}"), None, RETRY),
    Cause.TIMEOUT: Rule(False, False, ("timeout", "Job timeout exceeded"), None, RETRY),
    Cause.STALL: Rule(True, True, STALLED, STALLED, RETRY),
    Cause.LOCK_EXPIRY: Rule(
        True, False, ("max_attempts_exceeded", "Lock expired at max attempts ({max})"),
        ("stalled", "Lock expired after {renewals} renewals"), REQUEUE),
    Cause.RECOVERY: Rule(
        True, False,
        ("max_attempts_exceeded", "Job reached max attempts ({max}) during startup recovery"),
        ("stalled", "Job stalled during startup recovery"), RETRY),
}


@dataclass(frozen=True, slots=True)
class Decision:
    action: str  # RETRY, REQUEUE or BURY
    reason: str | None = None  # the DLQ reason, for BURY
    error: str | None = None  # the DLQ error text, for BURY


RETRY_DECISION = Decision(RETRY)
REQUEUE_DECISION = Decision(REQUEUE)


def charge(job: JobRecord, cause: Cause, max_stalls: int, *, unrecoverable: bool = False,
           error: str | None = None, renewals: int = 0) -> Decision:
    """Charge ``job`` one attempt (and a stall, for the causes that count one) and say
    where it goes. The caller carries the decision out; nothing else is changed here.

    ``unrecoverable`` (a processor's UnrecoverableError) buries whatever is left.
    """
    rule = RULES[cause]
    job.attempts += 1
    if rule.charges_stall:
        job.stall_count += 1
    if unrecoverable or job.attempts >= job.max_attempts:
        reason, text = rule.out_of_attempts
        return Decision(BURY, reason, _text(text, job, error, renewals))
    if rule.out_of_stalls is not None and (
            job.stall_count >= max_stalls if max_stalls > 0
            else rule.zero_max_stalls_buries):
        reason, text = rule.out_of_stalls
        return Decision(BURY, reason, _text(text, job, error, renewals))
    return RETRY_DECISION if rule.otherwise == RETRY else REQUEUE_DECISION


def _text(template: str, job: JobRecord, error: str | None, renewals: int) -> str | None:
    if template == "{error}":
        return error  # the processor's own error, None included
    return template.format(max=job.max_attempts, renewals=renewals)
