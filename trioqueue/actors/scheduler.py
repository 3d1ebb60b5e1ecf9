"""The cron scheduler: one task and one timer for every schedule of the broker.

It owns the registry (:class:`~trioqueue.core.repeating.crons.CronRegistry`, loaded from the
store's ``cron`` records at startup) and sleeps until the earliest ``nextRun`` (or until
a ``Cron``/``CronDelete`` changes the registry). A due schedule is decided
(:func:`~trioqueue.core.repeating.crons.decide`), advanced in memory, and, when it fires, sent to
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

A template of many values (:data:`TEMPLATE_MIN_VALUES`) is encoded once, a slice at a
time (by the session for a ``Cron`` in a large frame, here for one loaded from the
store), and the store keeps those bytes while the schedule keeps that template
(:class:`TemplateBytes`): its record and every firing's job are written from them, and
a firing is admitted by their size; the template's measured JSON size
(``data_chars``) rides with each firing, so the queue does not measure it again.

In a cluster (docs/scale-out.md) one broker runs the schedules, the holder of the
scheduler's lease (cluster/crons.py): its registry is loaded when it takes the
lease (:meth:`CronScheduler.take`) and emptied when it hands it over
(:meth:`CronScheduler.drop`), every write of a schedule is fenced by that lease
(:attr:`CronScheduler.lease`), and a firing is handed to ``fire`` instead of a queue's
actor (the queue may be served by another broker).
"""

from __future__ import annotations

import logging
import math
import secrets
from collections.abc import Callable
from itertools import islice
from typing import Any

import trio

from ..core.broker_events import broker_event
from ..core.clock import Clock
from ..core.commands.crons import CRON_FIRE, stored
from ..core.errors import Refused
from ..core.large_values.json_slices import json_steps
from ..core.large_values.slicing import Slicer, run_paused
from ..core.large_values.value_count import holds_many
from ..core.repeating import crons as cr
from ..core.workers import WorkerRegistry
from ..storage.keys import AHEAD_ROW_KEY_BYTES, encode_value
from ..storage.port import Storage, StorageFullError
from ..storage.value_pieces import member_pieces
from .ahead_writes import AHEAD_MIN_VALUES
from .large_values import encoded_in_slices
from .request import OnReply, Request

log = logging.getLogger("trioqueue.cron")

# Due schedules handled before the loop is given back. Each firing's push is made by its
# queue's actor and committed by the writer in the same pass, so a pass holds several
# times a firing's cost: a few a step keep every pass short while a thousand fall due.
FIRINGS_PER_STEP = 4


class RefusedFirings:
    """The schedules whose firings are being refused, each with how many in a row:
    how long until each is tried again (:func:`~trioqueue.core.repeating.crons.retry_delay_ms`),
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


#: A template holding more values than this is encoded once and kept encoded.
TEMPLATE_MIN_VALUES = AHEAD_MIN_VALUES
#: How a job's data row begins: ``V({"d": data})``'s map header and key.
_ROW_HEAD = b"\x81\xa1d"


class TemplateBytes:
    """The msgpack bytes of each schedule's template of many values, kept by the store
    for that very object (``Storage.keep_encoded``) while the schedule keeps it: its
    record, written at each firing, and each firing's job are made from them. Encoded
    whole in the step that wrote them, a template of many small maps held the loop
    for its whole encoding at every firing."""

    def __init__(self, store: Storage | None) -> None:
        self._store = store
        self._by_name: dict[str, tuple[Any, bytes]] = {}
        self._unencoded: set[str] = set()  # loaded with many values, not encoded yet
        self._writing: set[int] = set()  # id(template) of firings written ahead, unanswered

    def adopt(self, defn: cr.CronDef) -> None:
        """``defn`` is the schedule now: its template's bytes, if the store keeps some
        for that object (its Cron command's, encoded ahead), are kept for it."""
        store = self._store
        old = self._by_name.pop(defn.name, None)
        if store is not None:
            encoded = store.encoded_of(defn.data)
            if encoded is not None:
                store.keep_encoded(defn.data, encoded)
                self._by_name[defn.name] = (defn.data, encoded)
            elif holds_many(defn.data, TEMPLATE_MIN_VALUES):
                self._unencoded.add(defn.name)
            if old is not None:
                store.drop_encoded(old[0])

    def forget(self, name: str) -> None:
        self._unencoded.discard(name)
        old = self._by_name.pop(name, None)
        if old is not None and self._store is not None:
            self._store.drop_encoded(old[0])

    def clear(self) -> None:
        for name in list(self._by_name):
            self.forget(name)
        self._unencoded.clear()

    def writes_ahead(self, defn: cr.CronDef) -> bool:
        """Whether a firing's job data is written ahead from ``defn``'s template bytes
        (kept, a store that takes writes ahead, and no firing of that template's
        written ahead still unanswered: the rows are found by the data object)."""
        return (self._store is not None and self._store.ahead_piece_bytes > 0
                and self.size_of(defn) is not None and id(defn.data) not in self._writing)

    async def write_ahead(self, request: Request, data: Any) -> None:
        """A firing's job data row (``V({"d": data})``) written ahead from the kept
        bytes, a piece a transaction with a pause between two, as a PUSH's data is
        (actors/ahead_writes.py): its commit then writes only the record. Not written
        (a full store): the commit writes the row from the kept bytes."""
        store = self._store
        encoded = store.encoded_of(data) if store is not None else None
        if store is None or encoded is None:
            return
        size = store.ahead_piece_bytes
        first = size - len(_ROW_HEAD)
        view = memoryview(encoded)
        pieces = [_ROW_HEAD + bytes(view[:first])] + [
            view[start:start + size] for start in range(first, len(view), size)]
        row_key = secrets.token_bytes(AHEAD_ROW_KEY_BYTES)
        written = 0
        self._writing.add(id(data))
        try:
            for piece in pieces:
                store.write_ahead(row_key, written, piece)
                written += 1
                await trio.lowlevel.checkpoint()
        except StorageFullError:
            store.drop_ahead_pieces(row_key, written)
            self._writing.discard(id(data))
            return
        except BaseException:
            store.drop_ahead_pieces(row_key, written)
            self._writing.discard(id(data))
            raise
        store.expect_ahead(data, row_key, written)
        writing = self._writing

        def released(_reply: dict[str, Any]) -> None:
            store.release_ahead(data)
            writing.discard(id(data))

        request.replier = OnReply(request.replier, released)

    def size_of(self, defn: cr.CronDef) -> int | None:
        """The bytes of ``defn``'s template, if kept encoded."""
        entry = self._by_name.get(defn.name)
        return len(entry[1]) if entry is not None and entry[0] is defn.data else None

    async def encode_loaded(self, registry: cr.CronRegistry) -> None:
        """Encode, a slice at a time, the templates of many values loaded from the
        store (their schedules fire once done: a firing would encode one whole)."""
        store = self._store
        while self._unencoded and store is not None:
            name = self._unencoded.pop()
            defn = registry.by_name.get(name)
            if defn is None or self.size_of(defn) is not None:
                continue
            data = defn.data
            encoded = await encoded_in_slices(member_pieces(data))
            if encoded is None or registry.by_name.get(name) is not defn or (
                    defn.data is not data):
                continue  # (replaced meanwhile: its own adoption decided)
            if defn.data_chars is None:
                # (stored before its size was: measured once here, not at each firing)
                chars = await _json_chars(data)
                if registry.by_name.get(name) is not defn or defn.data is not data:
                    continue
                defn.data_chars = chars
            store.keep_encoded(data, encoded)
            old = self._by_name.pop(name, None)
            self._by_name[name] = (data, encoded)
            if old is not None:
                store.drop_encoded(old[0])


async def _json_chars(value: Any) -> int:
    """The characters of ``value``'s compact JSON text (what the data limit counts),
    made a slice at a time."""
    slicer = Slicer()
    parts = await run_paused(json_steps(value, slicer), slicer, trio.lowlevel.checkpoint)
    return sum(map(len, parts))


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
                 limits: cr.CronLimits | None = None,
                 store: Storage | None = None) -> None:
        """``post(queue, request)``: hand a request to a queue's actor without waiting
        (the router's; it makes the actor if the queue has none yet); ``submit(writes)``:
        the storage writer's, for a schedule deleted at its maxLimit. In a cluster:
        ``fire(schedule)`` sends a firing (the schedule already advanced) in place of
        ``post``, and ``lease`` names the lease that fences the schedules' writes.
        ``full_retry_ms``: how long after a refused firing it is tried again (doubled
        at each further refusal, up to ``retry_max_ms`` or its period); ``limits``:
        what the Cron command may ask (none: any schedule); ``store``: where templates
        of many values are kept encoded (None: each firing encodes its own)."""
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
        # Firings whose job data is written ahead before they are sent (queue, request,
        # the schedule as it was, the template).
        self._ahead: list[tuple[str, Request, _Firing, Any]] = []
        # What a firing of each schedule writes, for its admission (see _firing_bytes).
        self._sizes: dict[str, tuple[cr.CronDef, int]] = {}
        self.templates = TemplateBytes(store)
        # Where cron:skipped and cron:missed go (the router's announce; None: nowhere).
        self.announce: Callable[[list[dict[str, Any]]], None] | None = None

    # ------------------------------------------------------------------ Schedules

    def __len__(self) -> int:
        return len(self.registry)

    def get(self, name: str) -> cr.CronDef | None:
        return self.registry.by_name.get(name)

    def upsert(self, defn: cr.CronDef) -> None:
        self.registry.put(defn)
        self.templates.adopt(defn)
        self._changed.set()

    def remove(self, name: str) -> cr.CronDef | None:
        self._sizes.pop(name, None)
        self.templates.forget(name)
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
            defn = cr.restored(cr.CronDef.from_record(record), now)
            self.registry.put(defn)
            self.templates.adopt(defn)

    def take(self, records: dict[str, dict[str, Any]], late_ms: int) -> None:
        """A cluster's: this broker runs the schedules from now on, ``records`` as the
        store holds them (read after the lease was claimed). A slot missed by at most
        ``late_ms`` (while the lease moved: a handover, a takeover) fires now, late; one
        missed for longer (every broker was down) is skipped as after a restart."""
        registry = self.registry = cr.CronRegistry()
        self.refused.clear()
        self.templates.clear()
        now = self._clock.now_ms()
        for record in records.values():
            defn = cr.CronDef.from_record(record)
            registry.put(defn if defn.next_run >= now - late_ms else cr.restored(defn, now))
            self.templates.adopt(defn)
        self._changed.set()

    def drop(self) -> None:
        """A cluster's: another broker runs the schedules from now on (nothing more
        fires here; what fired is committed by the caller)."""
        self.registry = cr.CronRegistry()
        self.refused.clear()
        self.templates.clear()
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
            await self.templates.encode_loaded(self.registry)
            self.fire_due(self._clock.now_ms())
            while self._ahead:
                queue, request, before, data = self._ahead.pop(0)
                await self.templates.write_ahead(request, data)
                self._post_firing(queue, request, before)
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
        request = Request(CRON_FIRE, {
            "name": defn.name, "record": record, "job": defn.job_message()},
            before, frame_bytes=self._firing_bytes(defn, record),
            json_bound=defn.data_chars)
        if self.templates.writes_ahead(defn):
            self._ahead.append((defn.queue, request, before, defn.data))  # (run sends it)
            return
        self._post_firing(defn.queue, request, before)

    def _post_firing(self, queue: str, request: Request, before: _Firing) -> None:
        try:
            self._post(queue, request)
        except Refused as exc:  # (no actor could be made for its queue: max_queues)
            self.answered(before, {"ok": False, "error": exc.message})

    def _firing_bytes(self, defn: cr.CronDef, record: dict[str, Any]) -> int:
        """What a firing writes, admitted as a push's frame of that size: the job and
        the schedule's record, which both hold the template's data. Measured once per
        version of the schedule (an upsert makes a new one): a firing of a large
        template is admitted by its size, not as an empty push."""
        known = self._sizes.get(defn.name)
        if known is None or known[0] is not defn:
            template = self.templates.size_of(defn)
            if template is None:
                size = len(encode_value(record))
            else:  # (the template's bytes kept: the rest of the record measured)
                size = template + len(encode_value({**record, "data": None}))
            known = self._sizes[defn.name] = (defn, 2 * size)
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
