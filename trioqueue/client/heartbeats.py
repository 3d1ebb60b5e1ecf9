"""The keep-alive half of a :class:`~trioqueue.client.worker.Worker`: lock renewal and
its registration in the broker's worker registry.

Bound as the worker's methods, like :mod:`.pulling`. Every ``heartbeat_interval_s``
every lease is renewed (``JobHeartbeatB``), then the registry heartbeat is sent. None
of this ever stops the worker: a lost connection is left to the next beat (the lock is
longer than the interval), other errors are reported. ``Worker not found`` in answer
to a heartbeat means the connection that registered us closed, and the worker
registers again.
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING

import anyio

from .errors import CommandError, ConnectionLost, TrioqueueError
from .lease import MAX_BATCH_SIZE

if TYPE_CHECKING:
    from .worker import Worker

_WORKER_NOT_FOUND = "Worker not found"


async def _heartbeat_loop(w: Worker) -> None:
    while True:
        await anyio.sleep(w.heartbeat_interval_s)
        await w._renew_locks()
        await w._registry_heartbeat()


async def _renew_locks(w: Worker) -> None:
    """``JobHeartbeatB`` for every lease, running or being settled: a lock must
    outlive the ACK that ends it, or the broker could hand the job to another
    worker while our result is on its way."""
    leases = list(w.leases.held)
    for start in range(0, len(leases), MAX_BATCH_SIZE):
        chunk = leases[start:start + MAX_BATCH_SIZE]
        try:
            await w.connection.call("JobHeartbeatB", ids=[lease.job.id for lease in chunk],
                                       tokens=[lease.token for lease in chunk])
        except ConnectionLost:
            pass  # the next beat tries again; the lock is longer than the interval
        except TrioqueueError as exc:
            w.events.report(exc, "lock renewal")


async def _registry_heartbeat(w: Worker) -> None:
    if not w._registered:
        await w._register()
        return
    try:
        await w.connection.call("Heartbeat", id=w.id, activeJobs=w.leases.running,
                                   processed=w.outcomes.processed,
                                   failed=w.outcomes.failed)
    except ConnectionLost:
        pass
    except CommandError as exc:
        if exc.message == _WORKER_NOT_FOUND:
            # The connection that registered us closed (a reconnect): again.
            w._registered = False
            await w._register()
        else:
            w.events.report(exc, "heartbeat")
    except TrioqueueError as exc:
        w.events.report(exc, "heartbeat")


async def _register(w: Worker) -> None:
    """A failed registration never stops the worker (the registry is for
    monitoring); the next heartbeat tries again."""
    try:
        await w.connection.call(
            "RegisterWorker", name=w.name, queues=[w.queue_name],
            concurrency=w.leases.limit, workerId=w.id,
            hostname=socket.gethostname(), pid=os.getpid())
    except ConnectionLost:
        return
    except TrioqueueError as exc:
        w.events.report(exc, "register")
        return
    w._registered = True


async def _unregister(w: Worker) -> None:
    try:
        await w.connection.call("UnregisterWorker", workerId=w.id)
    except CommandError as exc:
        if exc.message != _WORKER_NOT_FOUND:  # never registered, or already gone
            w.events.report(exc, "unregister")
    except TrioqueueError:
        pass  # a closed connection already unregistered us
    w._registered = False

