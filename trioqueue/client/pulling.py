"""The taking half of a :class:`~trioqueue.client.worker.Worker`: the pull loop, and
the processor run on each job it brings.

Bound as the worker's methods (``Worker._pull_loop = pulling._pull_loop``...), so they
read and write the worker's own state. The contract they keep: a pull asks for at most
the free slots; a slot is counted as taken before the processor task starts (so the
loop never over-asks) and freed as soon as the processor returns (so the next pull
overlaps the outcome's command); jobs a pull brings after close() or pause() never
start, they go straight back.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import anyio

from .connection import backoff_s
from .errors import ConnectionLost, TrioqueueError, error_for
from .job import Job
from .lease import RELEASING, Lease, WorkerJob
from .values import check_value

if TYPE_CHECKING:
    from .worker import Worker

_PULL_REPLY_GRACE_S = 10.0     # how late a long-poll reply may be before we give up on it


async def _pull_loop(w: Worker) -> None:
    """Pull as many jobs as there are free slots, start each at once, repeat.

    Errors back off exponentially (0.1 s doubling to 30 s, with jitter) and are
    reported, except a lost connection, which is what the backoff is for: it is
    retried without a word.
    """
    attempt = 0
    drain_delay_s = 0.01 if w.poll_timeout_ms > 0 else 0.05
    while True:
        if w._stopping:
            # Ended by run() once the outcomes are settled.
            await anyio.sleep_forever()
        free = w.leases.limit - w.leases.running
        if w._paused or free <= 0:
            await w.leases.changed.wait()
            continue
        count = min(free, w.batch_size)
        w._pull_in_flight = True
        try:
            reply = await w._pull(count)
        except ConnectionLost:
            await anyio.sleep(backoff_s(attempt))
            attempt += 1
            continue
        except TrioqueueError as exc:
            w.events.report(exc, "pull")
            await anyio.sleep(backoff_s(attempt))
            attempt += 1
            continue
        finally:
            w._pull_in_flight = False
        attempt = 0
        raws = reply.get("jobs") or []
        tokens = reply.get("tokens") or []
        leases = [Lease(WorkerJob(w.queue, w.events, raw, token), token)
                  for raw, token in zip(raws, tokens, strict=False)]
        w.leases.held.update(leases)
        if w._stopping or w._paused:
            # A long-poll that returned after close() or pause(): none of its
            # jobs may start, so they go back before anything else happens.
            for lease in leases:
                lease.state = RELEASING
            await w.outcomes.release(leases)
            continue
        for lease in leases:
            w._start(lease)
        if leases:
            w._drained = False
        if len(leases) < count and not w._drained:
            # The queue had no more ready jobs than these: BullMQ's "drained"
            # (once until a job is pulled again, not on every empty long-poll).
            w._drained = True
            w.events.emit("drained")
        if not leases:
            await anyio.sleep(drain_delay_s)


async def _pull(w: Worker, count: int) -> dict[str, Any]:
    if w.connection.closed:
        raise ConnectionLost("connection closed")
    channel = w._pull_channel
    if channel is None or channel.stale():
        channel = w._pull_channel = await w.connection.open_channel()
    msg = {"cmd": "PULLB", "queue": w.queue_name, "count": count,
           "timeout": w.poll_timeout_ms, "owner": w.id,
           "lockTtl": w.lock_duration_ms}
    if w._group is not None:
        msg["group"] = w._group
    with anyio.move_on_after(w.poll_timeout_ms / 1000 + _PULL_REPLY_GRACE_S) as scope:
        reply = await channel.call(msg)
    if scope.cancelled_caught:
        # The broker is not answering; its reply may yet lease jobs to us. Closing
        # the channel hands those back (and any job of ours not yet renewed,
        # which a broker this slow would likely take back anyway).
        await w._close_pull_channel()
        raise ConnectionLost("no reply to PULLB")
    if not reply.get("ok"):
        raise error_for(str(reply.get("error", "")), "PULLB")
    return reply


async def _close_pull_channel(w: Worker, confirm_s: float = 0.0) -> None:
    """Close the pull channel, which hands back what its pulls leased; with
    ``confirm_s``, wait (that long at most) for the broker to have done so."""
    channel, w._pull_channel = w._pull_channel, None
    if channel is not None:
        with anyio.CancelScope(shield=True):
            if confirm_s:
                await channel.aclose_confirmed(confirm_s)
            else:
                await channel.aclose()


def _start(w: Worker, lease: Lease) -> None:
    # Counted here, not in the task, so that the pull loop sees the slot taken
    # before it can ask for more.
    w.leases.running += 1
    w.leases.tasks += 1
    assert w._work_nursery is not None
    w._work_nursery.start_soon(w._process, lease)


async def _process(w: Worker, lease: Lease) -> None:
    """Run the processor on one lease and send its outcome.

    A result the wire cannot carry (see :mod:`.values`) is a failure of the attempt,
    with the :class:`~trioqueue.client.errors.ValidationError` naming the bad value as
    its error. The lease's own cancel scope lets a forced close cancel this processor and
    nothing else; when it did, the job goes back uncharged. A cancellation of the
    whole worker is not caught here: it propagates, and :meth:`Worker._finish` hands the
    job back. The slot is freed as soon as the processor returns, before the
    outcome is sent, so the next pull overlaps the ACK.
    """
    job = lease.job
    result: Any = None
    error: Exception | None = None
    try:
        try:
            lease.task = anyio.get_current_task().id
            with lease.scope:
                w.events.emit("active", job)
                try:
                    result = await w._call_processor(job)
                    # A result the wire cannot carry fails this job alone, with the
                    # reason as its error, before it could join (and spoil) an ACKB.
                    check_value(result, "result")
                except Exception as exc:
                    error = exc
        finally:
            lease.task = None
            w.leases.running -= 1
            w.leases.notify()
        if lease.scope.cancelled_caught:
            lease.state = RELEASING
            await w.outcomes.release([lease])
        elif error is None:
            w.outcomes.queue_ack(lease, result)
        else:
            await w.outcomes.send_fail(lease, error)
    finally:
        w.leases.tasks -= 1
        w.leases.notify()


async def _call_processor(w: Worker, job: Job) -> Any:
    if w._is_async:
        return await w._processor_call(job)
    # abandon_on_cancel: a thread cannot be interrupted, and a forced close must not
    # wait for it; the thread finishes on its own and its result is dropped.
    return await anyio.to_thread.run_sync(w._processor_call, job, limiter=w._limiter,
                                         abandon_on_cancel=True)


def is_async_callable(fn: Any) -> bool:
    """``async def`` functions, also behind ``functools.partial`` or as ``__call__``."""
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - an instance's async __call__
    return call is not None and inspect.iscoroutinefunction(call)
