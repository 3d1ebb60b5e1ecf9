"""The broker core: storage, the writer, the router and the queue actors, in one nursery.

:meth:`Broker.run` opens the store, rebuilds every queue from it (before anything can
connect), then serves until cancelled. Shutdown is structured: whoever owns the broker
stops the listeners first, calls :meth:`settle` so commands already accepted are applied,
then cancels :meth:`run`, whose ``finally`` flushes the last commit under a shielded,
bounded scope and closes the store. No task outlives the broker's nursery.

The broker is where the parts meet: it hands the router and each queue actor only what
they use (the interfaces of :mod:`trioqueue.actors.ports`), never itself.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from typing import Any

import trio

from ..config import Config
from ..core.clock import Clock
from ..core.metrics.broker_stats import (
    RATE_SAMPLE_MS,
    ConnectionCounts,
    ProcessNumbers,
    StorageHealth,
    StorageUsage,
)
from ..core.queue import QueueState
from ..core.recovery import rebuild
from ..core.repeating.crons import CRON_KIND, CronLimits
from ..core.resource_watch import ResourceWatch
from ..core.webhooks.registry import RECORD_KIND as WEBHOOK_RECORDS
from ..core.writes import Writes
from ..process_numbers import process_numbers, resident_bytes
from ..storage.port import Fence, Recovered, Storage, StorageOpenError, StoreInUse
from .admission import Admission, StoreLimit, admit_estimate
from .ahead_writes import AheadWriter
from .clock import PauseWatch, TrioClock
from .dismantler import Dismantler
from .events import EventHub
from .large_values import LargeValues
from .ports import (
    AdmissionFactory,
    Joining,
    LocalMembership,
    Membership,
    Placement,
    QueueLimits,
    RouterLimits,
    limits_from,
)
from .queue_actor import QueueActor
from .router import Router
from .scheduler import CronScheduler
from .webhook_delivery import WebhookDelivery
from .writer import StorageWriter

log = logging.getLogger("trioqueue.broker")


def open_storage(config: Config, fence: Fence | None = None) -> Storage:
    """The store the configuration names; :class:`StorageOpenError` (one line) when
    it cannot be opened. ``fence``: in a cluster, the leases this broker holds."""
    if config.storage_url:
        return open_postgres(config.storage_url, config.pg_outage_s, fence)
    limit = config.store_limit_bytes()
    if config.memory:
        from ..storage.memory import MemoryStorage

        return MemoryStorage(max_bytes=limit)
    from ..storage.lmdb.store import LmdbStorage

    assert limit is not None  # LMDB always has a maximum (1 TiB by default)
    return LmdbStorage(config.data_dir, max_map_size_bytes=limit)


def open_postgres(url: str, outage_s: float, fence: Fence | None = None) -> Storage:
    """A PostgreSQL store, its schema migrated; waits up to ``outage_s`` for a server
    that is not up yet (started beside the broker)."""
    try:
        from ..storage.pg.store import PgStorage
    except ImportError as exc:  # psycopg is an optional dependency
        raise StorageOpenError(
            f"PostgreSQL storage needs psycopg: pip install 'trioqueue[postgres]' ({exc})"
        ) from None
    from ..storage.pg.connection import StorageUnavailable, redact
    from ..storage.pg.owner import PgOwner
    from ..storage.pg.schema import SchemaTooNew

    # One owner: exclusive alone, shared in a cluster (the fence says which).
    owner = PgOwner(redact(url), cluster=fence is not None, wait_s=outage_s)
    try:
        return PgStorage(url, outage_s=outage_s, fence=fence, owner=owner)
    except StoreInUse:  # (its line is the whole story)
        raise
    except Exception as exc:  # (ours name the server; psycopg's own, a bad URL: add it)
        why = str(exc).strip() or type(exc).__name__
        if not isinstance(exc, (StorageUnavailable, SchemaTooNew)):
            why = f"{redact(url)}: {why}"
        raise StorageOpenError(f"cannot open the PostgreSQL store: {why}") from None


class Broker:
    def __init__(self, config: Config, storage: Storage | None = None,
                 clock: Clock | None = None, *, joining: Joining | None = None) -> None:
        config.validate()
        if config.cluster and joining is None:
            raise ValueError("a cluster's broker joins through trioqueue.cluster "
                             "(server.run.new_broker)")
        self.config = config
        # In a cluster (docs/scale-out.md): the leases held, which fence every commit.
        held = joining.fence if joining is not None else None
        self.storage = storage if storage is not None else open_storage(config, held)
        # New jobs are refused past this many used bytes (None: the store has no
        # limit). Taken from the store itself, so an injected store's limit counts.
        store_max = self.storage.max_bytes
        self.admit_limit_bytes: int | None = None
        self.store_limit: StoreLimit | None = None
        if store_max is not None:
            reserve = config.reserve_bytes_for(store_max)
            if reserve >= store_max:
                raise ValueError("store_reserve_bytes must be less than the store's maximum")
            self.admit_limit_bytes = store_max - reserve
            # (and the disk: an LMDB store's file system may fill before its maximum)
            self.store_limit = StoreLimit(self.admit_limit_bytes, self.storage.disk_bytes,
                                          config)
        self._finish_allowance_bytes = config.store_finish_allowance_bytes
        self._clock = clock
        self.writer = StorageWriter(
            self.storage, fsync=config.fsync, fsync_interval_s=config.fsync_interval_s,
            refusal_grace_s=config.cluster_fenced_grace_s if config.cluster else 0.0)
        self.events = EventHub()
        self.queue_limits = limits_from(config, QueueLimits)
        # The broker's part in a cluster (docs/scale-out.md), and the placement the
        # router asks: a single broker's own, or the member's.
        finished_queues = self._finished_queues if self.storage.apply_blocks else None
        placement: Placement | None = None
        self.membership: Membership
        if joining is not None:
            member = joining.member(config, self.storage, self.writer, self.events,
                                    spawn=self.spawn, rebuild=self._adopt)
            self.membership, placement = member, member.placement
            finished_queues = member.queues_of
        else:
            self.membership = LocalMembership(self.storage)
        self.router = Router(
            committer=self.writer, find_queue=self._find_queue,
            now_ms=self._now_ms, limits=limits_from(config, RouterLimits),
            admission=self.admission_factory, new_actor=self._new_actor, spawn=self.spawn,
            count_stored=self._count_stored, finished_queues=finished_queues,
            placement=placement)
        self.router.hub = self.events
        self.membership.attach(self.router)
        stats = self.router.stats
        stats.metrics_max_queues = config.metrics_max_queues
        stats.process = lambda: ProcessNumbers._make(process_numbers())
        stats.storage_usage = self.storage_usage
        # Open connections per transport: each transport opens and closes its own.
        self.open_connections: ConnectionCounts = stats.connections
        self.open_connections.announce = self.router.announce  # (client:connected...)
        self.open_connections.listening = lambda: self.events.active
        self.open_connections.now_ms = self._now_ms
        # storage:size-warning and server:memory-warning, looked at with the rates.
        self.resources = ResourceWatch(config.storage_warning_mib, config.memory_warning_mib)
        # Disk full or a failed commit (StorageStatus, the HTTP layer's /health).
        self.storage_health: StorageHealth = stats.storage_health
        if config.otel_enabled:
            from .tracing import broker_tracing  # (imports OpenTelemetry: only when on)

            self.router.tracing = broker_tracing()
        # POSTs the events of watched queues to the webhooks (the router's registry).
        self.webhook_delivery = WebhookDelivery(self.router.webhooks, config,
                                                now_ms=self._now_ms)
        self.webhook_delivery.announce = self.router.announce
        # A PUSH's long data string is written before the command runs, a piece at a
        # time (None: the store takes no writes ahead).
        self.ahead = (AheadWriter(self.storage,
                                  self if self.admit_limit_bytes is not None else None,
                                  config.max_data_bytes)
                      if self.storage.ahead_piece_bytes else None)
        # An ACK's result or a progress of many values is made ready a slice at a
        # time before the command (its row encoded; its JSON text made).
        self.large_values = LargeValues(self.storage, self.router.has_dependents)
        # Large data the store lets go of is taken apart a slice at a time.
        self.dismantler = Dismantler()
        self.storage.set_graveyard(self.dismantler.graveyard)
        self.router.results.graveyard = self.dismantler.graveyard
        # One limit for TCP and WebSocket connections together.
        self.connections = trio.CapacityLimiter(config.max_connections)
        self._nursery: trio.Nursery | None = None
        self.recovered_jobs = 0
        # Notices a pause of the broker's own loop (set in run, once the clock is known).
        self.pauses: PauseWatch | None = None
        # The cron schedules' one timer (made in run, with the clock; loaded by recovery).
        self.scheduler: CronScheduler | None = None

    @property
    def clock(self) -> Clock:
        assert self._clock is not None, "the clock is set when the broker runs"
        return self._clock

    @property
    def admission_factory(self) -> AdmissionFactory | None:
        """Makes a fresh admission check per batch; None when the store has no limit."""
        return None if self.admit_limit_bytes is None else self._admission

    def _admission(self) -> Admission:
        return Admission(self)

    def _now_ms(self) -> int:
        # The router is built before the clock is known (see run): read it late.
        return self.clock.now_ms()

    def _find_queue(self, job_id: str) -> str | None:
        """A finished job's queue, after committing what is pending (read-your-writes);
        its record is read, not its data kept apart.

        Left synchronous (PUSHF's lookup of ids not in the live index): with a store
        whose calls block, this read may miss a commit still in flight and takes the
        trio thread for one read; see docs/architecture.md, "Known gaps"."""
        self.commit_if_inline()
        return self.storage.queues_of_finished([job_id]).get(job_id)

    async def _finished_queues(self, job_ids: list[str]) -> dict[str, str | None]:
        """The queues of finished jobs by id, for a store whose reads block: read in a
        worker thread after the writes already submitted are committed (so a job just
        finished is found), each id mapped to its queue or None."""
        storage = self.storage
        found = await self.writer.read_committed(
            lambda: storage.queues_of_finished(job_ids))
        return {job_id: found.get(job_id) for job_id in job_ids}

    def _count_stored(self, queue: str, state: str) -> int:
        """The ``state`` (completed, failed) jobs of ``queue`` in storage (O(1)), read
        as :meth:`_find_queue` reads."""
        self.commit_if_inline()
        return self.storage.count_finished(queue, state)

    def storage_usage(self, now: int) -> StorageUsage:
        """The store measured now (what is pending committed first, as for
        :meth:`_count_stored`); refreshes :attr:`storage_health` on the way: full when
        one more small job would be refused, failed once a commit or fsync failed."""
        if self.writer.failure is not None:
            what = "fsync" if "fsync" in str(self.writer.failure) else "commit"
            self.storage_health.note_failure(what, now)
        else:
            self.commit_if_inline()
        storage = self.storage
        used = storage.space().used_bytes
        if self.admit_limit_bytes is not None and not self.writer.failed:
            self.storage_room(exact=True)  # (notes a full store, or room again)
        if self.config.memory:
            return StorageUsage("memory", None, used, storage.max_bytes, None, None)
        if storage.location is not None:  # a database server (no password)
            return StorageUsage("postgresql", storage.location, used, None, None, None)
        path = os.path.abspath(self.config.data_dir)
        try:
            vfs = os.statvfs(path)
            free: int | None = vfs.f_bavail * vfs.f_frsize
        except OSError:
            free = None
        map_bytes = getattr(storage, "map_size", None)
        return StorageUsage("lmdb", path, used, storage.max_bytes, map_bytes, free)

    def commit_if_inline(self) -> None:
        if not self.writer.off_thread:
            self.writer.commit_now()

    def storage_room(self, *, exact: bool) -> int:
        """Bytes new jobs may still take (negative: refuse them): the admission limit
        (``max - reserve``, or less on a disk nearly full: StoreLimit), less what is
        used, less what the live jobs may still write to be pulled and finished
        (Storage.finish_bytes), so that every job accepted can be finished even once
        new ones are refused.

        ``exact=False`` answers from the store's cheap upper bounds, a lower bound of
        the room. ``exact=True`` commits what is pending first (writes held for an
        fsync, this batch's earlier commands), so they are counted; that costs an
        extra transaction, but only for a store that is nearly full.
        """
        assert self.store_limit is not None
        limit = self.store_limit.bytes(fresh=exact)
        storage = self.storage
        if exact:
            self.commit_if_inline()
            space = storage.space()
        else:
            space = storage.space_bound()
        room = limit - space.used_bytes - storage.finish_bytes(
            space.live_bytes, space.live_jobs, self._finish_allowance_bytes)
        health = self.storage_health
        if exact or health.disk_full:
            # An exact measure says whether one more small job fits; a cheap bound
            # (a lower bound of the room) can only say that it does.
            full = room < self.admit_need(0, 1)
            if exact or not full:
                health.note_room(full, self.clock.now_ms())
        return room

    def admit_need(self, frame_bytes: int | None, jobs: int) -> int:
        record = admit_estimate(frame_bytes, jobs)
        return record + self.storage.finish_bytes(record, jobs, self._finish_allowance_bytes)

    def _new_actor(self, name: str) -> QueueActor:
        """A queue's actor, given what it uses, and started in the broker's nursery."""
        assert self._nursery is not None
        router = self.router
        actor = QueueActor(
            name, committer=self.writer, index=router, clock=self.clock,
            post_notices=router.post_notices, post_to=router.post_to,
            events=self.webhook_delivery.sink(self.events, name),
            admission=self.admission_factory, limits=self.queue_limits,
            storage=self.storage, pauses=self.pauses)
        self._nursery.start_soon(actor.run, name=f"queue:{name}")
        return actor

    def _store_soon(self, writes: Writes) -> None:
        """Commit writes no reply waits for (a schedule deleted at its maxLimit) with
        the next commit, started now: merely submitted, they would wait for some
        command's, and a shutdown would wait for them in vain."""
        self.writer.submit(writes)
        self.writer.release([])

    def spawn(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        assert self._nursery is not None
        self._nursery.start_soon(fn, *args)

    def _recover(self) -> None:
        """Rebuild every queue from storage, before anyone connects (see core.recovery:
        the notices recovery makes are applied within it, so queues start settled).
        In a cluster no queue is rebuilt here: each is claimed and rebuilt by the
        broker that wins it (:meth:`_adopt`); the webhooks alone are loaded."""
        recovered = self.membership.load()
        router = self.router
        router.webhooks.load(recovered.broker_records.get(WEBHOOK_RECORDS, {}).values())
        self._rebuild(recovered, None, charge_active=True)
        self.commit_if_inline()  # a blocking store: run() awaits the commit
        self.recovered_jobs = len(recovered.live_jobs)
        assert self.scheduler is not None
        self.scheduler.load(recovered.broker_records.get(CRON_KIND, {}), self.clock.now_ms())

    def _adopt(self, recovered: Recovered, names: set[str]) -> None:
        """In a cluster: rebuild queues this broker just claimed. Their active jobs stay
        active with their locks; only a lock that then expires is charged."""
        self._rebuild(recovered, names, charge_active=False)
        self.recovered_jobs += len(recovered.live_jobs)

    async def join_cluster(self, tcp_port: int) -> None:
        """The TCP listener is bound (``tcp_port``: the port it got): in a cluster,
        join it; the tasks are the broker's, so they stop with it."""
        assert self._nursery is not None
        await self.membership.join(tcp_port, self._nursery)

    def _rebuild(self, recovered: Recovered, names: set[str] | None, *,
                 charge_active: bool) -> None:
        """Rebuild the queues ``names`` (None: every queue) from ``recovered`` into
        their actors and submit the writes that makes."""
        router = self.router
        with ExitStack() as direct:
            reading: set[str] = set()

            def state_for(name: str) -> QueueState | None:
                if names is not None and name not in names:
                    return None
                # Recovery is the shell driving the core: the queues' reads of
                # finished jobs are fetched as they are made.
                actor = router.actor(name, recovering=True)
                if name not in reading:
                    reading.add(name)
                    direct.enter_context(actor.reading_directly())
                return actor.state

            left = rebuild(recovered, self.clock.now_ms(), state_for=state_for,
                           locate=router.locate, dependents=router.dependents,
                           charge_active=charge_active)
        router.post_notices(left)  # (a whole restart: none, every queue was rebuilt)
        # A queue that kept only finished jobs is a queue too (ListQueues names it).
        for (name, _), count in recovered.finished_counts.items():
            if count and (names is None or name in names):
                router.actor(name, recovering=True)
        for name in names or ():  # (a claimed queue is served even when empty)
            router.actor(name, recovering=True)
        rebuilt = router.actors.values() if names is None else [
            router.actors[name] for name in names]
        for actor in rebuilt:
            self.writer.submit(actor.state.take_writes())
            actor.state.take_events()

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        if self._clock is None:
            self._clock = TrioClock()
        self.router.stats.started_ms = self._clock.now_ms()
        fire, lease = self.membership.cron_firing()  # (a cluster's: cluster/crons.py)
        self.scheduler = CronScheduler(
            self._clock, self.router.workers, self.router.post, self._store_soon,
            fire=fire, lease=lease,
            full_retry_ms=self.config.cron_full_retry_ms,
            retry_max_ms=self.config.cron_retry_max_ms,
            limits=CronLimits(self.config.cron_min_interval_ms,
                              self.config.max_cron_schedules, self.config.max_data_bytes),
            store=self.storage)
        self.membership.scheduler_made(self.scheduler)
        self.router.crons = self.scheduler
        self.scheduler.announce = self.router.announce
        if self.config.lease_grace_after_pause_s > 0:
            self.pauses = PauseWatch(self._clock, self.config.lease_grace_after_pause_s)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await nursery.start(self.writer.run)
                nursery.start_soon(self.writer.run_interval_sync)
                self._recover()
                await self.writer.commit()  # (already done for an inline store)
                await nursery.start(self.webhook_delivery.run)
                if self.pauses is not None:  # after recovery: that was no pause
                    await nursery.start(self.pauses.run)
                await nursery.start(self.scheduler.run)
                await nursery.start(self.dismantler.run)
                nursery.start_soon(self._sample_rates)
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
                else:
                    await self.membership.leave()
            self.storage.close()

    async def _sample_rates(self) -> None:
        """Sample the totals every RATE_SAMPLE_MS for the rates of Stats and the
        dashboard's throughput history: four counters read per queue, no job and no
        storage read. While someone listens, the store's size and the process's
        memory are looked at too, when they have a warning threshold (ResourceWatch)."""
        router = self.router
        while True:
            await trio.sleep(RATE_SAMPLE_MS / 1000)
            pushed = pulled = completed = failed = 0
            for actor in router.actors.values():
                c = actor.state.c
                pushed += c.pushed
                pulled += c.pulled
                completed += c.completed
                failed += c.failed
            now = self.clock.now_ms()
            router.stats.rates.sample(now, pushed, pulled)
            router.stats.history.sample(now, pushed, completed, failed)
            if self.resources.on and self.events.active:
                router.announce(self.resources.look(now, self.storage.used_bytes,
                                                    self._rss_bytes))

    @staticmethod
    def _rss_bytes() -> int:
        return resident_bytes()

    async def settle(self) -> None:
        """Wait until every accepted command is applied and committed (bounded by grace)."""
        with trio.move_on_after(self.config.shutdown_grace_s):
            while True:
                busy = any(actor.batches_in_flight or actor.backlog_size
                           for actor in self.router.actors.values()) or not self.writer.idle
                if not busy:
                    return
                await trio.sleep(0.01)
