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

The class body below is the table of owners: each method is a function of the module
that owns its concern (see ``docs/architecture.md``, "The queue core"). The transition
rules themselves are in :mod:`trioqueue.core.states`, the attempt rules in
:mod:`trioqueue.core.attempts`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

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
    progress,
    stalls,
    views,
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
        # (lifecycle._promote_slice). The core only obeys them.
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

    def _emit(self, event_type: str, job_id: str, now: int, **extra: Any) -> None:
        if not self.events_enabled:
            return
        event: dict[str, Any] = {"eventType": event_type, "queue": self.name, "jobId": job_id}
        event["timestamp"] = float(now)
        event.update(extra)
        self.events.append(event)

    def _announce(self, event_type: str, now: int, /, **data: Any) -> None:
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

    def _persist(self, job: JobRecord) -> None:
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
            self.expire_locks(now)
        timeouts = self.timeouts
        if timeouts.timeout_due(now):
            self.expire_timeouts(now)
        if self.order.due_left:
            lifecycle._promote_slice(self, now)
        if timeouts.stall_check_due(now):
            more = self.check_stalls(now)
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
            self._promote_due(now)
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


    # lifecycle.py: places, counters, heaps, the only writes of job.state
    _count = lifecycle._count
    _move = lifecycle._move
    _transition = lifecycle._transition
    _enqueue = lifecycle._enqueue
    _promote_due = lifecycle._promote_due
    _pop_delayed = lifecycle._pop_delayed
    _remove_live = lifecycle._remove_live

    # producing.py: PUSH and PUSHB admission
    push = producing.push
    _push_one = producing._push_one

    # restore.py: one stored job back into the queue after a restart
    restore = restoring.restore

    # consuming.py: PULL, ACK, ACKB, FAIL and the way into the DLQ
    _next_ready = consuming._next_ready
    pull = consuming.pull
    pull_reply = consuming.pull_reply
    _active_job = consuming._active_job
    ack = consuming.ack
    _complete = consuming._complete
    ackb = consuming.ackb
    ackb_check = consuming.ackb_check
    ackb_apply = consuming.ackb_apply
    fail = consuming.fail
    _retry_later = consuming._retry_later
    _bury = consuming._bury

    # waiters.py: parked pulls and WaitJob holds (owned by Parked)
    park = waiting.park
    expire_waits = waiting.expire_waits
    serve_waiters = waiting.serve_waiters
    drop_waiters = waiting.drop_waiters
    abandon_pulls = waiting.abandon_pulls
    park_job_waiter = waiting.park_job_waiter
    held_waits = waiting.held_waits
    _settle = waiting._settle
    _settle_gone = waiting._settle_gone

    # leases.py: locks, renewal, expiry, jobs per connection
    extend_lock = leases.extend_lock
    heartbeat = leases.heartbeat
    expire_locks = leases.expire_locks
    hold_expiry = leases.hold_expiry
    _requeue = leases._requeue
    release_connection = leases.release_connection
    release_connection_work = leases.release_connection_work

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
    set_stall_config = stalls.set_stall_config
    check_stalls = stalls.check_stalls
    expire_timeouts = stalls.expire_timeouts

    # moves.py: manual moves
    _queued = moves._queued
    _reschedule = moves._reschedule
    cancel = moves.cancel
    update_data = moves.update_data
    change_priority = moves.change_priority
    promote = moves.promote
    promote_jobs = moves.promote_jobs
    promote_jobs_work = moves.promote_jobs_work
    change_delay = moves.change_delay
    move_to_wait = moves.move_to_wait
    _revive = moves._revive
    discard = moves.discard

    # dependencies.py: parents, children, outcomes, notices between queues
    _drop_queued = dependencies._drop_queued
    _settle_dependents = dependencies._settle_dependents
    _child_failed = dependencies._child_failed
    dependency_exists = dependencies.dependency_exists
    check_push_dependencies = dependencies.check_push_dependencies
    _open_dependencies = dependencies._open_dependencies
    _park_new = dependencies._park_new
    adopt = dependencies.adopt
    apply_notice = dependencies.apply_notice
    apply_outcome = dependencies.apply_outcome
    replay_outcomes = dependencies.replay_outcomes
    move_to_waiting_children = dependencies.move_to_waiting_children
    update_parent = dependencies.update_parent
    _set_parent = dependencies._set_parent
    remove_child_dependency = dependencies.remove_child_dependency
    remove_unprocessed_children = dependencies.remove_unprocessed_children
    _child_queue = dependencies._child_queue
    _want_children = dependencies._want_children
    children_outcomes = dependencies.children_outcomes
    dependencies = dependencies.dependencies

    # control.py: pause, drain, obliterate (long work in slices.py), settings
    drain = control.drain
    obliterate = control.obliterate
    drain_work = control.drain_work
    obliterate_work = control.obliterate_work
    reset_settings = control.reset_settings
    store_settings = control.store_settings
    set_paused = control.set_paused
    load_meta = control.load_meta

    # limits.py: the rate limit and the concurrency cap
    set_rate_limit = limits.set_rate_limit
    clear_rate_limit = limits.clear_rate_limit
    set_concurrency = limits.set_concurrency
    limits_reply = limits.limits_reply
    # cleaning.py, compaction.py: Clean and CompactMemory (long work)
    clean_work = cleaning.clean_work
    compact_work = compaction.compact_work

    # progress.py: progress and logs
    _active_for_progress = progress._active_for_progress
    set_progress = progress.set_progress
    get_progress = progress.get_progress
    _known = progress._known
    add_log = progress.add_log
    get_logs = progress.get_logs
    clear_logs = progress.clear_logs

    # dedup.py: uniqueKey holders and the push policy
    dedup_owner = dedup.dedup_owner
    release_dedup_key = dedup.release_dedup_key
    _dedup_admit = dedup._dedup_admit
    _dedup_claim = dedup._dedup_claim

    # dlq.py, dlq_work.py: the dead-letter queue (entries, timer, admin commands)
    _dlq_enter = dlq.dlq_enter
    remove_dlq_job = dlq.remove_dlq_job
    dlq_stats = dlq.dlq_stats
    set_dlq_config = dlq.set_dlq_config
    load_dlq = dlq.load_dlq
    auto_retry_work = dlq_work.auto_retry_work

    # views.py: read-only queries
    job_wire = views.job_wire
    state_of = views.state_of
    counts = views.counts
    queued_count = views.queued_count
    counts_per_priority = views.counts_per_priority
    list_jobs = views.list_jobs
