"""Job states and every rule for moving between them, in one file and mostly as tables.

This file follows h11's ``_state.py``: anything that decides whether a job may move from
one state to another lives here, and the queue state machine
(:mod:`trioqueue.core.queue`) asks this table before it moves a job.

Where a job lives (the stored state, ``Job.state``)::

    QUEUED            in the queue's ready or delayed heap
    ACTIVE            delivered to a worker, maybe under a lock (lease)
    WAITING_CHILDREN  parked until its dependencies complete
    COMPLETED         acknowledged; the record (and result) stay in storage
    FAILED            in the dead-letter queue

What a client sees (``GetState``, ``GetJobs``, counts) is derived from that plus time:
a QUEUED job is ``delayed`` while ``runAt > now``, else ``prioritized`` when its priority
is above zero, else ``waiting``; a job found nowhere is ``unknown``. Pausing a queue does
not change any job's state; only the counts and listings re-bucket ready jobs as
``paused`` (BullMQ's semantics, kept by bunqueue).

Events (what happens to a job) and where they lead::

    PUSH       (new) -> QUEUED          (a job is made in this state: ``Job.admit``)
    PULL       QUEUED -> ACTIVE
    RECLAIM    QUEUED -> ACTIVE         (a late ACK of a job lock expiry put back: the
                                         work was done, so the queued copy completes)
    ACK        ACTIVE -> COMPLETED
    RETRY      ACTIVE -> QUEUED         (FAIL with attempts left; backoff sets runAt)
    BURY       ACTIVE/QUEUED -> FAILED  (FAIL with no attempts left, unrecoverable, Discard)
               WAITING_CHILDREN -> FAILED (a child with failParentOnFailure failed)
    RELEASE    ACTIVE -> QUEUED         (disconnect, lock expiry, MoveToWait; no attempt)
    REMOVE     QUEUED/WAITING_CHILDREN/ACTIVE/COMPLETED/FAILED -> (gone)
    PROMOTE    QUEUED -> QUEUED         (delayed -> ready now)
    RESOLVE    WAITING_CHILDREN -> QUEUED
    PARK       ACTIVE -> WAITING_CHILDREN
    LINK       QUEUED -> WAITING_CHILDREN (UpdateParent gave it a child to wait for, or
                                         it was pushed with dependencies still open)
    REVIVE     FAILED/COMPLETED -> QUEUED (retry from the DLQ, RetryCompleted)
"""

from __future__ import annotations

from .errors import Refused
from .job import ACTIVE, COMPLETED, FAILED, QUEUED, WAITING_CHILDREN

NEW = "new"
GONE = "gone"

# Client-visible states.
WAITING = "waiting"
PRIORITIZED = "prioritized"
DELAYED = "delayed"
PAUSED = "paused"
UNKNOWN = "unknown"

VISIBLE_STATES = (
    WAITING,
    PRIORITIZED,
    DELAYED,
    ACTIVE,
    COMPLETED,
    FAILED,
    WAITING_CHILDREN,
    PAUSED,
)

PUSH = "push"
PULL = "pull"
ACK = "ack"
RETRY = "retry"
BURY = "bury"
RELEASE = "release"
RECLAIM = "reclaim"
REMOVE = "remove"
PROMOTE = "promote"
RESOLVE = "resolve"
PARK = "park"
LINK = "link"
REVIVE = "revive"

TRANSITIONS: dict[tuple[str, str], str] = {
    (NEW, PUSH): QUEUED,
    (QUEUED, PULL): ACTIVE,
    (QUEUED, RECLAIM): ACTIVE,
    (ACTIVE, ACK): COMPLETED,
    (ACTIVE, RETRY): QUEUED,
    (ACTIVE, BURY): FAILED,
    (QUEUED, BURY): FAILED,
    (WAITING_CHILDREN, BURY): FAILED,
    (ACTIVE, RELEASE): QUEUED,
    (QUEUED, REMOVE): GONE,
    (WAITING_CHILDREN, REMOVE): GONE,
    (ACTIVE, REMOVE): GONE,
    (COMPLETED, REMOVE): GONE,
    (FAILED, REMOVE): GONE,
    (QUEUED, PROMOTE): QUEUED,
    (WAITING_CHILDREN, RESOLVE): QUEUED,
    (ACTIVE, PARK): WAITING_CHILDREN,
    (QUEUED, LINK): WAITING_CHILDREN,
    (FAILED, REVIVE): QUEUED,
    (COMPLETED, REVIVE): QUEUED,
}


def next_state(state: str, event: str) -> str:
    """Where ``event`` takes a job in ``state``; refuses a move the table does not allow.

    A refused move is a bug in the caller (every command checks the state first and
    answers with its own error text), so the error says so plainly.
    """
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise Refused(f"Cannot apply {event} to a job in state {state}") from None


def visible_state(state: str, run_at: int, priority: float, now_ms: int) -> str:
    """The state a client sees for a stored state (see the module docstring)."""
    if state == QUEUED:
        if run_at > now_ms:
            return DELAYED
        return PRIORITIZED if priority > 0 else WAITING
    return state


# GetJobs accepts these names; "wait" is bunqueue's alias for waiting.
STATE_ALIASES = {"wait": WAITING}
