"""The recovery sequence: rebuild queues from what storage kept, in one place.

The broker's start (every queue), a queue actor's restart (its own queue) and the test
harness (its one queue) all run :func:`rebuild`. It does no I/O: it takes the
:class:`~trioqueue.storage.port.Recovered` the caller loaded, leaves the writes in each
queue's outbox for the caller to commit, and returns the notices meant for queues it
did not rebuild.

The order, and why:

1. Each queue's settings (``load_meta``) and the marks of its DLQ entries
   (``load_dlq``: read before any job is buried here, whose entry it would not see),
   then the reverse dependency map, so a job buried while it is restored finds the
   parents waiting for it.
2. Every job that will not be charged is restored in admission order (``seq``), which
   keeps each queue's FIFO order and numbering the same across any number of restarts.
3. Outcome rows a crash separated from their notices are replayed, and what they set
   off (a parent buried, its own parents told) is settled to the end: those outcomes
   happened *before* the crash.
4. Only then are the jobs that were active at the crash charged an attempt (a broker
   restart; a queue actor's restart leaves them active, their workers are alive), in
   the order of :func:`in_charge_order`, and the notices that makes are settled, in
   that order, breadth first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from .flows import Dependents
from .job import ACTIVE, FAILED
from .queue import QueueState

Notice = tuple[str, tuple[Any, ...]]  # (target job id, notice)
Record = dict[str, Any]


class Stored(Protocol):
    """What a store kept, as recovery reads it (storage.port.Recovered)."""

    @property
    def live_jobs(self) -> list[Record]: ...
    @property
    def queue_meta(self) -> dict[str, dict[str, Any]]: ...
    @property
    def finished_counts(self) -> dict[tuple[str, str], int]: ...


def in_restore_order(records: Iterable[Record]) -> list[Record]:
    """Stored live jobs in the order their queues admitted them (``seq``).

    Storage hands records back in key (job id) order, which differs from admission
    order once custom ids are involved; restoring by ``seq`` keeps FIFO order the same
    across a restart. ``seq`` counts per queue, and sorting all queues together keeps
    each queue's own order.
    """
    return sorted(records, key=lambda record: record.get("seq", 0))


def in_charge_order(records: Iterable[Record]) -> list[Record]:
    """Jobs interrupted by a crash in the order recovery charges them: by ``createdAt``,
    then by id.

    When two interrupted children of one parent have conflicting failure policies
    (one ``failParentOnFailure``, one ``continueParentOnFailure``), the one charged
    first decides the parent. They died at the same instant, so the rule must not
    depend on anything but the jobs themselves. The creation order is the order the
    user pushed them in, and it is what they see on each job (``createdAt`` and
    ``id``), so they can tell which comes first. It does not change when a job is
    re-admitted (released by its dependencies, retried, moved back to wait), which
    ``seq`` does: charging by ``seq`` made the outcome depend on that history. Ids break
    ties within a millisecond; generated ids (UUIDv7, with a per-millisecond counter)
    sort in push order, so only custom ids pushed in the same millisecond fall back to
    the order of their names.
    """
    return sorted(records, key=lambda record: (record.get("createdAt", 0), record["id"]))


def rebuild(recovered: Stored, now: int, *, state_for: Callable[[str], QueueState | None],
            locate: Callable[[str], str | None], dependents: Dependents,
            charge_active: bool = True) -> list[Notice]:
    """Rebuild the queues ``state_for`` gives from ``recovered`` (see the module docstring).

    ``state_for(name)`` is the fresh state a queue is rebuilt into, or None for a queue
    that is not being rebuilt (its jobs are skipped); ``locate`` finds a job's queue in
    the broker-wide index the states fill. Notices for jobs of the rebuilt queues are
    applied here; the ones for other queues' jobs are returned for the caller to post.
    The caller commits each state's writes.
    """
    states: dict[str, QueueState] = {}

    def state(name: str) -> QueueState | None:
        found = states.get(name)
        if found is None:
            found = state_for(name)
            if found is not None:
                states[name] = found
        return found

    for name, meta in recovered.queue_meta.items():
        target = state(name)
        if target is not None:
            target.load_meta(meta)
    for (name, kind), count in recovered.finished_counts.items():
        # a queue may be known by its dead letters alone (no meta row, no live job)
        target = state(name) if kind == FAILED and count else None
        if target is not None:
            target.load_dlq()
    records = [r for r in recovered.live_jobs if state(r["queue"]) is not None]
    dependents.register(records)
    interrupted: list[Record] = []
    for record in in_restore_order(records):
        if charge_active and record.get("state") == ACTIVE:
            interrupted.append(record)
        else:
            states[record["queue"]].restore(record, now, charge_active=False)
    # An interrupted job is restored and charged in one step (QueueState.restore); it
    # gets a fresh seq, as a retry always does, so it never takes a stored one.
    charged: list[Notice] = []
    for record in in_charge_order(interrupted):
        target = states[record["queue"]]
        target.restore(record, now)
        charged.extend(target.take_notices())
    for target in states.values():
        target.replay_outcomes(now)
    replayed = [n for target in states.values() for n in target.take_notices()]
    left = _settle(replayed, states, locate, now)
    left.extend(_settle(charged, states, locate, now))
    return left


def _settle(notices: list[Notice], states: Mapping[str, QueueState],
            locate: Callable[[str], str | None], now: int) -> list[Notice]:
    """Apply ``notices`` and every notice they cause, breadth first, in the order they
    were made; return those addressed to queues outside ``states``. A notice for a job
    that is gone is dropped: whatever it was about no longer matters."""
    left: list[Notice] = []
    while notices:
        caused: list[Notice] = []
        for job_id, notice in notices:
            name = locate(job_id)
            if name is None:
                continue
            target = states.get(name)
            if target is None:
                left.append((job_id, notice))
                continue
            target.apply_notice(notice, now)
            caused.extend(target.take_notices())
        notices = caused
    return left
