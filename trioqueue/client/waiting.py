"""Waiting for a job's final outcome: ``Queue.wait_job_until_finished`` and
``Job.wait_until_finished``.

The semantics are bunqueue's (its guide is normative here):

- the result once the job completes, also on a later attempt: a failed attempt that
  will be retried (``failed`` with ``terminal: false``) does not end the wait;
- :class:`~trioqueue.client.errors.JobFailed` with the last attempt's error once no
  retry is left (also a job the stall detector or lock expiry dead-lettered);
- :class:`~trioqueue.client.errors.JobNotFound` (``Job <id> not found``) for a job that
  no longer exists (removed, drained, obliterated): its outcome is unknown. A job
  removed on completion is the exception while the broker retains its result: WaitJob
  then answers ``completed: true``;
- :class:`~trioqueue.client.errors.WaitTimeout` after ``ttl`` seconds (default 30;
  0, None, a negative, NaN or infinite ttl: no limit);
- lost connections, broker restarts and the broker's transient refusals are retried
  with backoff, never reported; only the ttl or a final error (a refused token, a
  closed connection) ends a wait early.

Two ways to wait:

**Without QueueEvents**, a loop of ``WaitJob {id, timeout}`` holds, each up to
``min(remaining ttl, 30 s)``. The broker answers a hold on the outcome, or
``{completed: false}`` at its timeout (ask again at once) or at once when the
connection already has 40 holds parked on that queue. Such a wait then pauses
(50 ms doubling to 1 s, with jitter) before asking again, so that it does not spin,
and is woken early when another wait's hold on the same connection returns (a slot
was freed, or jobs are finishing). Each ask also reads the job's state: a job that is
finished, dead-lettered or gone is answered at once, hold limit or not.

**With QueueEvents**, interest in the job is registered *before* its state is first
read (``WaitJob`` with timeout 0, which answers at once and never takes a hold slot),
so a completion between the read and the registration is not missed. The wait then
settles on the job's ``completed`` event, or its terminal ``failed`` event; it reads
the state again after a ``reconnected`` or ``overflow`` event (events may have been
missed), after a ``removed`` or ``stalled`` event of the job (removal and a stall to
the dead-letter queue are told by the state read), and on a slow schedule (1 s doubling
to 30 s) for what no event reports (Drain and Obliterate emit no per-job event). If
the QueueEvents closes while the wait goes on, the wait carries on with WaitJob holds.
"""

from __future__ import annotations

import math
import random
from collections import deque
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

import anyio

from .connection import backoff_s
from .errors import CommandError, ConnectionLost, JobFailed, WaitTimeout

if TYPE_CHECKING:
    from .connection import Connection
    from .events import QueueEvents
    from .queue import Queue

HOLD_MAX_S = 30.0  # the longest single WaitJob hold
PAUSE_FIRST_S = 0.05  # past the hold limit: first pause before asking again
PAUSE_MAX_S = 1.0
PROBE_FIRST_S = 1.0  # with QueueEvents: state reads for what no event reports
PROBE_MAX_S = 30.0
_EARLY_MARGIN_S = 0.05  # a hold answered this much before its timeout was refused

# The broker's refusals that say "try again later", not "this wait failed".
_TRANSIENT_TEXTS = ("Rate limit exceeded", "Command timeout", "Not connected",
                    "Connection lost")

class _Lot:
    """Where waits past a connection's hold limit park, woken one at a time (oldest
    first) as holds on that connection return."""

    __slots__ = ("_parked",)

    def __init__(self) -> None:
        self._parked: deque[anyio.Event] = deque()

    async def park(self) -> None:
        event = anyio.Event()
        self._parked.append(event)
        try:
            await event.wait()
        finally:
            if not event.is_set():
                self._parked.remove(event)

    def unpark_one(self) -> None:
        if self._parked:
            self._parked.popleft().set()


# Waits past the hold limit of a connection park here and are woken one by one as
# holds on that connection return. Weak, so a closed connection takes its lot along.
_freed: WeakKeyDictionary[Connection, _Lot] = WeakKeyDictionary()


class _Done:
    """A settled wait's result (a class, since the result itself may be None)."""

    __slots__ = ("result",)

    def __init__(self, result: Any) -> None:
        self.result = result


async def wait_until_finished(queue: Queue, job_id: str,
                              queue_events: QueueEvents | None = None,
                              ttl: float | None = 30.0) -> Any:
    """The result of job ``job_id`` once it completes; see the module documentation.

    The ttl is one cancel scope around the whole wait, so that no path (a reconnect
    backoff, a pause past the hold limit, a state read) can outlive it. A hold still
    parked on the broker when the ttl cancels it stays there until its own timeout,
    which is never later than the ttl's end.
    """
    if queue_events is not None and queue_events.name != queue.name:
        raise ValueError(f"QueueEvents of queue {queue_events.name!r} cannot report "
                         f"jobs of queue {queue.name!r}")
    deadline = _deadline(ttl)
    with anyio.move_on_at(deadline):
        if queue_events is not None:
            return await _wait_with_events(queue, job_id, queue_events, deadline)
        return await _wait_with_holds(queue, job_id, deadline)
    assert ttl is not None
    raise WaitTimeout(f"Job {job_id} timed out after {round(ttl * 1000)}ms")


def _deadline(ttl: float | None) -> float:
    if ttl is None or not 0 < ttl < math.inf:  # also NaN
        return math.inf
    return anyio.current_time() + ttl


def _transient(queue: Queue, exc: Exception) -> bool:
    """Whether a failed ask is retried: lost connections and "try later" refusals.

    A connection the caller closed raises ConnectionLost for good, so that is final.
    """
    if isinstance(exc, ConnectionLost):
        return not queue.connection.closed
    return isinstance(exc, CommandError) and exc.message.startswith(_TRANSIENT_TEXTS)


def _settled(job_id: str, reply: dict[str, Any]) -> _Done | None:
    """The outcome a WaitJob reply tells, if any; JobFailed for a failure for good."""
    if reply.get("completed"):
        return _Done(reply.get("result"))
    if reply.get("failed"):
        error = reply.get("error")
        raise JobFailed(job_id, None if error is None else str(error))
    return None


def _lot(connection: Connection) -> _Lot:
    lot = _freed.get(connection)
    if lot is None:
        lot = _freed[connection] = _Lot()
    return lot


async def _wait_with_holds(queue: Queue, job_id: str, deadline: float) -> Any:
    lot = _lot(queue.connection)
    failures = 0
    pause = PAUSE_FIRST_S
    while True:
        hold_s = max(min(deadline - anyio.current_time(), HOLD_MAX_S), 0.0)
        asked = anyio.current_time()
        try:
            reply = await queue.connection.call("WaitJob", id=job_id,
                                                timeout=int(hold_s * 1000))
        except Exception as exc:
            if not _transient(queue, exc):
                raise
            await anyio.sleep(backoff_s(failures))
            failures += 1
            continue
        failures = 0
        early = (not reply.get("completed") and not reply.get("failed")
                 and hold_s > 2 * _EARLY_MARGIN_S
                 and anyio.current_time() < asked + hold_s - _EARLY_MARGIN_S)
        if not early:
            lot.unpark_one()  # a hold returned: its slot is free for a parked wait
        done = _settled(job_id, reply)
        if done is not None:
            return done.result
        if early:  # past the connection's hold limit: ask again later, not at once
            with anyio.move_on_after(pause * (1 + random.random() * 0.3)):
                await lot.park()
            pause = min(pause * 2, PAUSE_MAX_S)
        else:
            pause = PAUSE_FIRST_S


async def _wait_with_events(queue: Queue, job_id: str, queue_events: QueueEvents,
                            deadline: float) -> Any:
    with queue_events.watch(job_id) as watch:
        probe_at = anyio.current_time()
        interval = PROBE_FIRST_S
        failures = 0
        while True:
            if anyio.current_time() >= probe_at:
                try:
                    reply = await queue.connection.call("WaitJob", id=job_id, timeout=0)
                except Exception as exc:
                    if not _transient(queue, exc):
                        raise
                    # Keep listening meanwhile: the event may come before the broker
                    # answers commands again.
                    probe_at = anyio.current_time() + backoff_s(failures)
                    failures += 1
                else:
                    failures = 0
                    done = _settled(job_id, reply)
                    if done is not None:
                        return done.result
                    probe_at = anyio.current_time() + interval * (1 + random.random() * 0.3)
                    interval = min(interval * 2, PROBE_MAX_S)
            got = False
            with anyio.move_on_at(probe_at):
                event = await watch.next()
                got = True
            if not got:
                continue  # time for the scheduled state read
            if event is None:
                break  # the QueueEvents closed: carry on without it
            if event.name == "completed":
                return event.return_value
            if event.name == "failed":
                if event.terminal:
                    raise JobFailed(job_id, event.failed_reason)
                continue  # a retry is pending: not the outcome
            # reconnected, overflow, removed, stalled: the state read tells what changed.
            probe_at = anyio.current_time()
    return await _wait_with_holds(queue, job_id, deadline)
