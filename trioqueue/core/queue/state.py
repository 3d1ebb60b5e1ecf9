"""One queue's state machine: synchronous, knows nothing of sockets, trio or storage.

A :class:`QueueState` owns the live jobs of one queue (queued, active, waiting for
children), their ordering, locks, deduplication keys and parked pulls. Each command is a
method that takes ``now`` (epoch ms) and returns the reply payload bunqueue sends;
side effects are recorded, never performed:

- storage mutations go into ``self.writes`` (a :class:`~trioqueue.core.writes.Writes`)
  that the caller hands to the storage writer, so a reply is released only after its
  writes are committed;
- job events go into ``self.events``;
- the broker-wide job index (job id -> queue) is updated through the
  :class:`JobIndex` the caller passes in, synchronously, so a custom id is claimed the
  moment a push is admitted.

Finished jobs (completed, failed) live in storage; the queue reads them only through
its :class:`~.finished.FinishedView`, which answers from what the actor fetched and
raises :class:`~.finished.NeedData` otherwise, so the core never performs I/O.

Each concern is an owner this class composes (the ready order, leases, timeouts, dedup
keys, logs, parked requests...), the only writer of its fields; the commands below are
thin methods over the rule modules that own them (see ``docs/architecture.md``, "The
queue core"). The transition rules themselves are in :mod:`trioqueue.core.states`, the
attempt rules in :mod:`trioqueue.core.attempts`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..job import ACTIVE, JobRecord
from ..split_dict import SplitDict
from ..writes import Writes
from . import (
    cleaning,
    compaction,
    consuming,
    control,
    dedup,
    dependencies,
    dlq,
    dlq_work,
    leases,
    lifecycle,
    limits,
    moves,
    producing,
    stalls,
    views,
)
from . import (
    progress as progressing,
)
from . import (
    restore as restoring,
)
from . import waiters as waiting
from .dead_letters import DeadLetters
from .dedup import Dedup
from .finished import FinishedView
from .groups import Groups
from .leases import Leases, stored_lock
from .lifecycle import Counters
from .order import Places
from .ports import JobIndex
from .progress import Logs
from .ready import ReadyOrder
from .room import UNLIMITED, Room
from .settings import QueueSettings
from .stalls import StallWatch, Timeouts
from .waiters import Parked, PullWaiter, WaiterAnswer
from .watch import QueueWatch

if TYPE_CHECKING:
    from .slices import Sliced
    from .waiters import JobWaiter


class QueueState:
    # Slots, not a __dict__: past 30 attributes CPython 3.11 stops sharing an instance
    # dict's keys, and every ``q.method()`` call then misses its inline cache (a type
    # lookup each time: +3.5% of a PUSHB's instructions at 32 attributes, callgrind).
    __slots__ = (
        "name", "index", "finished", "jobs", "settings", "groups", "writes", "events",
        "events_enabled", "order", "slice_cap", "promote_cap", "slice_over", "leases",
        "rate_wake", "dedup", "dlq", "parked", "logs", "stall_watch", "timeouts",
        "notices", "c", "places", "room", "watch",
    )

    def __init__(self, name: str, index: JobIndex, finished: FinishedView) -> None:
        self.name = name
        self.index = index
        self.finished = finished
        # One entry per live job: a SplitDict, whose inserts never copy the whole map.
        self.jobs: SplitDict[str, JobRecord] = SplitDict()
        self.settings = QueueSettings()
        self.groups = Groups(self.settings.groups, self.settings.group_defaults)
        self.writes = Writes(name)  # (the queue whose lease they need in a cluster)
        self.events: list[dict[str, Any]] = []
        # Events cost a dict per transition; nobody pays for them until someone listens.
        self.events_enabled = False
        self.order = ReadyOrder()  # the ready and delayed heaps, admission numbers
        # Set by the driver from what slices cost (0: not measured): the most jobs a
        # slice of long work takes (slices.slice_jobs) and a promotion of due jobs
        # (lifecycle.promote_slice). The core only obeys them.
        self.slice_cap = 0
        self.promote_cap = 0
        # The driver's word that the slice (or tick) under way has used its time, asked
        # every few jobs (slices.SliceFill); None: no clock, slices go by count alone.
        self.slice_over: Callable[[], bool] | None = None
        self.leases = Leases()  # locks, their expiry, the jobs each connection holds
        # When the rate limit next has a token for the jobs waiting for one (set by each
        # pull the limit cut short: limits.allowance); None: no job waits for a token.
        self.rate_wake: int | None = None
        self.dedup = Dedup()  # uniqueKey -> the live job that holds it
        self.parked = Parked()
        self.logs = Logs()
        self.stall_watch = StallWatch()
        self.timeouts = Timeouts()  # processing deadlines and the stall sweep's time
        # Messages for other jobs' queues (target job id, notice), posted by the caller
        # after the batch: how a child's outcome reaches a parent in another queue.
        self.notices: list[tuple[str, tuple[Any, ...]]] = []
        self.c = Counters()
        self.places = Places()  # listing orders, kept with the counters
        self.dlq = DeadLetters()  # the marks of the DLQ entries (the records are stored)
        # Whether new live jobs still fit in the store: set by the driver for each step
        # (the broker's admission, when the store has a maximum); see room.py.
        self.room: Room = UNLIMITED
        # queue:idle and queue:threshold (watch.py): off until the driver sets the
        # thresholds.
        self.watch = QueueWatch()

    def take_writes(self) -> Writes:
        writes, self.writes = self.writes, Writes(self.name)
        return writes

    def take_events(self) -> list[dict[str, Any]]:
        events, self.events = self.events, []
        return events

    def take_notices(self) -> list[tuple[str, tuple[Any, ...]]]:
        notices, self.notices = self.notices, []
        return notices

    def emit(self, event_type: str, job_id: str, now: int, **extra: Any) -> None:
        """A job event (SubscribeEvents, webhooks, the dashboard), recorded for the
        caller to deliver after the batch; nothing while nobody listens."""
        if not self.events_enabled:
            return
        event: dict[str, Any] = {"eventType": event_type, "queue": self.name, "jobId": job_id}
        event["timestamp"] = float(now)
        event.update(extra)
        self.events.append(event)

    def announce(self, event_type: str, now: int, /, **data: Any) -> None:
        """A dashboard event (``job:promoted``, ``queue:drained``...), for WebSocket
        pattern subscribers and SSE streams only: its type is the name they know it by
        (a colon in it keeps it from SubscribeEvents, legacy WebSocket clients and
        webhooks, as bunqueue's dashboard events are kept from them)."""
        if self.events_enabled:
            self.events.append({"eventType": event_type, "queue": self.name,
                                "timestamp": float(now), **data})

    def reserve_seq(self) -> int:
        """An admission number for a job another party writes (a PUSHF, admitted by the
        router): it is stored with the job, so the queue need not write it again."""
        return self.order.next_seq()

    def persist(self, job: JobRecord) -> None:
        """Record the job's stored form (with its lock while active) in ``writes``."""
        record = job.to_record()
        if job.state == ACTIVE:  # (its lock, if any, goes with it: leases.stored_lock)
            lock = self.leases.locks.get(job.id)
            if lock is not None:
                record["lock"] = stored_lock(lock)
        self.writes.put_job(record)
        if job.durable:
            self.writes.durable = True

    def next_deadline(self) -> int | None:
        """The earliest wall time at which :meth:`tick` has work: the earliest of its
        parts' wake-ups (settings, leases, parked waits, promotion, timeouts and stall
        sweeps, DLQ timer, queue:idle), and when a parked pull may be served.

        Stale heap entries may make this early; a tick then simply finds nothing.
        Asked after every step: a running minimum, no list of candidates.
        """
        settings = self.settings
        best = settings.next_wakeup() if settings.timed else None
        at = self.leases.next_wakeup()
        if at is not None and (best is None or at < best):
            best = at
        at = self.parked.next_wakeup()
        if at is not None and (best is None or at < best):
            best = at
        at = self.order.next_wakeup()
        if at is not None and (best is None or at < best):
            best = at
        if self.parked.pulls and not settings.paused:
            at = self._pull_wakeup()
            if at is not None and (best is None or at < best):
                best = at
        at = self.timeouts.next_wakeup()
        if at is not None and (best is None or at < best):
            best = at
        if self.dlq.marks:  # eviction, expiry, auto-retry (dlq.py)
            at = self.dlq.next_wakeup(settings.dlq)
            if at is not None and (best is None or at < best):
                best = at
        at = self.watch.next_wakeup()  # queue:idle (watch.py)
        if at is not None and (best is None or at < best):
            best = at
        return best

    def _pull_wakeup(self) -> int | None:
        """When jobs may become ready for the parked pulls: the delayed heap's head, the
        rate limit's next token, the first group held by time."""
        best: int | None = None
        for at in (self.order.next_due(), self.rate_wake, self.groups.next_release()):
            if at is not None and (best is None or at < best):
                best = at
        return best

    def tick(self, now: int) -> list[WaiterAnswer]:
        # Every batch ticks: each part is called only when its heap's head is due.
        at = self.leases.next_wakeup()
        if at is not None and at <= now:
            leases.expire_locks(self, now)
        timeouts = self.timeouts
        if timeouts.timeout_due(now):
            stalls.expire_timeouts(self, now)
        if self.order.due_left:
            lifecycle.promote_slice(self, now)
        if timeouts.stall_check_due(now):
            more = stalls.check_stalls(self, now)
            # More stale jobs than one sweep takes: the next slice in a later step.
            timeouts.stall_checked(now, more, bool(self.c.active))
        release = self.groups.next_release()
        if release is not None and release <= now:
            self.groups.release_due(now)  # used up, or a queue at its limit would spin
        out = self.expire_waits(now) if self.parked.timed() else []
        if self.dlq.marks and dlq.dlq_due(self, now):
            timer_work = dlq.dlq_tick(self, now)
            if timer_work is not None:
                out.append(timer_work)
        if self.parked.pulls:
            # Due jobs are promoted here, not only by a pull: a pull the queue's limits
            # stop never reaches them, and the wake-up next_deadline named for them
            # would stay in the past (the actor spinning on it).
            lifecycle.promote_due(self, now)
            out.extend(self.serve_waiters(now))
        if self.parked.settled:
            out.extend(self.parked.take_settled())
        if self.watch.on:  # queue:idle, queue:threshold (watch.py)
            self.watch.look(self, now)
        return out

    @property
    def waiters(self) -> deque[PullWaiter]:
        """The parked pulls, in arrival order (read-only view for the actor and tests)."""
        return self.parked.pulls

    # producing.py: PUSH and PUSHB admission
    def push(self, specs: Sequence[dict[str, Any]], now: int) -> list[str]:
        return producing.push(self, specs, now)

    # restore.py: one stored job back into the queue after a restart
    def restore(self, record: dict[str, Any], now: int, *, charge_active: bool = True) -> JobRecord:
        return restoring.restore(self, record, now, charge_active=charge_active)

    # consuming.py: PULL, ACK, ACKB, FAIL and the way into the DLQ
    def pull(
            self, now: int, *, count: int, owner: str | None, lock_ttl: float, conn: Any,
            detach: bool = False) -> tuple[list[dict[str, Any]], list[str]]:
        return consuming.pull(self, now, count=count, owner=owner, lock_ttl=lock_ttl, conn=conn,
                              detach=detach)

    def pull_reply(
            self, jobs: list[dict[str, Any]], tokens: list[str], *, batch: bool,
            owner: str | None, now: int | None = None) -> dict[str, Any]:
        return consuming.pull_reply(self, jobs, tokens, batch=batch, owner=owner, now=now)

    def ack(
            self, job_id: str, now: int, *, token: str | None = None,
            has_result: bool = False, result: Any = None, remove: bool | None = None) -> None:
        consuming.ack(self, job_id, now, token=token, has_result=has_result, result=result,
                      remove=remove)

    def ackb(
            self, ids: list[str], now: int, *, tokens: list[Any] | None,
            results: list[Any] | None, removes: list[Any] | None) -> list[int]:
        return consuming.ackb(self, ids, now, tokens=tokens, results=results, removes=removes)

    def ackb_check(
            self, ids: list[str], tokens: list[Any] | None
    ) -> tuple[list[tuple[int, JobRecord]], list[int]]:
        return consuming.ackb_check(self, ids, tokens)

    def ackb_apply(
            self, checked: Sequence[tuple[int, JobRecord]], now: int, *,
            results: list[Any] | None, removes: list[Any] | None) -> None:
        consuming.ackb_apply(self, checked, now, results=results, removes=removes)

    def fail(
            self, job_id: str, now: int, *, token: str | None = None,
            error: str | None = None, stack: list[str] | None = None, trace: Any = None,
            unrecoverable: bool = False, remove_on_fail: bool | None = None) -> bool:
        return consuming.fail(self, job_id, now, token=token, error=error, stack=stack,
                              trace=trace, unrecoverable=unrecoverable,
                              remove_on_fail=remove_on_fail)

    # waiters.py: parked pulls and WaitJob holds (owned by Parked)
    def park(self, waiter: PullWaiter) -> None:
        waiting.park(self, waiter)

    def expire_waits(self, now: int) -> list[WaiterAnswer]:
        return waiting.expire_waits(self, now)

    def serve_waiters(self, now: int) -> list[WaiterAnswer]:
        return waiting.serve_waiters(self, now)

    def drop_waiters(self, conn: Any, *, answer: bool = False) -> None:
        waiting.drop_waiters(self, conn, answer=answer)

    def abandon_pulls(self) -> list[WaiterAnswer]:
        return waiting.abandon_pulls(self)

    def park_job_waiter(self, waiter: JobWaiter) -> None:
        waiting.park_job_waiter(self, waiter)

    def held_waits(self, conn: Any) -> int:
        return waiting.held_waits(self, conn)

    # leases.py: locks, renewal, expiry, jobs per connection
    def extend_lock(self, job_id: str, now: int, *, token: str | None, duration: float) -> bool:
        return leases.extend_lock(self, job_id, now, token=token, duration=duration)

    def heartbeat(
            self, job_id: str, now: int, *, token: str | None, duration: float | None) -> bool:
        return leases.heartbeat(self, job_id, now, token=token, duration=duration)

    def hold_expiry(self, resumed_at: int, grace_ms: int) -> None:
        leases.hold_expiry(self, resumed_at, grace_ms)

    def release_connection(self, conn: Any, now: int) -> int:
        return leases.release_connection(self, conn, now)

    def release_connection_work(
            self, conn: Any, now: int, *, answer_parked: bool = False) -> Sliced:
        return leases.release_connection_work(self, conn, now, answer_parked=answer_parked)

    # stalls.py: the stall detector (StallWatch) and processing timeouts
    @property
    def max_stalls(self) -> int:
        return self.settings.max_stalls

    # Read-only views of the settings record, for handlers and tests.
    @property
    def paused(self) -> bool:
        return self.settings.paused

    @property
    def stall(self) -> dict[str, Any]:
        return self.settings.stall

    def set_stall_config(self, config: dict[str, Any]) -> None:
        stalls.set_stall_config(self, config)

    # moves.py: manual moves
    def cancel(self, job_id: str, now: int) -> None:
        moves.cancel(self, job_id, now)

    def update_data(self, job_id: str, data: Any) -> None:
        moves.update_data(self, job_id, data)

    def change_priority(self, job_id: str, now: int, priority: float, lifo: bool | None) -> None:
        moves.change_priority(self, job_id, now, priority, lifo)

    def promote(self, job_id: str, now: int) -> None:
        moves.promote(self, job_id, now)

    def promote_jobs(self, now: int, count: int | None) -> int:
        return moves.promote_jobs(self, now, count)

    def promote_jobs_work(self, now: int, count: int | None) -> Sliced:
        return moves.promote_jobs_work(self, now, count)

    def change_delay(
            self, job_id: str, now: int, delay: float, token: str | None, *,
            active_only: bool = False) -> None:
        moves.change_delay(self, job_id, now, delay, token, active_only=active_only)

    def move_to_wait(self, job_id: str, now: int, token: str | None) -> None:
        moves.move_to_wait(self, job_id, now, token)

    def discard(self, job_id: str, now: int, token: str | None) -> None:
        moves.discard(self, job_id, now, token)

    # dependencies.py: parents, children, outcomes, notices between queues
    def dependency_exists(self, dep_id: str, now: int) -> bool:
        return dependencies.dependency_exists(self, dep_id, now)

    def check_push_dependencies(
            self, specs: Sequence[dict[str, Any]], now: int, *, batch: bool) -> None:
        dependencies.check_push_dependencies(self, specs, now, batch=batch)

    def adopt(self, job: JobRecord, now: int) -> None:
        dependencies.adopt(self, job, now)

    def apply_notice(self, notice: tuple[Any, ...], now: int) -> None:
        dependencies.apply_notice(self, notice, now)

    def apply_outcome(
            self, parent_id: str, child_id: str, outcome: dict[str, Any], now: int) -> None:
        dependencies.apply_outcome(self, parent_id, child_id, outcome, now)

    def replay_outcomes(self, now: int) -> None:
        dependencies.replay_outcomes(self, now)

    def move_to_waiting_children(self, job_id: str, now: int, token: str | None) -> bool:
        return dependencies.move_to_waiting_children(self, job_id, now, token)

    def update_parent(self, child_id: str, parent_id: str, now: int) -> None:
        dependencies.update_parent(self, child_id, parent_id, now)

    def remove_child_dependency(self, child_id: str, now: int) -> bool:
        return dependencies.remove_child_dependency(self, child_id, now)

    def remove_unprocessed_children(self, parent_id: str) -> frozenset[str]:
        return dependencies.remove_unprocessed_children(self, parent_id)

    def children_outcomes(
            self, parent_id: str, kind: str, policy: str | None = None) -> dict[str, Any]:
        return dependencies.children_outcomes(self, parent_id, kind, policy)

    def dependencies(self, parent_id: str) -> dict[str, Any]:
        return dependencies.dependencies(self, parent_id)

    # control.py: pause, drain, obliterate (long work in slices.py), settings
    def drain(self, now: int) -> int:
        return control.drain(self, now)

    def obliterate(self, now: int) -> None:
        control.obliterate(self, now)

    def drain_work(self, now: int) -> Sliced:
        return control.drain_work(self, now)

    def obliterate_work(self, now: int) -> Sliced:
        return control.obliterate_work(self, now)

    def reset_settings(self) -> None:
        control.reset_settings(self)

    def store_settings(self) -> None:
        control.store_settings(self)

    def set_paused(self, paused: bool, now: int) -> None:
        control.set_paused(self, paused, now)

    def load_meta(self, meta: dict[str, Any]) -> None:
        control.load_meta(self, meta)

    # limits.py: the rate limit and the concurrency cap
    def set_rate_limit(self, limit: float, duration: int, ttl: int | None, now: int) -> None:
        limits.set_rate_limit(self, limit, duration, ttl, now)

    def clear_rate_limit(self, now: int) -> None:
        limits.clear_rate_limit(self, now)

    def set_concurrency(self, limit: int | None, now: int) -> None:
        limits.set_concurrency(self, limit, now)

    def limits_reply(self, now: int, max_jobs: int | None) -> dict[str, Any]:
        return limits.limits_reply(self, now, max_jobs)

    # cleaning.py, compaction.py: Clean and CompactMemory (long work)
    def clean_work(self, state: str | None, grace: float, limit: int, now: int) -> Sliced:
        return cleaning.clean_work(self, state, grace, limit, now)

    def compact_work(self) -> Sliced:
        return compaction.compact_work(self)

    # progress.py: progress and logs
    def set_progress(
            self, job_id: str, now: int, progress: Any, message: Any, has_message: bool) -> None:
        progressing.set_progress(self, job_id, now, progress, message, has_message)

    def get_progress(self, job_id: str, now: int) -> dict[str, Any]:
        return progressing.get_progress(self, job_id, now)

    def add_log(self, job_id: str, now: int, message: str, level: str) -> None:
        progressing.add_log(self, job_id, now, message, level)

    def get_logs(self, job_id: str, start: int | None, end: int | None) -> dict[str, Any]:
        return progressing.get_logs(self, job_id, start, end)

    def clear_logs(self, job_id: str, keep: int) -> None:
        progressing.clear_logs(self, job_id, keep)

    # dedup.py: uniqueKey holders and the push policy
    def dedup_owner(self, unique_key: str, now: int) -> str | None:
        return dedup.dedup_owner(self, unique_key, now)

    def release_dedup_key(self, unique_key: str, now: int, owner_id: str | None = None) -> bool:
        return dedup.release_dedup_key(self, unique_key, now, owner_id)

    # dlq.py, dlq_work.py: the dead-letter queue (entries, timer, admin commands)
    def remove_dlq_job(self, job_id: str, now: int) -> bool:
        return dlq.remove_dlq_job(self, job_id, now)

    def dlq_stats(self, now: int) -> dict[str, Any]:
        return dlq.dlq_stats(self, now)

    def set_dlq_config(self, config: dict[str, Any], now: int) -> None:
        dlq.set_dlq_config(self, config, now)

    def load_dlq(self) -> None:
        dlq.load_dlq(self)

    def auto_retry_work(self, now: int) -> Sliced:
        return dlq_work.auto_retry_work(self, now)

    # views.py: read-only queries
    def job_wire(self, job_id: str, now: int) -> dict[str, Any] | None:
        return views.job_wire(self, job_id, now)

    def state_of(self, job_id: str, now: int) -> str:
        return views.state_of(self, job_id, now)

    def counts(self, now: int) -> dict[str, int]:
        return views.counts(self, now)

    def queued_count(self, now: int) -> int:
        return views.queued_count(self, now)

    def counts_per_priority(self) -> dict[str, int]:
        return views.counts_per_priority(self)

    def list_jobs(
            self, states: Iterable[str], now: int, *, asc: bool, offset: int, limit: int
    ) -> list[dict[str, Any]]:
        return views.list_jobs(self, states, now, asc=asc, offset=offset, limit=limit)

