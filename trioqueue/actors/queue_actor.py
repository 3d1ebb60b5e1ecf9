"""A queue actor: the one task that owns a queue's state, fed through a memory channel.

Nothing else touches the queue's :class:`~trioqueue.core.queue.QueueState`. The actor
takes every batch waiting in its inbox at once, applies the commands in order at one
``now``, submits each command's writes to the storage writer and releases the batch's
replies to it, so a whole batch costs one commit. Timers (lock expiry, long-poll
deadlines, delayed jobs a parked pull is waiting for) are the inbox receive's deadline.

Supervision: a command that raises anything but a Refused crashes the actor. The
supervisor loop in :meth:`QueueActor.run` answers that command with ``Internal server
error``, rebuilds the queue from storage (after committing what the batch had already
applied, so acknowledged work is kept and the crashing command's partial change is
dropped), puts the rest of the batch back in front and carries on. Too many crashes in
a short window re-raise, taking the broker down rather than looping forever; so does any
crash with a store whose calls block (PostgreSQL), whose rebuild a restart does.

Full storage: whatever creates a live job is refused with ``Storage full`` while the
store is nearly full. The actor gives each step one :class:`Admission` (the core's
``q.room``), which measures the store at most once; commands that declare ``admits``
in core.commands.table (PUSH, PUSHB, a cron firing) get its answer in ``Ctx``, and the core
asks it itself where it revives a job or admits a repeat job's successor. Both refuse
before they change anything: a refused job leaves no trace. What the actor
needs of the broker comes as the narrow interfaces of :mod:`trioqueue.actors.ports`.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from typing import Any

import trio

from ..core.clock import Clock
from ..core.commands.context import Ctx
from ..core.commands.table import ADMITS, QUEUE_HANDLERS
from ..core.errors import INTERNAL_ERROR, Refused
from ..core.queue import AfterQueues, JobWaiter, PullWaiter, QueueState, Sliced, WaiterAnswer
from ..core.queue.finished import FinishedView, NeedData
from ..core.queue.room import UNLIMITED
from ..core.queue.watch import QueueWatch
from ..core.recovery import rebuild
from ..storage.port import Storage
from ..turns import give_way
from .clock import PauseWatch
from .events import EventRelease
from .notices import Notices, QueuePoster
from .ports import ActorIndex, AdmissionFactory, Committer, EventSink, NoticePoster, QueueLimits
from .request import Request
from .slice_budget import SliceBudget
from .store_reads import StoreReads
from .writer import StorageFailure

log = logging.getLogger("trioqueue.queue")

# A step serves its backlog for at most this long, checked every BUDGET_EVERY commands
# (a read of 2,500 pipelined PUSHes was one step of about 50 ms).
STEP_BUDGET_MS, BUDGET_EVERY = 5, 32


class QueueActor(StoreReads):
    def __init__(self, name: str, *, committer: Committer, index: ActorIndex, clock: Clock,
                 post_notices: NoticePoster, post_to: QueuePoster, events: EventSink,
                 admission: AdmissionFactory | None, limits: QueueLimits,
                 storage: Storage, pauses: PauseWatch | None = None) -> None:
        self.name = name
        self._committer, self._clock, self._events = committer, clock, events
        # Pauses of the broker's loop, and how many this queue was told of (see _step).
        self._pauses, self._pauses_told = pauses, 0
        # The broker-wide index, and how notices reach other queues' jobs.
        self._index, self._post_notices = index, post_notices
        # None when the store has no limit: then no command is measured at all.
        self._admission = admission
        self._limits = limits
        self._storage = storage  # read back whole on a restart (see _recover)
        self.send, self._recv = trio.open_memory_channel[list[Request]](limits.queue_inbox_batches)
        # What the core knows of finished jobs: what this actor fetched for it (see
        # _fetch); the core itself never reads the store.
        self._view = FinishedView(name)
        self.state = self._new_state()
        self._backlog: deque[Request] = deque()
        # Notices from other queues and for this queue's own jobs, and replies held
        # until other queues applied this queue's (see actors.notices).
        self._notices = Notices(name, post_notices, post_to)
        self._idle: trio.CancelScope | None = None
        self._current: Request | None = None
        self._deliveries: list[tuple[Any, dict[str, Any]]] = []
        # A command whose work is done in slices (Drain, ..., a large PUSHB): see _slice.
        self._long: tuple[Request, Sliced] | None = None
        self._refetches = 0  # rounds of reads the current command asked for
        self._budget = SliceBudget(limits.slice_budget_ms)  # sizes the slices: _slice
        self._need: NeedData | None = None  # reads a blocking store must answer first
        self._fetched: list[Any] | None = None  # (their answers, read with Packed data)
        self.crashes: list[float] = []
        self._fatal: Exception | None = None  # see _crashed
        # Batches sent but not yet taken from the inbox. trio hands a batch straight to
        # a waiting receiver, bypassing the buffer, so the buffer size alone would miss
        # it; Broker.settle waits for this to reach zero.
        self.batches_in_flight = 0
        self._scope = trio.CancelScope()  # cancelled by retire()
        # Set by retire(): nothing takes from the inbox any more (the router answers
        # what it would have sent, see Router.send).
        self.retired = False

    def _new_state(self) -> QueueState:
        state = QueueState(self.name, self._index, self._view)
        limits = self._limits
        state.watch = QueueWatch(int(limits.queue_idle_threshold_ms),
                                 limits.queue_size_threshold_jobs)
        return state

    # ------------------------------------------------------------------ supervision

    async def run(self) -> None:
        with self._scope:
            while True:
                try:
                    await self._loop()
                except StorageFailure:
                    # Not this queue's fault and not curable by a restart: stop the
                    # broker.
                    raise
                except Exception as exc:
                    if exc is self._fatal:
                        raise  # already counted and logged by the inline step that crashed
                    self._crashed()

    @property
    def quiet(self) -> bool:
        """Parked on its inbox with nothing taken and not applied, nothing sent and not
        taken: no step can be midway (a cluster's handover waits for this)."""
        return (self._idle is not None and not self.batches_in_flight
                and not self._backlog and self._long is None and self._need is None
                and not self._notices.pending)

    def retire(self) -> None:
        """Stop serving the queue (in a cluster, another broker takes it over): every
        parked pull is answered with no job and every parked wait as timed out, so their
        clients ask again (through the broker that serves the queue next), and the task
        ends. Called only when :attr:`quiet`: nothing the queue accepted is left
        unapplied, and what it applied was submitted to the writer."""
        q = self.state
        self.retired = True
        self._answer_waiters(q.expire_waits(1 << 62))  # (every waiter has a deadline)
        self._finish_batch()
        self._scope.cancel()

    def _crashed(self) -> None:
        """After a command (or a timer) raised: count the crash, answer, recover.

        Called inside the ``except`` of the failed step, by the actor's own loop or by
        :meth:`run_inline`. Too many crashes in a short window re-raise; from an inline
        step that would only end the caller's connection, so the exception is kept and
        the actor woken to raise it in its own task, taking the broker down.
        """
        request = self._current
        log.exception(
            "queue actor %r crashed on %s", self.name,
            request.cmd if request is not None else "a timer",
        )
        if self._committer.off_thread:
            # Rebuilding in place reads the store on the event loop, before the writes
            # of the batch in flight are committed: with a store whose calls block the
            # crash stops the broker instead, and a restart rebuilds from the store.
            raise
        now = trio.current_time()
        self.crashes = [t for t in self.crashes
                        if now - t < self._limits.actor_restart_window_s]
        self.crashes.append(now)
        if len(self.crashes) > self._limits.actor_max_restarts:
            raise
        self._recover(request)

    def _recover(self, crashed: Request | None) -> None:
        """Answer the crashing command, keep what was acknowledged, reload from storage."""
        self.state.take_writes()  # the crashing command's partial writes: dropped
        # Long work that crashed is answered below (it is the crashed request); its
        # committed slices stay done, as after any crash mid-way.
        self._long = self._need = self._fetched = None
        if crashed is not None and crashed.replier is not None:
            self._deliveries.append((crashed.replier, crashed.error_reply(INTERNAL_ERROR)))
        self._current = None
        writer = self._committer
        writer.release(self._deliveries)
        self._deliveries = []
        if not writer.off_thread:  # a blocking store commits in the writer's next hop
            writer.commit_now()
        old = self.state
        self._view.forget()
        state = self.state = self._new_state()
        self._index.forget_queue(self.name)
        # Active jobs stay active (their workers are still alive; only the actor
        # died), with the locks their records keep (the same tokens).
        with self.reading_directly():
            notices = rebuild(self._storage.load(), self._clock.now_ms(),
                              state_for={self.name: state}.get, locate=self._index.locate,
                              dependents=self._index.dependents, charge_active=False)
        self._answer_waiters(old.abandon_pulls())  # they lived in the dead state
        writer.submit(state.take_writes())
        if notices:
            self._post_notices(notices)  # for other queues' jobs
        # Echoes of replies held by commands before the crash go out now: the queue
        # may go idle next, and they would wait for its next step.
        self._notices.send(state, self._deliveries)
        writer.release(self._deliveries)
        self._deliveries = []

    # ------------------------------------------------------------------ the loop

    def post(self, notice: tuple[Any, ...]) -> None:
        """Queue a notice for this actor and wake it if it is idle: by cancelling the idle
        receive, which is cancel-safe (no batch is lost; a late cancel does nothing)."""
        self._notices.append(notice)
        if self._idle is not None:
            self._idle.cancel()

    def run_inline(self, batch: list[Request]) -> bool:
        """Apply ``batch`` now, in the caller's task, if the actor is idle; else False.

        The actor stays the only owner of its state: this runs the actor's own step
        while its task is parked on an empty inbox with nothing pending, where trio
        guarantees it cannot run (the step never awaits). It saves the hop into the
        actor's task, a scheduler pass that costs a one-request-at-a-time client a
        fifth of its round trip. The actor's timer then moves to the state's next
        deadline, all the actor would have recomputed before parking again. A crash is
        handled as in the actor's loop (see :meth:`_crashed`)."""
        idle = self._idle
        if (idle is None or self.batches_in_flight or self._backlog or self._fatal is not None
                or self._long is not None or self._need is not None):
            return False
        self._backlog.extend(batch)
        while True:
            try:
                self._step()
                break
            except StorageFailure:
                raise
            except Exception as exc:
                try:
                    self._crashed()
                except Exception:
                    self._fatal = exc
                    idle.cancel()
                    return True
                # As the actor's loop would: the rest of the batch is served next.
                if not (self._backlog or self._notices.pending):
                    break
        deadline = self._next_deadline()
        if deadline != idle.deadline:  # setting it costs trio a deadline-heap update
            idle.deadline = deadline
        return True

    def _next_deadline(self) -> float:
        """When the parked actor must wake for its timers (trio time; inf: never), or
        for long work a tick of an inline step began (at once)."""
        if self._long is not None:
            return -math.inf
        deadline_ms = self.state.next_deadline()
        return math.inf if deadline_ms is None else self._clock.deadline_for(deadline_ms)

    async def _loop(self) -> None:
        recv = self._recv
        while True:
            if self._need is not None:
                await self._fetch_off_thread()
                self._step(keep_view=True)
                continue
            if self._long is not None:
                # Before each slice (the first too) every other task runs, a pass without
                # this one: the other queues keep their latency while this one drains 1M.
                await give_way()
                work = self._long[1]
                fetched = work.need is not None and self._committer.off_thread
                if fetched:
                    self._need, work.need = work.need, None
                del work  # (done, it holds its answer's jobs: not until the next work)
                if fetched:
                    await self._fetch_off_thread()
                self._slice(keep_view=fetched)
                continue
            if not self._backlog and not self._notices.pending:
                with trio.CancelScope(deadline=self._next_deadline()) as idle:
                    # Set only while parked on the receive: run_inline's sign that the
                    # actor cannot be in the middle of a step (reset however it ends).
                    self._idle = idle
                    try:
                        self._take(await recv.receive())
                    finally:
                        self._idle = None
                if self._fatal is not None:
                    raise self._fatal  # an inline step crashed too often: see _crashed
                # Take everything already waiting: one batch, one commit.
                while recv.statistics().current_buffer_used:
                    self._take(recv.receive_nowait())
            else:  # a backlog a step's budget left (or notices): others run first
                await give_way()
            self._step()

    def _step(self, *, keep_view: bool = False) -> None:
        """Apply notices, then the backlog, then timers; commit and answer (never awaits)."""
        q = self.state
        self._budget.start_clock(q)  # the step's deadline, for its slices and its tick
        if self._admission is not None:
            q.room = self._admission()  # measured once a step, if a job is made
        now = self._clock.now_ms()
        pauses = self._pauses  # looked at before anything here can judge a lock
        if pauses is not None and pauses.check(now) != self._pauses_told:
            self._pauses_told = pauses.pauses
            q.hold_expiry(pauses.resumed_ms, pauses.grace_ms)
        q.events_enabled = self._events.active
        if not keep_view and self._view.known:
            self._view.known.clear()  # other queues may have written since the last step
        if self._notices.pending:
            self._notices.apply(q, now, self._deliveries)
            self._committer.submit(q.take_writes())
        self._apply_backlog(now)
        if self._backlog and self._idle is not None:
            self._idle.cancel()  # an inline step left some: the actor's task goes on
        if self._long is not None or self._need is not None:
            # Long work began, or reads a blocking store must answer: that comes first,
            # in the actor's own task (an inline step must not await, and must not
            # hold the caller's task for slice after slice).
            self._finish_batch()
            if self._idle is not None:
                self._idle.cancel()
            return
        self._budget.begin_tick(q)
        answers = q.tick(now)
        if answers:
            self._answer_waiters(answers)
        self._finish_batch()
        self._budget.promoted(q)

    def _answer_waiters(self, answers: list[WaiterAnswer]) -> None:
        for delivery in answers:
            req = delivery.waiter.handle
            if delivery.work is not None:  # a parked PULLB's jobs came: long work next
                self._park_or_begin(req, delivery.work)
            elif delivery.error is not None:
                self._deliveries.append((req.replier, req.error_reply(delivery.error)))
            else:
                self._deliveries.append((req.replier, req.reply(delivery.reply)))

    def _park_or_begin(self, req: Request, result: Any) -> None:
        """A handler's answer that is not a plain reply: park it, or begin long work."""
        q = self.state
        if isinstance(result, PullWaiter):
            result.handle = req
            q.park(result)
        elif isinstance(result, JobWaiter):
            result.handle = req
            q.park_job_waiter(result)
        elif isinstance(result, Sliced):
            self._long = (req, result)
        elif isinstance(result, AfterQueues):
            self._notices.hold(req.replier, req.reply(result.reply), result)
        else:  # a reply of a dict subclass
            self._deliveries.append((req.replier, req.reply(result)))

    def _slice(self, *, keep_view: bool = False) -> None:
        """One slice of the long work in progress (never awaits); the last one answers.

        While long work lasts the queue takes nothing else: its commands, notices and
        timers wait, so none of them sees the work half done; the last slice runs the
        timers. Each slice's writes are committed on their own (a release with no reply
        commits), so no transaction grows with the queue."""
        assert self._long is not None
        self._budget.begin(self.state)
        if self._admission is not None:
            self.state.room = self._admission()
        req, work = self._long
        self._current = req
        self.state.events_enabled = self._events.active
        if not keep_view:
            self._view.forget()
        if work.need is not None:  # the reads this slice asked for, before it runs
            self._refetches = 0
            self._fetch(work.need, self.state)
            work.need = None
        done = work.step()
        if done:  # (cleared first: the tick below may begin a parked PULLB's work)
            self._long = None
        # Holds on jobs the slice removed are answered with it; after the last slice,
        # what waited for the work runs (timers, the parked pulls it made servable).
        q = self.state
        self._answer_waiters(q.tick(self._clock.now_ms()) if done else q.parked.take_settled())
        if done:
            self._deliveries.append((req.replier, work.answer(req)))
        self._current = None
        self._finish_batch()
        self._budget.sliced(self.state)

    def holds_jobs_of(self, conn: Any) -> bool:
        """Whether a job delivered over ``conn`` is still active here (a read on the one
        trio thread, between steps: for the idle timeout of that connection)."""
        return bool(self.state.leases.held_by(conn))

    @property
    def backlog_size(self) -> int:
        """Commands accepted but not applied yet (long work in progress counts one)."""
        return len(self._backlog) + (self._long is not None)

    def _take(self, batch: list[Request]) -> None:
        self.batches_in_flight -= 1
        self._backlog.extend(batch)

    def _apply_backlog(self, now: int) -> None:
        q = self.state
        submit = self._committer.submit
        backlog = self._backlog
        deliveries = self._deliveries
        view = self._view
        limits = self._limits
        # One context for the batch; the per-command fields are set before each handler
        # (cheaper than building one per command, and handlers never keep it).
        ctx = Ctx(now=now, max_data_bytes=limits.max_data_bytes,
                  max_wait_holds=limits.max_wait_holds_per_connection)
        # Room for new jobs: measured at the batch's first job-creating command, then
        # counted down (see Admission): the step's own (q.room, set by _step), which
        # the core's revivals and repeat successors ask as well.
        admits = ADMITS if self._admission is not None else None
        room = q.room
        # A long backlog is served a part per step; the rest after other tasks ran.
        stop_at = now + STEP_BUDGET_MS if len(backlog) > BUDGET_EVERY else None
        served = 0
        # Long work comes first, however the step was entered (after an inline step
        # began it, the actor's own task steps again with the rest of the batch).
        while backlog and self._long is None:
            served += 1
            if stop_at and not served % BUDGET_EVERY and self._clock.now_ms() >= stop_at:
                break
            req = backlog.popleft()
            self._current = req
            handler = QUEUE_HANDLERS[req.cmd]
            ctx.conn = req.conn
            ctx.frame_bytes = req.frame_bytes
            ctx.json_bound = req.json_bound
            ctx.storage_full = False
            if admits is not None:
                jobs = admits.get(req.cmd)
                if jobs is not None:
                    ctx.storage_full = room.refuses(req.frame_bytes, jobs(req.msg), req)
            try:
                result = handler(q, req.msg, ctx)
            except NeedData as need:
                backlog.appendleft(req)  # again, once the reads are known
                if self._needs_data(need, q):
                    break  # the actor's task reads a blocking store first
                continue
            except Refused as exc:
                # Handlers validate before they mutate, so a refused command has
                # nothing to write; whatever it did record is still submitted below.
                deliveries.append((req.replier, req.error_reply(exc.message)))
            else:
                if type(result) is dict:  # the common answer: a reply, sent after commit
                    deliveries.append((req.replier, req.reply(result)))
                else:
                    self._park_or_begin(req, result)
            if q.notices:  # its effects on this queue's jobs, before the next command
                self._notices.apply(q, now, deliveries)
            if q.writes.ops:  # (.ops, not the Writes: a Python-level __bool__ per command)
                submit(q.take_writes())
                if view.known:  # what it fetched may be stale now
                    view.known.clear()
            if self._refetches:
                self._refetches = 0
        self._current = None

    def _finish_batch(self) -> None:
        q = self.state
        committer = self._committer
        if q.writes:  # (a cluster's rows alone count: claims settled, messages consumed)
            committer.submit(q.take_writes())
        # Posted before the replies go out: a client that saw this batch's reply and
        # then asks another queue finds the notice applied there first.
        self._notices.send(q, self._deliveries)
        # Always released, even with no reply: writes from timers must be committed.
        deliveries, self._deliveries = self._deliveries, []
        if q.events and committer.off_thread:
            # The release only hands the batch to the writer's next hop: the events go
            # out with the replies, once that hop has committed.
            deliveries.append((EventRelease(self._events), {"events": q.take_events()}))
        committer.release(deliveries)
        # Events after the release, which committed the batch (unless an fsync is
        # due): a subscriber never hears of a change a kill -9 could still undo.
        if q.events:
            self._events.publish(q.take_events())
        # The step's admission goes with it: it remembers the last request it was
        # asked about, which must not keep that request's connection alive while the
        # queue idles (the next step measures afresh anyway).
        q.room = UNLIMITED
