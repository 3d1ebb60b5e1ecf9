"""What the parts of a :class:`~trioqueue.client.worker.Worker` share: its leases.

A lease is one delivery of a job to the worker, from the pull that brought it until
its outcome (ACK, FAIL or hand-back) is settled; the pull loop (:mod:`.pulling`), the
outcome senders (:mod:`.outcomes`) and the lock renewal (:mod:`.heartbeats`) all work
on the worker's :class:`Leases`. Also here: the batch limit they all chunk by, and the
one logger they write to.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import anyio

from .job import Job

if TYPE_CHECKING:
    from .queue import Queue
    from .worker_events import WorkerEvents

# One logger for every part of the worker, under the name users already configure.
log = logging.getLogger("trioqueue.client.worker")

MAX_BATCH_SIZE = 1000          # PULLB's ``count`` limit (also ACKB's and JobHeartbeatB's)

# Lease states.
RUNNING = "running"      # holds a slot; its processor runs
ACKING = "acking"        # result waits in the ACK batch or is being sent
FAILING = "failing"      # FAIL being sent
RELEASING = "releasing"  # being handed back with MoveToWait


class Lease:
    """One delivery of a job to this worker: the job, its token and where it stands.

    A job may be delivered to us again while an older delivery is still being
    settled (its lock expired and it came back), so leases are objects, not job ids:
    each outcome goes out with its own delivery's token.
    """

    __slots__ = ("error", "job", "scope", "state", "task", "token")

    def __init__(self, job: Job, token: str) -> None:
        self.job = job
        self.token = token
        self.state = RUNNING
        self.scope = anyio.CancelScope()  # cancels this processor alone (force close)
        self.task: int | None = None  # the id of the processor's task while it runs
        self.error: Exception | None = None  # set once the processor failed


class Leases:
    """The worker's leases and the processing slots they take.

    Shared by the puller (takes slots), the outcomes (settle leases) and the heartbeats
    (renew them). ``changed`` is set, and replaced, by :meth:`notify` whenever a slot,
    a task or a flag of the worker changes: what the pull loop and the close wait on.
    """

    __slots__ = ("changed", "held", "limit", "running", "tasks")

    def __init__(self, limit: int) -> None:
        self.held: set[Lease] = set()  # every lease until its outcome is settled
        self.limit = limit  # the worker's concurrency
        self.running = 0  # slots held: leases whose processor has not returned
        self.tasks = 0    # processor tasks alive (they also send FAIL or release)
        self.changed = anyio.Event()

    def notify(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()

    async def wait_tasks_idle(self) -> None:
        while self.tasks:
            await self.changed.wait()

    def cancel_running(self) -> None:
        for lease in self.held:
            if lease.state == RUNNING:
                lease.scope.cancel()

    def held_by_task(self, task_id: int) -> bool:
        """True when ``task_id`` is one of the processors running."""
        return any(lease.task == task_id for lease in self.held)


class WorkerJob(Job):
    """The job a processor gets: a :class:`Job` whose progress updates also become the
    worker's ``progress`` events."""

    def __init__(self, queue: Queue, events: WorkerEvents, raw: dict[str, Any],
                 token: str) -> None:
        super().__init__(queue, raw, token)
        self._events = events

    async def update_progress(self, progress: Any, message: str | None = None) -> None:
        await super().update_progress(progress, message)
        # After the broker accepted it, so that a listener never sees a progress that
        # GetProgress would not show.
        self._events.emit("progress", self, progress)
