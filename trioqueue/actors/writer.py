"""The storage writer: one place that commits, grouping every queue's writes per batch.

Queue actors :meth:`submit` their writes as each command is applied and :meth:`release`
the replies of a batch afterwards. Everything submitted so far is committed in ONE
storage transaction before those replies go, so a client never sees an acknowledgement
for a write that a kill -9 could lose. A failed commit or fsync is fatal
(:class:`StorageFailure`): nothing is acknowledged from then on and the broker stops.

The writer commits in one of two ways, chosen by the store
(:attr:`~trioqueue.storage.port.Storage.apply_blocks`):

* **Inline** (LMDB, memory: a commit takes microseconds). With no fsync due, the commit
  happens in the releasing actor's own scheduler pass (see :meth:`release`); with
  ``fsync="always"`` (or a ``durable`` job in the batch) the writer task commits,
  fsyncs in a worker thread once per batch (the event loop keeps serving meanwhile) and
  then releases the replies. :meth:`commit_now` commits synchronously, on the spot:
  actors call it before reading storage so a query sees every write already applied in
  memory (read-your-writes).
* **Off the trio thread** (a store whose commit blocks, such as one across a network).
  :meth:`release` never commits: it holds the replies and wakes the writer task, which
  commits everything pending in ONE worker-thread hop per batch (the fsync, when due,
  in the same hop), then delivers the replies of that batch. Writes and releases that
  arrive during the hop wait for the next one. :meth:`commit_now` raises
  ``RuntimeError`` here, because it would block every queue for a round trip:
  callers that need read-your-writes ``await`` :meth:`commit` instead, which works in
  both modes (inline it is :meth:`commit_now` and returns without a checkpoint).

**Fenced off** (a cluster's broker whose commit was refused because another broker took
a queue, or whose heartbeat went stale): nothing of the refused commit was applied, and
nothing is committed from then on (:meth:`refuse`). So each reply that waited for it,
or is released later, can truthfully say so: it is answered with an error that names
the reason and says to retry, instead of the connection being dropped at the exit.
The broker keeps answering so for ``refusal_grace_s``, then stops (exit status 5).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import trio

from ..core.writes import FinishJob, Writes
from ..storage.port import Fenced, Storage, StorageUnavailable
from .request import Replier, deliver_all

log = logging.getLogger("trioqueue.writer")

Delivery = tuple[Replier, dict[str, Any]]
T = TypeVar("T")


class StorageFailure(Exception):
    """A commit failed: the broker must stop (see :meth:`StorageWriter.commit_now`).

    ``repeated`` marks the refusals that follow the first failure: several tasks may
    each raise one while the broker stops, and the first failure is the one to report.
    """

    def __init__(self, message: str, *, repeated: bool = False) -> None:
        super().__init__(message)
        self.repeated = repeated


def refusal_text(why: str) -> str:
    """The error of a command a fenced-off broker did not apply (see the module
    docstring)."""
    return f"Not applied: {why}; retry"


def _refused(deliveries: list[Delivery], error: str) -> list[Delivery]:
    return [(replier, _error_reply(reply, error)) for replier, reply in deliveries]


def _error_reply(reply: dict[str, Any], error: str) -> dict[str, Any]:
    refusal: dict[str, Any] = {"ok": False, "error": error}
    if "reqId" in reply:
        refusal["reqId"] = reply["reqId"]
    return refusal


class StorageWriter:
    def __init__(self, storage: Storage, *, fsync: str = "interval",
                 fsync_interval_s: float = 0.2, refusal_grace_s: float = 0.0) -> None:
        self.storage = storage
        self.fsync = fsync
        self.fsync_interval_s = fsync_interval_s
        self.off_thread = storage.apply_blocks  # commit in a worker thread, never inline
        # release() commits on the spot unless an fsync or the store makes it wait
        self._inline = fsync != "always" and not self.off_thread
        self._writes: list[Writes] = []
        self._durable = False  # a durable job's writes are among _writes: fsync them
        self._held: list[Delivery] = []  # replies waiting for writes not yet committed
        self._committed: list[Delivery] = []  # replies whose writes are committed
        self._needs_sync = False
        self._dirty = False  # committed but not yet fsynced (interval policy)
        self._sync_due = False  # off-thread mode: the interval asks the next hop to fsync
        self._wake = trio.Event()
        self._in_thread = False  # a commit or an fsync is running in a worker thread
        # Off-thread commits that took writes, started and finished, and an event set
        # (then replaced) as each finishes: what commit() waits on.
        self._hops_started = 0
        self._hops_done = 0
        self._progress = trio.Event()
        self.failed = False
        self.failure: StorageFailure | None = None
        # Fenced off: the error every reply gets from now on (see refuse), and how
        # long the broker goes on answering so once a commit was refused.
        self.refusal: str | None = None
        self.refusal_grace_s = refusal_grace_s
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
        fsync is due the replies wait for the writer task, which flushes off-thread;
        so do they all when the store commits off the trio thread.
        """
        if self.refusal is not None:
            self._writes.clear()  # (never committed: what the replies say)
            if deliveries:
                deliver_all(_refused(deliveries, self.refusal))
            return
        if not deliveries and not self._writes:
            return
        if self._inline and not self._durable:
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

        Not for a store that commits off the trio thread (``RuntimeError``): there,
        ``await`` :meth:`commit`.
        """
        if self.off_thread:
            raise RuntimeError(
                f"{type(self.storage).__name__} commits in a worker thread (apply_blocks): "
                "commit_now() would block the event loop; use 'await writer.commit()'")
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
                self._fail(failure, exc)
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

    async def commit(self) -> None:
        """Return once every write submitted before this call is committed.

        For a read that must see the writes already applied in memory
        (read-your-writes). Inline this is :meth:`commit_now`, with no checkpoint (the
        hot paths that call it stay one scheduler pass). Off the trio thread it wakes
        the writer task and waits for the hop that takes these writes (or the one in
        flight, which may hold them); it does not wait for an fsync. Raises
        :class:`StorageFailure` if that commit, or any before it, failed (fenced off:
        returns at once, as nothing more will be committed and every reply is refused).
        """
        if self.refusal is not None:
            return
        if not self.off_thread:
            self.commit_now()
            return
        if self._writes:
            needed = self._hops_started + 1  # the next hop takes them
            self._wake.set()
        else:
            needed = self._hops_started  # the hop in flight, if any, holds them
        while self._hops_done < needed:
            if self.failed or self.refusal is not None:
                break
            await self._progress.wait()
        if self.refusal is not None:
            return
        if self.failed:
            raise StorageFailure("storage failed earlier; nothing more is committed",
                                 repeated=True)

    async def read_committed(self, read: Callable[[], T]) -> T:
        """:meth:`commit` what is pending, then :meth:`read_off_thread`: a read of a
        blocking store that sees every write already applied in memory."""
        await self.commit()
        return await self.read_off_thread(read)

    async def read_off_thread(self, read: Callable[[], T]) -> T:
        """Run ``read`` (storage reads) in a worker thread, for a store whose calls
        block. A store that gave up on its server (:class:`StorageUnavailable`) stops
        the broker as a failed commit does, so the exit says why in one line."""
        try:
            return await trio.to_thread.run_sync(read)
        except StorageUnavailable as exc:
            failure = StorageFailure(f"storage read failed: {exc!r}")
            self._fail(failure)
            raise failure from exc

    def refuse(self, why: str) -> None:
        """Fenced off: commit nothing from now on, and answer each reply that waits for
        a commit, and each released later, with :func:`refusal_text` of ``why``. A
        commit in flight in a worker thread finishes; its replies follow its outcome."""
        if self.refusal is None:  # (the first reason stays: later ones follow from it)
            self.refusal = refusal_text(why)
            log.warning("fenced off, answering every command with: %s", self.refusal)
        held, self._held = self._held, []
        self._writes.clear()
        self._durable = False
        if held:
            deliver_all(_refused(held, self.refusal))
        self._progress.set()  # commit() waiters return

    def _fail(self, failure: StorageFailure, cause: BaseException | None = None) -> None:
        """After a failed commit or fsync nothing is acknowledged any more, ever.

        The writer task is woken to raise the failure in the broker's nursery, which
        stops the broker whichever task's commit failed: a session's task (an inline
        queue step, a read's commit) may have its exception replaced by the
        cancellation of its own cleanup while the broker goes down. A commit refused
        by the fence (``cause``) applied nothing: the replies are refused instead
        (:meth:`refuse`).
        """
        if isinstance(cause, Fenced):
            self.refuse(f"this broker {cause}")
        self.failed = True
        self.failure = failure
        self._wake.set()
        self._progress.set()  # commit() waiters raise instead of waiting on
        self._held.clear()
        self._committed.clear()
        self._writes.clear()
        self._durable = False

    @property
    def idle(self) -> bool:
        return self.failed or not (
            self._writes or self._held or self._committed or self._in_thread)

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Commit, maybe fsync, then deliver; repeat while anything is pending.

        Cancellation: the broker cancels this task only after the listeners and queue
        actors have stopped; :meth:`flush` is then called under a shielded deadline so
        the last batch is committed and answered.
        """
        task_status.started()
        try:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                if self.failure is not None:
                    raise StorageFailure(str(self.failure)) from self.failure.__cause__
                await self._cycle()
        except StorageFailure:
            if self.refusal is not None:
                # Fenced off: the broker answers what comes with the refusal for a
                # moment (commands read meanwhile, those other brokers forwarded),
                # rather than drop its connections with them unanswered.
                await trio.sleep(self.refusal_grace_s)
            raise

    async def _cycle(self) -> None:
        if self.off_thread:
            await self._hop()
            return
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

    async def _hop(self) -> None:
        """Off-thread mode: commit all that is pending (and fsync when due) in one
        worker-thread hop, then deliver the replies that waited for it.

        The replies taken here were released after their writes were submitted, so
        those writes are in this hop's batches or in an earlier hop, which has finished.
        """
        if self.failed:
            raise StorageFailure("storage failed earlier; nothing more is committed",
                                 repeated=True)
        if self.refusal is not None:
            self.release([])  # (the writes go, never committed)
            return
        batches, self._writes = self._writes, []
        durable, self._durable = self._durable, False
        ready, self._held = self._held, []
        sync = self._sync_due or (bool(batches) and (self.fsync == "always" or durable))
        self._sync_due = False
        if batches or sync:
            if batches:
                self._hops_started += 1
            self._in_thread = True
            try:
                # abandon_on_cancel=False (the default): a commit in flight must finish
                failed = await trio.to_thread.run_sync(_commit_blocking, self.storage,
                                                       batches, sync)
            finally:
                self._in_thread = False
            if failed is not None:
                stage, exc = failed
                failure = StorageFailure(f"storage {stage} failed: {exc!r}")
                if isinstance(exc, Fenced):  # nothing was applied: refused, first
                    self._held[:0] = ready
                self._fail(failure, exc)
                raise failure from exc
            if batches:
                _let_go_finished(batches, self.storage)
                self.commits += 1
                self.committed_ops += sum(map(len, batches))
                self._dirty = not sync
                self._hops_done += 1
                self._progress.set()
                self._progress = trio.Event()
            elif sync:
                self._dirty = False
        if ready:
            deliver_all(ready)

    async def _sync(self) -> None:
        self._in_thread = True
        try:
            await trio.to_thread.run_sync(self.storage.sync)
        except Exception as exc:
            # An fsync error may have dropped the dirty pages (fsyncgate): never
            # retry and carry on; stop and recover from what is on disk.
            failure = StorageFailure(f"storage fsync failed: {exc!r}")
            self._fail(failure)
            raise failure from exc
        finally:
            self._in_thread = False

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
                if self.off_thread:
                    # the writer task's next hop fsyncs: never two threads in the store
                    self._sync_due = True
                    self._wake.set()
                    continue
                self._dirty = False
                await self._sync()


def _commit_blocking(storage: Storage, batches: list[Writes], sync: bool
                     ) -> tuple[str, Exception] | None:
    """Run in a worker thread: apply (then fsync); what failed, or None.

    The failure is returned rather than raised so the writer can say which step it was.
    """
    try:
        if batches:
            storage.apply(batches)
    except Exception as exc:
        return "commit", exc
    try:
        if sync:
            storage.sync()
    except Exception as exc:
        return "fsync", exc
    return None


def _let_go_finished(batches: list[Writes], storage: Storage) -> None:
    """The data of the jobs these batches finished, let go of to the store (a store
    whose calls block: an inline store's adapter does it as it commits, see
    storage/kept_data.py): the batches going would free it in one call."""
    for batch in batches:
        for op in batch.ops:
            if type(op) is FinishJob and "data" in op.record:
                storage.let_go(op.record["data"])
