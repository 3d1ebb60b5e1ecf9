"""Worker: lease jobs from one queue, run a processor on each, report the outcomes.

A worker runs inside a task group of yours (a trio nursery, an anyio task group, an
asyncio task) and ends when you close it or cancel it, so its lifetime is that of a
block of your program::

    async with open_connection(embedded=True) as conn:
        worker = Worker("emails", send_email, conn, concurrency=8)
        async with anyio.create_task_group() as nursery:
            await nursery.start(worker.run)   # returns once registered and pulling
            ...
            await worker.close()              # graceful: finish what runs, hand back the rest

``nursery.start_soon(worker.run)`` works too; ``nursery.start`` also waits until the
worker is registered and its pull loop is running.

**Processors.** ``async def processor(job)`` runs in the worker's nursery;
a plain function runs in a thread (``anyio.to_thread.run_sync``, at most
``concurrency`` threads through a :class:`anyio.CapacityLimiter`). Either gets a
:class:`~trioqueue.client.job.Job` with ``job.token`` set to its lease. An async
processor awaits job methods as usual (``await job.update_progress(50)``,
``await job.log("...")``); a thread reaches them through anyio:
``anyio.from_thread.run(job.update_progress, 50)``. What a processor returns is the
job's result (it must be a value the wire carries, see :mod:`.values`, or the job
fails with the :class:`~trioqueue.client.errors.ValidationError` naming it); raising
fails the attempt, and the broker retries it with the job's backoff until its
attempts are spent (the worker never retries by itself).
:class:`UnrecoverableError` fails the job for good at once.

**Leases.** One pull (``PULLB`` with ``owner`` = :attr:`Worker.id` and
``lockTtl`` = ``lock_duration_ms``) asks for at most the free slots (``concurrency``
minus the jobs being processed), so every job pulled starts at once and no more than
``concurrency`` jobs are ever leased for processing; a job whose result waits in the
ACK batch (at most ``ack_batch_delay_ms``) no longer holds a slot. Every lease is renewed
every ``heartbeat_interval_s`` (``JobHeartbeatB``) until its outcome is applied.

**Outcomes.** Results go out in ``ACKB`` batches: at ``batch_size`` results, after
``ack_batch_delay_ms``, or at once when no processor is running (nothing else could
join the batch soon, so waiting would only add latency). Failures go out one by one as
``FAIL``. ``completed`` and ``failed`` are emitted only for outcomes the broker applied:
an ``ACKB`` position it reports in ``ignoredIndices`` (the job was removed, discarded or
finished meanwhile) and a ``FAIL`` it answers ``applied: false`` emit nothing.

**Events.** ``worker.on(name, fn)`` for ``active(job)``, ``completed(job, result)``,
``failed(job, exc)``, ``progress(job, progress)``, ``error(exc)``, ``drained()`` and
``closed()``. A plain callback runs inline when the event happens; a coroutine function
(or a callback returning an awaitable) runs as a task of the worker. Exceptions raised by
callbacks are logged, never propagated: a listener cannot kill the worker.

**Limits.** ``limiter`` and ``group_concurrency`` are not enforced in the worker: a
limit kept by each worker would let two workers run twice the jobs. They become the
queue's own limit at the broker (``RateLimit``, at most ``max`` jobs in any
``duration``, set when the worker starts) and the per-group default every pull of the
worker sends (``PULLB``'s ``group`` field), so they bind every consumer of the queue
together.

**Registry.** ``RegisterWorker`` before the first pull, ``Heartbeat`` (active jobs,
processed, failed) with every lock renewal, ``UnregisterWorker`` on close. The broker
forgets a registration when the connection that made it closes; the next heartbeat then
answers ``Worker not found`` and the worker registers again, which is how it notices a
reconnect without any extra traffic.

**Layout.** This module holds the worker's lifetime (run, close); the worker composes
its parts, each an object owning its own fields: ``puller`` (:mod:`.pulling`: the pull
loop and the processors), ``outcomes`` (:mod:`.outcomes`: ACKB, FAIL, hand-backs),
``heartbeats`` (:mod:`.heartbeats`: lock renewal, the registry) and ``events``
(:mod:`.worker_events`: the listeners), over the shared ``leases`` of :mod:`.lease`.
"""

from __future__ import annotations

import math
import os
import socket
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from . import shutdown, tracing
from .heartbeats import Heartbeats
from .job import Job
from .lease import MAX_BATCH_SIZE, Leases, log
from .outcomes import Outcomes, UnrecoverableError
from .pulling import Puller, is_async_callable
from .queue import Queue
from .shutdown import DEFAULT_GRACE_S
from .worker_events import EVENTS, Listener, WorkerEvents

if TYPE_CHECKING:
    from .connection import Connection

__all__ = ["DEFAULT_MAX_BATCH", "EVENTS", "MAX_BATCH_SIZE", "MAX_POLL_TIMEOUT_MS", "Listener",
           "Processor", "UnrecoverableError", "Worker"]

DEFAULT_MAX_BATCH = 100        # default batch_size: min(concurrency, this)
MAX_POLL_TIMEOUT_MS = 60_000   # PULLB's ``timeout`` limit
_FINISH_S = 5.0                # bound on the network work of the final cleanup

Processor = Callable[[Job], Any]

# Worker states.
_NEW, _STARTED, _CLOSED = "new", "running", "closed"


def check_concurrency(value: Any, name: str = "concurrency") -> int:
    """A count of at least 1 (concurrency, a limiter's max and duration)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer of at least 1")
    return value


def check_worker_options(*, batch_size: Any, lock_duration_ms: float,
                         heartbeat_interval_s: float, poll_timeout_ms: float,
                         ack_batch_delay_ms: float) -> None:
    if not isinstance(batch_size, int) or not 1 <= batch_size <= MAX_BATCH_SIZE:
        raise ValueError(f"batch_size must be an integer from 1 to {MAX_BATCH_SIZE}")
    if not (math.isfinite(lock_duration_ms) and lock_duration_ms > 0):
        raise ValueError("lock_duration_ms must be a positive number")
    if not (math.isfinite(heartbeat_interval_s) and heartbeat_interval_s > 0):
        raise ValueError("heartbeat_interval_s must be a positive number")
    if heartbeat_interval_s * 1000 >= lock_duration_ms:
        # Every job running longer than its lock would be taken back and run again.
        raise ValueError("heartbeat_interval_s must be shorter than lock_duration_ms")
    if not 0 <= poll_timeout_ms <= MAX_POLL_TIMEOUT_MS:
        raise ValueError(f"poll_timeout_ms must be from 0 to {MAX_POLL_TIMEOUT_MS}")
    if not (math.isfinite(ack_batch_delay_ms) and ack_batch_delay_ms >= 0):
        raise ValueError("ack_batch_delay_ms must be a number of at least 0")


def rate_limit_fields(limiter: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """BullMQ's ``limiter={"max": n, "duration": ms}`` as the fields of the queue's
    ``RateLimit``: at most ``max`` jobs leased per ``duration`` ms by all the queue's
    consumers together, in any window of ``duration`` ms from the first."""
    if limiter is None:
        return None
    unknown = set(limiter) - {"max", "duration"}
    if unknown:
        raise ValueError(f"limiter takes max and duration, not {sorted(unknown)}")
    return {"limit": check_concurrency(limiter.get("max"), "limiter max"),
            "duration": check_concurrency(limiter.get("duration"), "limiter duration")}


def group_field(group_concurrency: int | None,
                group_limiter: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """``PULLB``'s ``group``: the per-group concurrency (and rate) the queue's groups
    get unless a group has its own (``SetGroupConcurrency``, ``SetGroupRateLimit``)."""
    group: dict[str, Any] = {}
    if group_concurrency is not None:
        check_concurrency(group_concurrency, "group_concurrency")
        group["concurrency"] = group_concurrency
    if group_limiter is not None:
        fields = rate_limit_fields(group_limiter)
        assert fields is not None
        group["limit"] = {"max": fields["limit"], "duration": fields["duration"]}
    return group or None


class Worker:
    """Processes the jobs of one queue; see the module docstring for the model.

    :param queue_name: the queue to take jobs from.
    :param processor: ``async def f(job)`` (runs in the event loop) or ``def f(job)`` (runs in a
        thread); its return value is the job's result.
    :param connection: a :class:`~trioqueue.client.connection.Connection`. Outcomes,
        heartbeats and progress go through its pool; long-polls get a channel of their
        own (see :meth:`run`).
    :param concurrency: jobs processed at once (and leased at most).
    :param batch_size: jobs asked for by one pull, and results sent by one ``ACKB``;
        default ``min(concurrency, 100)``: a pull never asks for more than the free
        slots anyway, and 100 bounds the size of one reply (job data may be large).
    :param lock_duration_ms: the lease each pull asks for; renewed every heartbeat.
    :param heartbeat_interval_s: how often every lease is renewed and the registry
        heartbeat sent; must be shorter than ``lock_duration_ms``.
    :param poll_timeout_ms: how long one pull waits at the broker for a job (0: no
        long-poll; a pause of 50 ms follows an empty pull then).
    :param ack_batch_delay_ms: how long a result may wait for others to share its
        ``ACKB``.
    :param name: the name shown by ``ListWorkers`` (default ``host:pid:id``).
    :param limiter: ``{"max": n, "duration": ms}``: the queue leases at most ``n`` jobs
        per ``duration`` to all its consumers together (set as the queue's ``RateLimit``
        when the worker starts; it stays until removed).
    :param group_concurrency: jobs of one group active at once, across the queue's
        consumers, for groups without a limit of their own.
    :param telemetry: run each job's processor in an OpenTelemetry span whose parent is
        the job's ``traceContext`` (needs opentelemetry-api; docs/tracing.md).
    """

    def __init__(
        self,
        queue_name: str,
        processor: Processor,
        connection: Connection,
        *,
        concurrency: int = 1,
        batch_size: int | None = None,
        lock_duration_ms: float = 30_000,
        heartbeat_interval_s: float = 10.0,
        poll_timeout_ms: float = 1_000,
        ack_batch_delay_ms: float = 5.0,
        name: str | None = None,
        limiter: Mapping[str, Any] | None = None,
        group_concurrency: int | None = None,
        telemetry: bool = False,
    ) -> None:
        check_concurrency(concurrency)
        if batch_size is None:
            batch_size = min(concurrency, DEFAULT_MAX_BATCH)
        check_worker_options(batch_size=batch_size, lock_duration_ms=lock_duration_ms,
                             heartbeat_interval_s=heartbeat_interval_s,
                             poll_timeout_ms=poll_timeout_ms,
                             ack_batch_delay_ms=ack_batch_delay_ms)
        self._rate_limit = rate_limit_fields(limiter)
        self.queue = Queue(queue_name, connection)  # validates the name
        self.queue_name = queue_name
        self.processor = processor
        self.connection = connection
        self.batch_size = batch_size
        self.lock_duration_ms = lock_duration_ms
        self.heartbeat_interval_s = heartbeat_interval_s
        self.poll_timeout_ms = poll_timeout_ms
        self.ack_batch_delay_ms = ack_batch_delay_ms
        #: The worker's id: its registry id and the ``owner`` of its leases.
        self.id = uuid.uuid4().hex
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{self.id[:8]}"

        self.events = WorkerEvents(self.name)
        self.leases = Leases(concurrency)
        self.outcomes = Outcomes(connection, self.leases, self.events, name=self.name,
                                 batch_size=batch_size,
                                 ack_batch_delay_ms=ack_batch_delay_ms)
        self.heartbeats = Heartbeats(connection, self.leases, self.outcomes, self.events,
                                     worker_id=self.id, name=self.name,
                                     queue_name=queue_name,
                                     interval_s=heartbeat_interval_s)
        self.puller = Puller(
            self.queue, self.leases, self.outcomes, self.events,
            tracing.traced(processor, queue_name) if telemetry else processor,
            is_async=is_async_callable(processor), worker_id=self.id,
            batch_size=batch_size, poll_timeout_ms=poll_timeout_ms,
            lock_duration_ms=lock_duration_ms, group=group_field(group_concurrency))
        self._state = _NEW
        self._close_requested = anyio.Event()
        self._closed_event = anyio.Event()
        # The graceful wait of close() and its deadline; made by run(), as a cancel scope
        # belongs to an event loop.
        self._graceful: anyio.CancelScope | None = None
        self._grace_s = 0.0  # the timeout of close() that bounds _graceful

    def __repr__(self) -> str:
        return f"<Worker {self.name} on {self.queue_name} ({self._state})>"

    # ------------------------------------------------------------------ state

    @property
    def concurrency(self) -> int:
        return self.leases.limit

    @concurrency.setter
    def concurrency(self, value: int) -> None:
        """Takes effect at the next pull; lowering it never interrupts a running job,
        the worker just pulls less until enough of them finished."""
        check_concurrency(value)
        self.leases.limit = value
        self.puller.limiter.total_tokens = value
        self.heartbeats.register_again()  # with the new value
        self.leases.notify()

    @property
    def processed_count(self) -> int:
        """Results the broker applied (what the registry heartbeat reports)."""
        return self.outcomes.processed

    @property
    def failed_count(self) -> int:
        """Failures the broker applied."""
        return self.outcomes.failed

    @property
    def is_running(self) -> bool:
        """True from :meth:`run` until the worker is closed."""
        return self._state == _STARTED

    @property
    def is_paused(self) -> bool:
        return self.puller.paused

    @property
    def is_closed(self) -> bool:
        return self._state == _CLOSED

    @property
    def closing(self) -> bool:
        """True once :meth:`close` was called (and until the worker is closed)."""
        return self.puller.stopping and self._state != _CLOSED

    @property
    def active_count(self) -> int:
        """Jobs whose processor is running."""
        return self.leases.running

    def pause(self) -> None:
        """Stop taking jobs; the running ones finish (and are acknowledged) as usual.

        A long-poll already waiting at the broker cannot be withdrawn without closing
        its channel (which would also hand back the running jobs), so it is left to
        return: the jobs it brings are handed back at once (``MoveToWait``, no attempt
        charged) rather than started. So no job starts between ``pause()`` and
        :meth:`resume`.
        """
        self.puller.pause()

    def resume(self) -> None:
        self.puller.resume()

    # ------------------------------------------------------------------ events

    def on(self, event: str, fn: Listener) -> Listener:
        """Call ``fn`` on ``event``; returns ``fn`` (so it can be a decorator's target)."""
        return self.events.on(event, fn)

    def off(self, event: str, fn: Listener) -> None:
        self.events.off(event, fn)

    # ------------------------------------------------------------------ lifetime

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
                  signals: bool = False, grace_s: float = DEFAULT_GRACE_S) -> None:
        """Process jobs until :meth:`close` (then return) or cancellation (then raise).

        ``signals=True`` (in the main thread) shuts down warmly on SIGTERM/Ctrl-C, as
        ``trioqueue worker`` does: the first signal is ``close(timeout=grace_s)``, a
        second one ``close(force=True)`` (:mod:`.shutdown`).

        With ``nursery.start(worker.run)`` the start returns once the worker is
        registered and its loops are running.

        Long-polls use a channel of their own: the broker ties the jobs a pull
        delivers to the connection that pulled them, and hands them back (uncharged)
        when that connection closes unless their lock was renewed. That makes the
        pull channel the one safe way to interrupt a long-poll: cancelling the
        command alone would strand whatever jobs its reply was already carrying until
        their lock expired (charging an attempt), whereas closing the channel hands
        them back. So closing does not wait ``poll_timeout_ms`` for an idle pull.

        Cancelled from outside (the nursery's scope, Ctrl-C), the worker still
        cleans up in a shielded scope bounded to a few seconds: results already
        computed are acknowledged, jobs interrupted mid-processing are handed back
        uncharged, its pull channel is closed (handing back anything a pull in
        flight had leased) and it unregisters. Then the cancellation goes on.
        """
        if self._state != _NEW:
            raise RuntimeError("a Worker runs once; make a new one")
        self._state = _STARTED
        self._graceful = anyio.CancelScope()
        async with anyio.create_task_group() as listeners:
            # Listener tasks outlive the work so that one that awaits close() (say, on
            # "drained") is not waited for by the very close it waits for.
            self.events.nursery = listeners
            try:
                async with anyio.create_task_group() as work:
                    self.puller.nursery = work
                    await self.heartbeats.register()
                    if self._rate_limit is not None:
                        await self.queue._queue_call("RateLimit", **self._rate_limit)
                    async with anyio.create_task_group() as loops:
                        loops.start_soon(self.puller.loop)
                        loops.start_soon(self.outcomes.ack_loop)
                        loops.start_soon(self.heartbeats.loop)
                        if signals:
                            loops.start_soon(shutdown.watch_signals, self, grace_s)
                        task_status.started()
                        await self._close_requested.wait()
                        await self._drain()
                        # Only now do the loops stop: the heartbeats kept renewing
                        # every lease until its outcome was applied.
                        loops.cancel_scope.cancel()
            finally:
                self.puller.nursery = None
                with anyio.CancelScope(shield=True):
                    await self._finish()
                self._state = _CLOSED
                self._closed_event.set()
                self.events.emit("closed")
        self.events.nursery = None

    async def close(self, force: bool = False, timeout: float | None = None) -> None:
        """Stop the worker and return once it is closed.

        Graceful (the default): no more pulls; jobs a pull in flight brings are handed
        back (``MoveToWait`` with their token, no attempt charged); running processors
        finish and their outcomes are sent; then ``UnregisterWorker``. ``timeout``
        (seconds) bounds the wait for the processors: when it runs out, the ones
        still running are treated as with ``force``. None waits as long as they take
        (BullMQ's behaviour; pass a timeout when your platform kills a process that
        takes too long to stop).

        ``force=True``: running processors are cancelled at once (a thread processor
        is abandoned: its thread runs on, and its result is dropped) and their jobs
        handed back uncharged, as if they had never been pulled. Results already
        computed are still acknowledged. A later ``close(force=True)`` upgrades a
        graceful close in progress.

        Called from inside a processor, close cannot wait for the worker to close
        (it would wait for itself): it starts the close and returns.
        """
        if self._state == _CLOSED:
            return
        if self._state == _NEW:
            # Never ran: nothing is leased or registered.
            self._state = _CLOSED
            self._closed_event.set()
            for awaitable in self.events.emit("closed"):
                await self.events.await_listener("closed", awaitable)
            return
        self.puller.stop()
        if timeout is not None:
            assert self._graceful is not None  # made by run(), which set _STARTED
            self._grace_s = timeout  # (named in the log line when it runs out)
            self._graceful.deadline = min(self._graceful.deadline,
                                          anyio.current_time() + max(timeout, 0))
        if force:
            assert self._graceful is not None
            self._graceful.cancel()
            self.leases.cancel_running()
        self._close_requested.set()
        self.leases.notify()
        if self.leases.held_by_task(anyio.get_current_task().id):
            return
        await self._closed_event.wait()

    async def _drain(self) -> None:
        """The graceful half of close, run by :meth:`run` once close was asked for.

        Pulling has stopped (``puller.stopping``). The processors get until the close's
        deadline; those still running then are cancelled, which hands their jobs back
        uncharged. Then every result still waiting is acknowledged, while the
        heartbeat loop still renews the leases of the jobs being settled.
        """
        assert self._graceful is not None
        leases = self.leases
        with self._graceful:
            await leases.wait_tasks_idle()
        if leases.running and anyio.current_time() >= self._graceful.deadline:  # not forced
            log.warning("worker %s: the grace period of %g s is over: handing back %d "
                        "running job(s) (no attempt charged)", self.name, self._grace_s,
                        leases.running)
        leases.cancel_running()
        await leases.wait_tasks_idle()
        await self.outcomes.flush_acks()

    async def _finish(self) -> None:
        """The last cleanup, shielded, after the worker's tasks are gone.

        After a graceful close little is left to do; after a cancellation this is
        where outcomes are settled: results computed are acknowledged, failures whose
        FAIL was interrupted are sent again (a duplicate is answered
        ``applied: false`` or refused, both harmless), and jobs still leased are
        handed back. The network part is bounded by ``_FINISH_S``. Closing the pull
        channel always happens, as it is what hands back whatever is left, including
        jobs a pull in flight had leased that we never saw; it waits (``_FINISH_S`` at
        most) for the broker's close, so when this returns the jobs are back.
        """
        with anyio.move_on_after(_FINISH_S):
            outcomes = self.outcomes
            await outcomes.flush_acks()
            leftovers = list(self.leases.held)
            async with anyio.create_task_group() as nursery:
                for lease in leftovers:
                    if lease.error is not None:
                        nursery.start_soon(outcomes.send_fail, lease, lease.error)
                nursery.start_soon(outcomes.release,
                                   [lease for lease in leftovers if lease.error is None])
        # Confirmed: a long-poll still parked there takes the jobs handed back above,
        # and only the broker's close of that connection returns them for good.
        await self.puller.close_channel(_FINISH_S)
        with anyio.move_on_after(_FINISH_S):
            await self.heartbeats.unregister()
