"""The keep-alive half of a :class:`~trioqueue.client.worker.Worker`: lock renewal and
its registration in the broker's worker registry.

Owned by the worker as ``worker.heartbeats``. Every ``heartbeat_interval_s`` every
lease is renewed (``JobHeartbeatB``), then the registry heartbeat is sent. None of this
ever stops the worker: a lost connection is left to the next beat (the lock is longer
than the interval), other errors are reported. ``Worker not found`` in answer to a
heartbeat means the connection that registered us closed, and the worker registers
again.
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING

import anyio

from .errors import CommandError, ConnectionLost, TrioqueueError
from .lease import MAX_BATCH_SIZE, Leases

if TYPE_CHECKING:
    from .connection import Connection
    from .outcomes import Outcomes
    from .worker_events import WorkerEvents

_WORKER_NOT_FOUND = "Worker not found"


class Heartbeats:
    """The worker's lock renewal and its entry in the registry (whether it is
    registered, which the next beat mends)."""

    __slots__ = ("connection", "events", "interval_s", "leases", "name", "outcomes",
                 "queue_name", "registered", "worker_id")

    def __init__(self, connection: Connection, leases: Leases, outcomes: Outcomes,
                 events: WorkerEvents, *, worker_id: str, name: str, queue_name: str,
                 interval_s: float) -> None:
        self.connection = connection
        self.leases = leases
        self.outcomes = outcomes  # the counts the registry heartbeat reports
        self.events = events
        self.worker_id = worker_id
        self.name = name
        self.queue_name = queue_name
        self.interval_s = interval_s
        self.registered = False

    def register_again(self) -> None:
        """The next beat registers anew (what the registry shows has changed)."""
        self.registered = False

    async def loop(self) -> None:
        while True:
            await anyio.sleep(self.interval_s)
            await self.renew_locks()
            await self.registry_heartbeat()

    async def renew_locks(self) -> None:
        """``JobHeartbeatB`` for every lease, running or being settled: a lock must
        outlive the ACK that ends it, or the broker could hand the job to another
        worker while our result is on its way."""
        leases = list(self.leases.held)
        for start in range(0, len(leases), MAX_BATCH_SIZE):
            chunk = leases[start:start + MAX_BATCH_SIZE]
            try:
                await self.connection.call("JobHeartbeatB",
                                           ids=[lease.job.id for lease in chunk],
                                           tokens=[lease.token for lease in chunk])
            except ConnectionLost:
                pass  # the next beat tries again; the lock is longer than the interval
            except TrioqueueError as exc:
                self.events.report(exc, "lock renewal")

    async def registry_heartbeat(self) -> None:
        if not self.registered:
            await self.register()
            return
        try:
            await self.connection.call("Heartbeat", id=self.worker_id,
                                       activeJobs=self.leases.running,
                                       processed=self.outcomes.processed,
                                       failed=self.outcomes.failed)
        except ConnectionLost:
            pass
        except CommandError as exc:
            if exc.message == _WORKER_NOT_FOUND:
                # The connection that registered us closed (a reconnect): again.
                self.registered = False
                await self.register()
            else:
                self.events.report(exc, "heartbeat")
        except TrioqueueError as exc:
            self.events.report(exc, "heartbeat")

    async def register(self) -> None:
        """A failed registration never stops the worker (the registry is for
        monitoring); the next heartbeat tries again."""
        try:
            await self.connection.call(
                "RegisterWorker", name=self.name, queues=[self.queue_name],
                concurrency=self.leases.limit, workerId=self.worker_id,
                hostname=socket.gethostname(), pid=os.getpid())
        except ConnectionLost:
            return
        except TrioqueueError as exc:
            self.events.report(exc, "register")
            return
        self.registered = True

    async def unregister(self) -> None:
        try:
            await self.connection.call("UnregisterWorker", workerId=self.worker_id)
        except CommandError as exc:
            if exc.message != _WORKER_NOT_FOUND:  # never registered, or already gone
                self.events.report(exc, "unregister")
        except TrioqueueError:
            pass  # a closed connection already unregistered us
        self.registered = False
