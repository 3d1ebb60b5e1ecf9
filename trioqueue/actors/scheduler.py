"""The cron scheduler: one task and one timer for every schedule of the broker.

It owns the registry (:class:`~trioqueue.core.crons.CronRegistry`, loaded from the
store's ``cron`` records at startup) and sleeps until the earliest ``nextRun`` (or until
a ``Cron``/``CronDelete`` changes the registry). A due schedule is decided
(:func:`~trioqueue.core.crons.decide`), advanced in memory, and, when it fires, sent to
its queue's actor as ``__cron_fire__`` with the job and the advanced record, which the
queue commits together. The scheduler does not wait for that commit: the registry in
memory runs ahead of the store by at most the firings in flight, and a crash before
their commit loses both the job and the count together, so the slot fires again on the
next start (or is skipped, with ``skipMissedOnRestart``).

Why one task and not a timer per schedule: 10,000 schedules are one heap and one
``move_on_at``; a firing costs O(log n). Schedules that fall due together are fired
:data:`FIRINGS_PER_STEP` at a time, the loop given back between two, so a thousand
schedules of one period do not hold it for the time of a thousand firings.

A firing its queue refuses (a full store, the broker's ``max_queues``, data a lower
limit now refuses) is not counted: the schedule is tried again later, later each time
it is refused (:class:`RefusedFirings`), and the log says so once when it starts being
refused and once when it fires again, not at each try.

In a cluster (docs/scale-out.md) one broker runs the schedules, the holder of the
scheduler's lease (actors/cluster_crons.py): its registry is loaded when it takes the
lease (:meth:`CronScheduler.take`) and emptied when it hands it over
(:meth:`CronScheduler.drop`), every write of a schedule is fenced by that lease
(:attr:`CronScheduler.lease`), and a firing is handed to ``fire`` instead of a queue's
actor (the queue may be served by another broker).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from itertools import islice
from typing import Any

import trio

from ..core import crons as cr
from ..core.broker_events import broker_event
from ..core.clock import Clock
from ..core.cron_handlers import CRON_FIRE, stored
from ..core.errors import Refused
from ..core.workers import WorkerRegistry
from ..storage.keys import encode_value
from .request import Request

log = logging.getLogger("trioqueue.cron")

# Due schedules handled before the loop is given back. Each firing's push is made by its
# queue's actor and committed by the writer in the same pass, so a pass holds several
# times a firing's cost: a few a step keep every pass short while a thousand fall due.
FIRINGS_PER_STEP = 4


class RefusedFirings:
    """The schedules whose firings are being refused, each with how many in a row:
    how long until each is tried again (:func:`~trioqueue.core.crons.retry_delay_ms`),
    and one log line when a schedule starts being refused and one when it fires again.
    A firing refused at every slot used to be tried at the schedule's own rate and
    logged each time: a line a millisecond, forever."""

    def __init__(self, first_ms: int, max_ms: int) -> None:
        self._first_ms = first_ms
        self._max_ms = max_ms
        self._runs: dict[str, int] = {}  # schedule -> refusals in a row

    def __contains__(self, name: str) -> bool:
        return name in self._runs

    def refused(self, defn: cr.CronDef, slot: int, error: Any) -> int:
        """One more refusal of ``defn``'s firing of ``slot``: the delay before the
        next try."""
        refusals = self._runs[defn.name] = self._runs.get(defn.name, 0) + 1
        if refusals == 1:
            log.warning("cron %s: a firing was refused (%s); tried again %d ms later, "
                        "twice as long after each further refusal (at most %d ms or its "
                        "period), until one fires", defn.name, error, self._first_ms,
                        self._max_ms)
        return cr.retry_delay_ms(defn, slot, refusals, self._first_ms, self._max_ms)

    def fired(self, name: str) -> None:
        refusals = self._runs.pop(name, None)
        if refusals is not None:
            log.warning("cron %s: fires again, after %d refused firings", name, refusals)

    def forget(self, name: str) -> None:
        """The schedule is gone (deleted, or run by another broker now)."""
        self._runs.pop(name, None)

    def clear(self) -> None:
        self._runs.clear()


class _Firing:
    """Where a firing's answer lands: the schedule as it was before the firing advanced
    it, so that a firing its queue refused can be undone and tried again."""

    __slots__ = ("_scheduler", "name", "slot", "executions", "last_fired")

    def __init__(self, scheduler: CronScheduler, defn: cr.CronDef) -> None:
        self._scheduler = scheduler
        self.name = defn.name
        self.slot = defn.next_run
        self.executions = defn.executions
        self.last_fired = defn.last_fired

    def deliver(self, reply: dict[str, Any]) -> None:
        self._scheduler.answered(self, reply)


class CronScheduler:
    def __init__(self, clock: Clock, workers: WorkerRegistry, post: Any,
                 submit: Any, *, fire: Callable[[cr.CronDef], None] | None = None,
                 lease: str | None = None, full_retry_ms: int = 1000,
                 retry_max_ms: int = 60_000,
                 limits: cr.CronLimits | None = None) -> None:
        """``post(queue, request)``: hand a request to a queue's actor without waiting
        (the router's; it makes the actor if the queue has none yet); ``submit(writes)``:
        the storage writer's, for a schedule deleted at its maxLimit. In a cluster:
        ``fire(schedule)`` sends a firing (the schedule already advanced) in place of
        ``post``, and ``lease`` names the lease that fences the schedules' writes.
        ``full_retry_ms``: how long after a refused firing it is tried again (doubled
        at each further refusal, up to ``retry_max_ms`` or its period); ``limits``:
        what the Cron command may ask (none: any schedule)."""
        self.registry = cr.CronRegistry()
        self.lease = lease
        self.limits = limits if limits is not None else cr.CronLimits()
        self._clock = clock
        self._workers = workers
        self._post = post
        self._submit = submit
        self._fire = fire
        self.refused = RefusedFirings(full_retry_ms, max(full_retry_ms, retry_max_ms))
        self._changed = trio.Event()
        # What a firing of each schedule writes, for its admission (see _firing_bytes).
        self._sizes: dict[str, tuple[cr.CronDef, int]] = {}
        # Where cron:skipped and cron:missed go (the router's announce; None: nowhere).
        self.announce: Callable[[list[dict[str, Any]]], None] | None = None

    # ------------------------------------------------------------------ Schedules

    def __len__(self) -> int:
        return len(self.registry)

    def get(self, name: str) -> cr.CronDef | None:
        return self.registry.by_name.get(name)

    def upsert(self, defn: cr.CronDef) -> None:
        self.registry.put(defn)
        self._changed.set()

    def remove(self, name: str) -> cr.CronDef | None:
        self._sizes.pop(name, None)
        removed = self.registry.delete(name)
        if removed is not None:
            self.refused.forget(name)
            self._changed.set()
        return removed

    def listing(self) -> list[dict[str, Any]]:
        return self.registry.listing()

    # ------------------------------------------------------------------ startup

    def load(self, records: dict[str, dict[str, Any]], now: int) -> None:
        """The stored schedules, missed runs skipped where they ask (crons.restored)."""
        for record in records.values():
            self.registry.put(cr.restored(cr.CronDef.from_record(record), now))

    def take(self, records: dict[str, dict[str, Any]], late_ms: int) -> None:
        """A cluster's: this broker runs the schedules from now on, ``records`` as the
        store holds them (read after the lease was claimed). A slot missed by at most
        ``late_ms`` (while the lease moved: a handover, a takeover) fires now, late; one
        missed for longer (every broker was down) is skipped as after a restart."""
        registry = self.registry = cr.CronRegistry()
        self.refused.clear()
        now = self._clock.now_ms()
        for record in records.values():
            defn = cr.CronDef.from_record(record)
            registry.put(defn if defn.next_run >= now - late_ms else cr.restored(defn, now))
        self._changed.set()

    def drop(self) -> None:
        """A cluster's: another broker runs the schedules from now on (nothing more
        fires here; what fired is committed by the caller)."""
        self.registry = cr.CronRegistry()
        self.refused.clear()
        self._changed.set()

    # ------------------------------------------------------------------ the timer

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            due = self.registry.next_due()
            # Waits are on trio's clock (MockClock moves them): the wall instant of the
            # next run, converted; a change of the registry wakes the wait early.
            deadline = math.inf if due is None else self._clock.deadline_for(due)
            with trio.move_on_at(deadline):
                await self._changed.wait()
            self._changed = trio.Event()
            self.fire_due(self._clock.now_ms())
            await trio.lowlevel.checkpoint()

    def fire_due(self, now: int, at_most: int = FIRINGS_PER_STEP) -> int:
        """Handle up to ``at_most`` schedules due at ``now`` (the rest at the next
        step: ``run`` comes straight back for them); how many fired."""
        fired = 0
        for defn in list(islice(self.registry.due(now), at_most)):
            has_worker = (not defn.skip_if_no_worker
                          or self._workers.has_active_worker(defn.queue, now))
            action, reason = cr.decide(defn, now, has_worker)
            if action == cr.EXHAUSTED:
                self.registry.delete(defn.name)
                self._submit(stored(defn.name, None, self.lease))
                continue
            if action == cr.SKIP:
                log.debug("cron %s: slot %d skipped (%s)", defn.name, defn.next_run, reason)
                self._tell("cron:skipped", now, defn, reason=reason)
            before = _Firing(self, defn) if action == cr.FIRE else None
            cr.advance(defn, now, fired=action == cr.FIRE)
            if action == cr.FIRE:
                self._no_faster_than_allowed(defn, now)
            self.registry.put(defn)
            if action == cr.FIRE:
                fired += 1
                assert before is not None
                self._send(defn, before)
        return fired

    def _tell(self, event_type: str, now: int, defn: cr.CronDef, **data: Any) -> None:
        if self.announce is not None:
            self.announce([broker_event(event_type, now, name=defn.name, queue=defn.queue,
                                        **data)])

    def _no_faster_than_allowed(self, defn: cr.CronDef, now: int) -> None:
        """A schedule kept from before a higher ``cron_min_interval_ms`` (the Cron
        command refuses a new one) fires no more often than that minimum either."""
        minimum = self.limits.min_interval_ms
        if defn.repeat_every is not None and defn.repeat_every < minimum:
            defn.next_run = max(defn.next_run, now + math.ceil(minimum))

    def _send(self, defn: cr.CronDef, before: _Firing) -> None:
        if self._fire is not None:
            self._fire(defn)
            return
        record = defn.to_record()
        try:
            self._post(defn.queue, Request(CRON_FIRE, {
                "name": defn.name, "record": record, "job": defn.job_message()},
                before, frame_bytes=self._firing_bytes(defn, record)))
        except Refused as exc:  # (no actor could be made for its queue: max_queues)
            self.answered(before, {"ok": False, "error": exc.message})

    def _firing_bytes(self, defn: cr.CronDef, record: dict[str, Any]) -> int:
        """What a firing writes, admitted as a push's frame of that size: the job and
        the schedule's record, which both hold the template's data. Measured once per
        version of the schedule (an upsert makes a new one): a firing of a large
        template is admitted by its size, not as an empty push."""
        known = self._sizes.get(defn.name)
        if known is None or known[0] is not defn:
            known = self._sizes[defn.name] = (defn, 2 * len(encode_value(record)))
        return known[1]

    # ------------------------------------------------------------------ replies

    def deliver(self, reply: dict[str, Any]) -> None:
        """A queue's answer to a store of a schedule: only refusals matter (logged)."""
        if not reply.get("ok"):
            log.warning("cron: a firing or store was refused: %s", reply.get("error"))

    def answered(self, firing: _Firing, reply: dict[str, Any]) -> None:
        """A queue's answer to a firing. A refused one stored nothing (cron_fire): the
        schedule is put back as it was before it, not counted, and tried again after
        :class:`RefusedFirings`' delay (its slots until then skipped), rather than
        counted in memory without its job until a restart."""
        name = firing.name
        if reply.get("ok"):
            self.refused.fired(name)
            return
        defn = self.registry.by_name.get(name)
        if defn is None:
            return  # deleted since: nothing to try again
        delay = self.refused.refused(defn, firing.slot, reply.get("error"))
        self._tell("cron:missed", self._clock.now_ms(), defn, error=reply.get("error"))
        if defn.executions != firing.executions + 1:
            return  # replaced or fired since: nothing of this firing to undo
        defn.executions = firing.executions
        defn.last_fired = firing.last_fired
        defn.next_run = self._clock.now_ms() + delay
        self.registry.put(defn)
        self._changed.set()
