"""The broker core: storage, the writer, the router and the queue actors, in one nursery.

:meth:`Broker.run` opens the store, rebuilds every queue from it (before anything can
connect), then serves until cancelled. Shutdown is structured: whoever owns the broker
stops the listeners first, calls :meth:`drain` so commands already accepted are applied,
then cancels :meth:`run`, whose ``finally`` flushes the last commit under a shielded,
bounded scope and closes the store. No task outlives the broker's nursery.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from ..config import Config
from ..core.clock import Clock
from ..core.queue import in_admission_order
from ..storage.port import Storage
from .clock import TrioClock
from .events import EventHub
from .queue_actor import Admission, QueueActor
from .router import Router
from .writer import StorageWriter

log = logging.getLogger("trioqueue.broker")


def open_storage(config: Config) -> Storage:
    limit = config.store_limit_bytes()
    if config.memory:
        from ..storage.memory import MemoryStorage

        return MemoryStorage(max_bytes=limit)
    from ..storage.lmdb_store import LmdbStorage

    assert limit is not None  # LMDB always has a maximum (1 TiB by default)
    return LmdbStorage(config.data_dir, max_map_size_bytes=limit)


class Broker:
    def __init__(self, config: Config, storage: Storage | None = None,
                 clock: Clock | None = None) -> None:
        config.validate()
        self.config = config
        self.storage = storage if storage is not None else open_storage(config)
        # New jobs are refused past this many used bytes (None: the store has no
        # limit). Taken from the store itself, so an injected store's limit counts.
        store_max = self.storage.max_bytes
        self.admit_limit_bytes: int | None = None
        if store_max is not None:
            reserve = config.reserve_bytes_for(store_max)
            if reserve >= store_max:
                raise ValueError("store_reserve_bytes must be less than the store's maximum")
            self.admit_limit_bytes = store_max - reserve
        self._clock = clock
        self.writer = StorageWriter(self.storage, fsync=config.fsync,
                                    fsync_interval_s=config.fsync_interval_s)
        self.router = Router(self)
        self.events = EventHub()
        # One limit for TCP and WebSocket connections together.
        self.connections = trio.CapacityLimiter(config.max_connections)
        self._nursery: trio.Nursery | None = None
        self.recovered_jobs = 0

    @property
    def clock(self) -> Clock:
        assert self._clock is not None, "the clock is set when the broker runs"
        return self._clock

    def admission(self) -> Admission | None:
        """A fresh admission check for one batch, or None when the store has no limit."""
        return None if self.admit_limit_bytes is None else Admission(self)

    def storage_room(self, *, exact: bool) -> int:
        """Bytes new jobs may still take before the reserve (negative: refuse them).

        ``exact=False`` answers from the store's cheap upper bound of its use, a lower
        bound of the room. ``exact=True`` commits what is pending first (writes held
        for an fsync, this batch's earlier commands), so they are counted; that costs
        an extra transaction, but only for a store that is nearly full.
        """
        limit = self.admit_limit_bytes
        assert limit is not None
        if not exact:
            return limit - self.storage.used_bytes_bound()
        self.writer.commit_now()
        return limit - self.storage.used_bytes()

    def publish(self, events: list[dict[str, Any]]) -> None:
        self.events.publish(events)

    def start_actor(self, actor: QueueActor) -> None:
        assert self._nursery is not None
        self._nursery.start_soon(actor.run, name=f"queue:{actor.name}")

    def spawn(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        assert self._nursery is not None
        self._nursery.start_soon(fn, *args)

    def _recover(self) -> None:
        recovered = self.storage.load()
        now = self.clock.now_ms()
        for name, meta in recovered.queue_meta.items():
            self.router.actor(name, recovering=True).state.load_meta(meta)
        self.router.dependents.register(recovered.live_jobs)
        for record in in_admission_order(recovered.live_jobs):
            self.router.actor(record["queue"], recovering=True).state.restore(record, now)
        actors = self.router.actors.values()
        for actor in actors:
            actor.state.replay_outcomes(now)
        # Notices made by recovery (a buried child settling its parents, replayed
        # outcomes releasing a parent) are applied here, before anyone connects.
        while notices := [n for actor in actors for n in actor.state.take_notices()]:
            for job_id, notice in notices:
                queue = self.router.locate(job_id)
                if queue is not None:
                    self.router.actors[queue].state.apply_notice(notice, now)
        for actor in actors:
            self.writer.submit(actor.state.take_writes())
            actor.state.take_events()
        self.writer.commit_now()
        self.recovered_jobs = len(recovered.live_jobs)

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        if self._clock is None:
            self._clock = TrioClock()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await nursery.start(self.writer.run)
                nursery.start_soon(self.writer.run_interval_sync)
                self._recover()
                task_status.started(self)
                await trio.sleep_forever()
        finally:
            # Whatever ended the broker (cancellation at shutdown, or a crash), commit and
            # answer what was accepted: shielded so cancellation cannot cut the flush
            # short, bounded so a wedged disk cannot hang the exit forever.
            with trio.move_on_after(self.config.shutdown_grace_s, shield=True):
                try:
                    await self.writer.flush()
                except Exception:
                    log.exception("final flush failed")
            self.storage.close()

    async def drain(self) -> None:
        """Wait until every accepted command is applied and committed (bounded by grace)."""
        with trio.move_on_after(self.config.shutdown_grace_s):
            while True:
                busy = any(actor.pending or actor.backlog_size
                           for actor in self.router.actors.values()) or not self.writer.idle
                if not busy:
                    return
                await trio.sleep(0.01)
