"""Job-level ``repeat``: a chain of generations, each created when the previous one
completes (bunqueue's completion-chained repeat, reference 4.16).

A job pushed with ``repeat`` is the chain's first generation. When a generation is
acknowledged, :func:`follow` admits its successor in the same command (so in the same
commit as the completion): a new job with a new id, the same name, data and options,
attempts, progress and timeline fresh, ``repeat.count`` one more, due at the chain's
next slot. Nothing else keeps the chain going: a generation that dead-letters, or a
pending successor that is cancelled, drained or obliterated, ends it, and a restart
finds the pending successor in the store like any job.

Slots are anchored to the schedule, not to completion times. ``repeat.prevMillis``
holds the slot of a generation (set when it is admitted); the next slot is

* ``every``: ``prevMillis + every``, moved on by whole intervals past slots a late
  completion missed (the grid stays where it was);
* ``pattern``: the next time of the cron expression (in ``tz``) after the later of
  ``prevMillis`` and the completion, plus ``offset``.

A slot before ``startDate`` is never used; a slot after ``endDate``, or a generation
whose ``count`` reached ``limit``, ends the chain. ``limit`` counts successors, as in
bunqueue: ``{every: 1000, limit: 3}`` runs four times (BullMQ's ``limit`` counts runs).

The first generation's slot is chosen at admission (:func:`first_delay`): with
``every``, the job's own run time (or ``startDate`` when later), plus ``offset``;
with ``pattern``, the first time of the expression from then on. ``immediately``
runs the first generation at its own run time instead, and the chain goes on from the
first slot after it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import Refused
from ..job import JobRecord
from ..repeating.expressions import parse_cron
from ..repeating.job_option import SUCCESSOR_KEY
from . import producing

if TYPE_CHECKING:
    from .state import QueueState

# The options a successor copies from its generation: everything a push could set,
# except what a repeat job cannot have (custom id, parent, dependencies).
_COPIED = (
    "name", "data", "priority", "max_attempts", "backoff", "backoff_config", "ttl",
    "timeout", "unique_key", "tags", "group_id", "remove_on_complete", "remove_on_fail",
    "stall_timeout", "stack_trace_limit", "keep_logs", "size_limit", "deduplication_ttl",
    "deduplication_extend", "deduplication_replace", "debounce_id", "debounce_ttl",
    "durable", "lifo",
)


# ------------------------------------------------------------------------ slots


def _offset(repeat: Mapping[str, Any]) -> int:
    return int(repeat.get("offset") or 0)


def _pattern_after(repeat: Mapping[str, Any], after: int) -> int | None:
    """The first slot of the pattern strictly after ``after`` (offset included)."""
    offset = _offset(repeat)
    try:
        fire = parse_cron(repeat["pattern"], repeat.get("tz")).next_after(after - offset)
    except (OverflowError, ValueError, OSError):  # past the years a datetime holds
        return None
    return None if fire is None else fire + offset


def first_delay(repeat: dict[str, Any], created: int, delay: float) -> float:
    """The delay that puts a chain's first generation at its slot (see the module
    docstring); records that slot as ``prevMillis``. A successor (or a job whose
    client already named ``prevMillis``) keeps its delay."""
    if repeat.get("prevMillis") is not None:
        return delay
    base = int(created + delay)
    start = repeat.get("startDate")
    earliest = max(base, int(start)) if start is not None else base
    every = repeat.get("every")
    immediately = repeat.get("immediately") is True
    if every is not None:
        slot = earliest + _offset(repeat)
        # Running now, the chain's grid still starts at ``slot``: its virtual
        # previous slot is one interval before.
        repeat["prevMillis"] = slot - every if immediately else slot
        return delay if immediately else float(slot - created)
    if immediately:
        repeat["prevMillis"] = base
        return delay
    fire = _pattern_after(repeat, earliest - 1)
    if fire is None:  # an expression that never fires: the one run, no chain
        repeat["prevMillis"] = base
        return delay
    repeat["prevMillis"] = fire
    return float(fire - created)


def next_slot(repeat: Mapping[str, Any], fallback: int, now: int) -> int | None:
    """The slot of the generation after the one whose slot is ``prevMillis``
    (``fallback`` if it has none), completed at ``now``; None ends the chain."""
    limit = repeat.get("limit")
    if limit is not None and repeat.get("count", 0) >= limit:
        return None
    previous = repeat.get("prevMillis")
    previous = fallback if previous is None else int(previous)
    start = repeat.get("startDate")
    every = repeat.get("every")
    slot: int | None
    if every is not None:
        slot = previous + every
        earliest = now + 1 if start is None else max(now + 1, int(start))
        if slot < earliest:  # late: skip the slots that passed, on the same grid
            slot += math.ceil((earliest - slot) / every) * every
        slot = int(slot)
    else:
        after = max(previous, now)
        if start is not None:
            after = max(after, int(start) - 1)
        slot = _pattern_after(repeat, after)
    end = repeat.get("endDate")
    if slot is None or (end is not None and slot > end):
        return None
    return slot


# ------------------------------------------------------------------- the chain


def follow(q: QueueState, job: JobRecord, now: int) -> None:
    """Admit the successor of ``job``, a repeat generation just completed, and name it
    in ``job.repeat`` (written with the completed record). Runs inside the ACK, after
    the job left the live set (its unique key is free for the successor)."""
    repeat = job.repeat
    assert repeat is not None
    if SUCCESSOR_KEY in repeat:
        # A completed generation run again (RetryCompleted): its successor exists, so
        # a second one would fork the chain. (A dead-lettered generation retried has
        # none: completing it resumes the chain.)
        return
    slot = next_slot(repeat, job.run_at, now)
    if slot is None:
        return
    spec = {attr: getattr(job, attr) for attr in _COPIED}
    spec["repeat"] = {**repeat, "count": int(repeat.get("count", 0)) + 1, "prevMillis": slot}
    spec["repeat"].pop(SUCCESSOR_KEY, None)
    spec["delay"] = float(max(0, slot - now))
    spec["timestamp"] = now
    try:
        successor = producing.push_one(q, spec, now)
    except Refused:
        # Only a uniqueKey replace whose holder has dependents refuses, and before it
        # changes anything: the chain ends there rather than failing the ACK.
        return
    job.repeat = {**repeat, SUCCESSOR_KEY: successor}


def may_follow(job: JobRecord) -> bool:
    """Whether completing ``job`` may admit a successor (:func:`follow`): the ACK then
    asks the store for room for it first, as a push would (it cannot be refused
    once the job is completed)."""
    repeat = job.repeat
    return repeat is not None and SUCCESSOR_KEY not in repeat


def pending_successor(q: QueueState, job_id: str) -> JobRecord | None:
    """The live successor named by the completed repeat job ``job_id``, if any (a read
    of the finished record: may raise NeedData, so call it before any change)."""
    record = q.finished.get(job_id)
    repeat = record.get("repeat") if record is not None else None
    successor_id = repeat.get(SUCCESSOR_KEY) if isinstance(repeat, dict) else None
    if not isinstance(successor_id, str):
        return None
    return q.jobs.get(successor_id)
