"""The storage writer: one place that commits, grouping every queue's writes per batch.

Queue actors :meth:`submit` their writes as each command is applied and :meth:`release`
the replies of a batch afterwards. Everything submitted so far is committed in ONE
storage transaction before those replies go, so a client never sees an acknowledgement
for a write that a kill -9 could lose. With no fsync due that commit happens in the
releasing actor's own scheduler pass (see :meth:`release`); with ``fsync="always"`` (or
a ``durable`` job in the batch) the writer task commits, fsyncs in a worker thread once
per batch (the event loop keeps serving meanwhile) and then releases the replies.

:meth:`commit_now` commits synchronously; actors call it before reading storage so a
query sees every write already applied in memory (read-your-writes).
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from ..core.writes import Writes
from ..storage.port import Storage
from .request import Replier, deliver_all

log = logging.getLogger("trioqueue.writer")

Delivery = tuple[Replier, dict[str, Any]]


class StorageFailure(Exception):
    """A commit failed: the broker must stop (see :meth:`StorageWriter.commit_now`).

    ``repeated`` marks the refusals that follow the first failure: several tasks may
    each raise one while the broker stops, and the first failure is the one to report.
    """

    def __init__(self, message: str, *, repeated: bool = False) -> None:
        super().__init__(message)
        self.repeated = repeated


class StorageWriter:
    def __init__(self, storage: Storage, *, fsync: str = "interval",
                 fsync_interval_s: float = 0.2) -> None:
        self.storage = storage
        self.fsync = fsync
        self.fsync_interval_s = fsync_interval_s
        self._writes: list[Writes] = []
        self._durable = False  # a durable job's writes are among _writes: fsync them
        self._held: list[Delivery] = []  # replies waiting for writes not yet committed
        self._committed: list[Delivery] = []  # replies whose writes are committed
        self._needs_sync = False
        self._dirty = False  # committed but not yet fsynced (interval policy)
        self._wake = trio.Event()
        self._syncing = False
        self.failed = False
        self.failure: StorageFailure | None = None
        self.commits = 0
        self.committed_ops = 0

    def submit(self, writes: Writes) -> None:
        if writes:
            self._writes.append(writes)
            if writes.durable:
                self._durable = True

    def release(self, deliveries: list[Delivery]) -> None:
        """Send these replies once everything submitted so far is committed.

        Without an fsync to wait for, the commit happens right here, in the caller's
        pass of the scheduler: a durable commit with ``sync=False`` costs a few
        microseconds, while a hop to the writer task costs a scheduling round, which is
        what bounds one-request-at-a-time clients. The batch the caller releases (all
        the commands a queue actor took in one go) is still one transaction. When an
        fsync is due the replies wait for the writer task, which flushes off-thread.
        """
        if not deliveries and not self._writes:
            return
        if self.fsync != "always" and not self._durable:
            # Writes with no reply (a timer's lock expiry, a disconnect's release) are
            # committed here too, so a crash cannot lose a transition already made.
            self.commit_now()
            if deliveries:
                deliver_all(deliveries)
            return
        self._held.extend(deliveries)
        self._wake.set()

    def commit_now(self) -> None:
        """Commit every submitted write in one transaction (synchronous, never awaits).

        A failed commit is fatal (:class:`StorageFailure`): the broker's memory is now
        ahead of its store, so no reply may go out as if the write had happened; the
        process stops and restarts from what is committed (the fsyncgate lesson: never
        retry a failed flush and carry on).
        """
        if self.failed:
            raise StorageFailure("storage failed earlier; nothing more is committed",
                                 repeated=True)
        batches, self._writes = self._writes, []
        durable, self._durable = self._durable, False
        if batches:
            try:
                self.storage.apply(batches)
            except Exception as exc:
                failure = StorageFailure(f"storage commit failed: {exc!r}")
                self._fail(failure)
                raise failure from exc
            self.commits += 1
            self.committed_ops += sum(map(len, batches))
            self._dirty = True
            if self.fsync == "always" or durable:
                self._needs_sync = True
        if self._held:
            self._committed.extend(self._held)
            self._held = []
            self._wake.set()

    def _fail(self, failure: StorageFailure) -> None:
        """After a failed commit or fsync nothing is acknowledged any more, ever.

        The writer task is woken to raise the failure in the broker's nursery, which
        stops the broker whichever task's commit failed: a session's task (an inline
        queue step, a read's commit) may have its exception replaced by the
        cancellation of its own cleanup while the broker goes down.
        """
        self.failed = True
        self.failure = failure
        self._wake.set()
        self._held.clear()
        self._committed.clear()
        self._writes.clear()
        self._durable = False

    @property
    def idle(self) -> bool:
        return self.failed or not (
            self._writes or self._held or self._committed or self._syncing)

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Commit, maybe fsync, then deliver; repeat while anything is pending.

        Cancellation: the broker cancels this task only after the listeners and queue
        actors have stopped; :meth:`flush` is then called under a shielded deadline so
        the last batch is committed and answered.
        """
        task_status.started()
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            if self.failure is not None:
                raise StorageFailure(str(self.failure)) from self.failure.__cause__
            await self._cycle()

    async def _cycle(self) -> None:
        self.commit_now()
        # Take the replies BEFORE the fsync: a commit made while the fsync runs (by an
        # actor or a storage read) is not covered by it, so its replies wait for the
        # next cycle's fsync.
        ready, self._committed = self._committed, []
        if self._needs_sync:
            self._needs_sync = False
            self._dirty = False
            # The fsync blocks for hundreds of microseconds: do it off the event loop,
            # once for the whole batch. abandon_on_cancel=False: the flush must finish.
            await self._sync()
        if ready:
            deliver_all(ready)

    async def _sync(self) -> None:
        self._syncing = True
        try:
            await trio.to_thread.run_sync(self.storage.sync)
        except Exception as exc:
            # An fsync error may have dropped the dirty pages (fsyncgate): never
            # retry and carry on; stop and recover from what is on disk.
            failure = StorageFailure(f"storage fsync failed: {exc!r}")
            self._fail(failure)
            raise failure from exc
        finally:
            self._syncing = False

    async def flush(self) -> None:
        """Commit and deliver everything pending (used at shutdown)."""
        if self.failed:
            return
        while not self.idle:
            await self._cycle()
        if self._dirty and self.fsync != "never":
            self._dirty = False
            await self._sync()

    async def run_interval_sync(self) -> None:
        """With the interval policy, put committed data on disk every ``fsync_interval_s``."""
        if self.fsync != "interval":
            return
        while True:
            await trio.sleep(self.fsync_interval_s)
            if self._dirty and not self.failed:
                self._dirty = False
                await self._sync()
