"""The taking half of a :class:`~trioqueue.client.worker.Worker`: the pull loop, and
the processor run on each job it brings.

Owned by the worker as ``worker.puller``. The contract it keeps: a pull asks for at most
the free slots; a slot is counted as taken before the processor task starts (so the
loop never over-asks) and freed as soon as the processor returns (so the next pull
overlaps the outcome's command); jobs a pull brings after close() or pause() never
start, they go straight back.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from .connection import backoff_s
from .errors import ConnectionLost, TrioqueueError, error_for
from .job import Job
from .lease import RELEASING, Lease, Leases, WorkerJob
from .values import check_value

if TYPE_CHECKING:
    from .channels import Channel
    from .connection import Connection
    from .outcomes import Outcomes
    from .queue import Queue
    from .worker_events import WorkerEvents

_PULL_REPLY_GRACE_S = 10.0     # how late a long-poll reply may be before we give up on it


class Puller:
    """The worker's pulls (on a channel of their own) and the processors they start.

    It owns the flags that stop pulling (``paused``, ``stopping``), the pull channel,
    and the task group the processors run in while the worker runs.
    """

    __slots__ = ("batch_size", "channel", "connection", "drained", "events", "group",
                 "in_flight", "is_async", "leases", "limiter", "lock_duration_ms",
                 "nursery", "outcomes", "paused", "poll_timeout_ms", "processor_call",
                 "queue", "stopping", "worker_id")

    def __init__(self, queue: Queue, leases: Leases, outcomes: Outcomes,
                 events: WorkerEvents, processor_call: Callable[[Job], Any], *,
                 is_async: bool, worker_id: str, batch_size: int, poll_timeout_ms: float,
                 lock_duration_ms: float, group: dict[str, Any] | None) -> None:
        self.queue = queue  # the queue of the jobs handed to the processor
        self.connection: Connection = queue.connection
        self.leases = leases
        self.outcomes = outcomes
        self.events = events
        # what runs each job: the processor, or it inside a span (client/tracing.py)
        self.processor_call = processor_call
        self.is_async = is_async
        # at most ``concurrency`` thread processors at once
        self.limiter = anyio.CapacityLimiter(leases.limit)
        self.worker_id = worker_id  # the owner of the leases
        self.batch_size = batch_size
        self.poll_timeout_ms = poll_timeout_ms
        self.lock_duration_ms = lock_duration_ms
        self.group = group  # PULLB's ``group``: the per-group default limits
        self.paused = False
        self.stopping = False
        self.drained = False
        self.in_flight = False  # a PULLB is out
        self.channel: Channel | None = None
        self.nursery: anyio.abc.TaskGroup | None = None  # the processors', while running

    def pause(self) -> None:
        self.paused = True
        self.leases.notify()

    def resume(self) -> None:
        self.paused = False
        self.leases.notify()

    def stop(self) -> None:
        """No more pulls, for good (the worker is closing)."""
        self.stopping = True
        self.leases.notify()

    async def loop(self) -> None:
        """Pull as many jobs as there are free slots, start each at once, repeat.

        Errors back off exponentially (0.1 s doubling to 30 s, with jitter) and are
        reported, except a lost connection, which is what the backoff is for: it is
        retried without a word.
        """
        leases, events, queue = self.leases, self.events, self.queue
        attempt = 0
        drain_delay_s = 0.01 if self.poll_timeout_ms > 0 else 0.05
        while True:
            if self.stopping:
                # Ended by run() once the outcomes are settled.
                await anyio.sleep_forever()
            free = leases.limit - leases.running
            if self.paused or free <= 0:
                await leases.changed.wait()
                continue
            count = min(free, self.batch_size)
            self.in_flight = True
            try:
                reply = await self._pull(count)
            except ConnectionLost:
                await anyio.sleep(backoff_s(attempt))
                attempt += 1
                continue
            except TrioqueueError as exc:
                events.report(exc, "pull")
                await anyio.sleep(backoff_s(attempt))
                attempt += 1
                continue
            finally:
                self.in_flight = False
            attempt = 0
            raws = reply.get("jobs") or []
            tokens = reply.get("tokens") or []
            pulled = [Lease(WorkerJob(queue, events, raw, token), token)
                      for raw, token in zip(raws, tokens, strict=False)]
            leases.held.update(pulled)
            if self.stopping or self.paused:
                # A long-poll that returned after close() or pause(): none of its
                # jobs may start, so they go back before anything else happens.
                for lease in pulled:
                    lease.state = RELEASING
                await self.outcomes.release(pulled)
                continue
            for lease in pulled:
                self._start(lease)
            if pulled:
                self.drained = False
            if len(pulled) < count and not self.drained:
                # The queue had no more ready jobs than these: BullMQ's "drained"
                # (once until a job is pulled again, not on every empty long-poll).
                self.drained = True
                events.emit("drained")
            if not pulled:
                await anyio.sleep(drain_delay_s)

    async def _pull(self, count: int) -> dict[str, Any]:
        if self.connection.closed:
            raise ConnectionLost("connection closed")
        channel = self.channel
        if channel is None or channel.stale():
            channel = self.channel = await self.connection.open_channel()
        msg = {"cmd": "PULLB", "queue": self.queue.name, "count": count,
               "timeout": self.poll_timeout_ms, "owner": self.worker_id,
               "lockTtl": self.lock_duration_ms}
        if self.group is not None:
            msg["group"] = self.group
        with anyio.move_on_after(self.poll_timeout_ms / 1000 + _PULL_REPLY_GRACE_S) as scope:
            reply = await channel.call(msg)
        if scope.cancelled_caught:
            # The broker is not answering; its reply may yet lease jobs to us. Closing
            # the channel hands those back (and any job of ours not yet renewed,
            # which a broker this slow would likely take back anyway).
            await self.close_channel()
            raise ConnectionLost("no reply to PULLB")
        if not reply.get("ok"):
            raise error_for(str(reply.get("error", "")), "PULLB")
        return reply

    async def close_channel(self, confirm_s: float = 0.0) -> None:
        """Close the pull channel, which hands back what its pulls leased; with
        ``confirm_s``, wait (that long at most) for the broker to have done so."""
        channel, self.channel = self.channel, None
        if channel is not None:
            with anyio.CancelScope(shield=True):
                if confirm_s:
                    await channel.aclose_confirmed(confirm_s)
                else:
                    await channel.aclose()

    def _start(self, lease: Lease) -> None:
        # Counted here, not in the task, so that the pull loop sees the slot taken
        # before it can ask for more.
        self.leases.running += 1
        self.leases.tasks += 1
        assert self.nursery is not None
        self.nursery.start_soon(self._process, lease)

    async def _process(self, lease: Lease) -> None:
        """Run the processor on one lease and send its outcome.

        A result the wire cannot carry (see :mod:`.values`) is a failure of the
        attempt, with the :class:`~trioqueue.client.errors.ValidationError` naming the
        bad value as its error. The lease's own cancel scope lets a forced close cancel
        this processor and nothing else; when it did, the job goes back uncharged. A
        cancellation of the whole worker is not caught here: it propagates, and the
        worker's final cleanup hands the job back. The slot is freed as soon as the
        processor returns, before the outcome is sent, so the next pull overlaps the
        ACK.
        """
        leases = self.leases
        job = lease.job
        result: Any = None
        error: Exception | None = None
        try:
            try:
                lease.task = anyio.get_current_task().id
                with lease.scope:
                    self.events.emit("active", job)
                    try:
                        result = await self._call_processor(job)
                        # A result the wire cannot carry fails this job alone, with the
                        # reason as its error, before it could join (and spoil) an ACKB.
                        check_value(result, "result")
                    except Exception as exc:
                        error = exc
            finally:
                lease.task = None
                leases.running -= 1
                leases.notify()
            if lease.scope.cancelled_caught:
                lease.state = RELEASING
                await self.outcomes.release([lease])
            elif error is None:
                self.outcomes.queue_ack(lease, result)
            else:
                await self.outcomes.send_fail(lease, error)
        finally:
            leases.tasks -= 1
            leases.notify()

    async def _call_processor(self, job: Job) -> Any:
        if self.is_async:
            return await self.processor_call(job)
        # abandon_on_cancel: a thread cannot be interrupted, and a forced close must not
        # wait for it; the thread finishes on its own and its result is dropped.
        return await anyio.to_thread.run_sync(self.processor_call, job, limiter=self.limiter,
                                             abandon_on_cancel=True)


def is_async_callable(fn: Any) -> bool:
    """``async def`` functions, also behind ``functools.partial`` or as ``__call__``."""
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - an instance's async __call__
    return call is not None and inspect.iscoroutinefunction(call)
