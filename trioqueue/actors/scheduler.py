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
``move_on_at``; a firing costs O(log n).

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
from typing import Any

import trio

from ..core import crons as cr
from ..core.clock import Clock
from ..core.cron_handlers import CRON_FIRE, stored
from ..core.errors import STORAGE_FULL
from ..core.workers import WorkerRegistry
from ..storage.keys import encode_value
from .request import Request

log = logging.getLogger("trioqueue.cron")


class _Firing:
    """Where a firing's answer lands: the schedule as it was before the firing advanced
    it, so that a firing the store had no room for can be undone and tried again."""

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
                 lease: str | None = None, full_retry_ms: int = 1000) -> None:
        """``post(queue, request)``: hand a request to a queue's actor without waiting
        (the router's; it makes the actor if the queue has none yet); ``submit(writes)``:
        the storage writer's, for a schedule deleted at its maxLimit. In a cluster:
        ``fire(schedule)`` sends a firing (the schedule already advanced) in place of
        ``post``, and ``lease`` names the lease that fences the schedules' writes.
        ``full_retry_ms``: how long after a firing refused for a full store it is
        tried again."""
        self.registry = cr.CronRegistry()
        self.lease = lease
        self._clock = clock
        self._workers = workers
        self._post = post
        self._submit = submit
        self._fire = fire
        self._full_retry_ms = full_retry_ms
        # Schedules whose last firing the store had no room for (logged once, until
        # one fires again).
        self._refused: set[str] = set()
        self._changed = trio.Event()
        # What a firing of each schedule writes, for its admission (see _firing_bytes).
        self._sizes: dict[str, tuple[cr.CronDef, int]] = {}

    # ------------------------------------------------------------------ Schedules

    def get(self, name: str) -> cr.CronDef | None:
        return self.registry.by_name.get(name)

    def upsert(self, defn: cr.CronDef) -> None:
        self.registry.put(defn)
        self._changed.set()

    def remove(self, name: str) -> cr.CronDef | None:
        self._sizes.pop(name, None)
        removed = self.registry.delete(name)
        if removed is not None:
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
        now = self._clock.now_ms()
        for record in records.values():
            defn = cr.CronDef.from_record(record)
            registry.put(defn if defn.next_run >= now - late_ms else cr.restored(defn, now))
        self._changed.set()

    def drop(self) -> None:
        """A cluster's: another broker runs the schedules from now on (nothing more
        fires here; what fired is committed by the caller)."""
        self.registry = cr.CronRegistry()
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

    def fire_due(self, now: int) -> int:
        """Handle every schedule due at ``now``; how many fired."""
        fired = 0
        for defn in list(self.registry.due(now)):
            has_worker = (not defn.skip_if_no_worker
                          or self._workers.has_active_worker(defn.queue, now))
            action, reason = cr.decide(defn, now, has_worker)
            if action == cr.EXHAUSTED:
                self.registry.delete(defn.name)
                self._submit(stored(defn.name, None, self.lease))
                continue
            if action == cr.SKIP:
                log.debug("cron %s: slot %d skipped (%s)", defn.name, defn.next_run, reason)
            before = _Firing(self, defn) if action == cr.FIRE else None
            cr.advance(defn, now, fired=action == cr.FIRE)
            self.registry.put(defn)
            if action == cr.FIRE:
                fired += 1
                if self._fire is not None:
                    self._fire(defn)
                    continue
                assert before is not None
                record = defn.to_record()
                self._post(defn.queue, Request(CRON_FIRE, {
                    "name": defn.name, "record": record, "job": defn.job_message()},
                    before, frame_bytes=self._firing_bytes(defn, record)))
        return fired

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
        """A queue's answer to a firing. One refused for a full store stored nothing
        (cron_fire): the schedule is put back as it was before it and fired again
        ``full_retry_ms`` later, rather than counted in memory without its job until a
        restart. Said once in the log, and once more when it fires again."""
        name = firing.name
        if reply.get("ok"):
            if name in self._refused:
                self._refused.discard(name)
                log.warning("cron %s: fires again, the store has room", name)
            return
        error = reply.get("error")
        if error != STORAGE_FULL:
            log.warning("cron %s: a firing was refused: %s", name, error)
            return
        if name not in self._refused:
            self._refused.add(name)
            log.warning("cron %s: a firing was refused (%s); tried again every %d ms "
                        "until the store has room", name, error, self._full_retry_ms)
        defn = self.registry.by_name.get(name)
        if defn is None or defn.executions != firing.executions + 1:
            return  # deleted, replaced or fired since: nothing of this firing to undo
        defn.executions = firing.executions
        defn.last_fired = firing.last_fired
        # (its next slot, if that comes first: the two are one firing then)
        defn.next_run = min(defn.next_run, self._clock.now_ms() + self._full_retry_ms)
        self.registry.put(defn)
        self._changed.set()
