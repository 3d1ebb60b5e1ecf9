"""The settling half of a :class:`~trioqueue.client.worker.Worker`: results batched
into ``ACKB``, failures sent as ``FAIL``, jobs handed back with ``MoveToWait``.

Owned by the worker as ``worker.outcomes``. The contract: ``completed`` and
``failed`` are emitted, and the worker's counters moved, only for outcomes the broker
applied; a lease leaves the worker's set once its outcome is settled (applied,
refused or given up on), so the lock renewal keeps it alive until then; an outcome
command is retried over a lost connection, since the lease outlives a reconnect and a
duplicate is harmless.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import anyio

from .errors import CommandError, ConnectionLost, TrioqueueError, ValidationError
from .lease import ACKING, FAILING, MAX_BATCH_SIZE, Lease, Leases, log
from .queue import error_text
from .values import check_value

if TYPE_CHECKING:
    from .connection import Connection
    from .worker_events import WorkerEvents

_RETRY_DELAYS_S = (0.1, 0.2, 0.4)  # outcome commands retried after a lost connection


class UnrecoverableError(Exception):
    """Raise it from a processor to fail the job for good: the ``FAIL`` carries
    ``unrecoverable: true``, so the broker dead-letters the job whatever attempts are
    left. For errors that a retry cannot fix (bad input, a refused permission)."""

    # Its public home: tracebacks (and so the stack a FAIL stores) name it as before.
    __module__ = "trioqueue.client.worker"


class Outcomes:
    """The worker's results waiting for their ``ACKB``, and the counts of the outcomes
    the broker applied (what the registry heartbeat reports)."""

    __slots__ = ("_ack_lock", "_ack_now", "_ack_ready", "_acks", "_delay_s", "batch_size",
                 "connection", "events", "failed", "leases", "name", "processed")

    def __init__(self, connection: Connection, leases: Leases, events: WorkerEvents, *,
                 name: str, batch_size: int, ack_batch_delay_ms: float) -> None:
        self.connection = connection
        self.leases = leases
        self.events = events
        self.name = name  # the worker's, for the log lines
        self.batch_size = batch_size
        self._delay_s = ack_batch_delay_ms / 1000
        #: Outcomes the broker applied.
        self.processed = 0
        self.failed = 0
        self._acks: list[tuple[Lease, Any]] = []
        self._ack_ready = anyio.Event()  # set while results wait
        self._ack_now = anyio.Event()    # set when they should go without waiting
        self._ack_lock = anyio.Lock()    # one ACKB at a time: keeps the counters simple

    async def release(self, leases: Iterable[Lease]) -> None:
        """Hand jobs back to the queue: ``MoveToWait`` with the lease's token, which
        charges no attempt. A refusal means the job is no longer ours (finished,
        removed, taken back after its lock expired): exactly what we wanted, so it is
        only logged. A lost connection is left to the pull channel's close."""

        async def one(lease: Lease) -> None:
            try:
                await self.connection.call("MoveToWait", id=lease.job.id, token=lease.token)
            except TrioqueueError as exc:
                log.info("worker %s: handing back %s: %r", self.name, lease.job.id, exc)
            self.leases.held.discard(lease)

        async with anyio.create_task_group() as nursery:
            for lease in leases:
                nursery.start_soon(one, lease)

    def queue_ack(self, lease: Lease, result: Any) -> None:
        lease.state = ACKING
        self._acks.append((lease, result))
        self._ack_ready.set()
        if len(self._acks) >= self.batch_size or self.leases.running == 0:
            self._ack_now.set()

    async def ack_loop(self) -> None:
        delay_s = self._delay_s
        while True:
            await self._ack_ready.wait()
            with anyio.move_on_after(delay_s):
                await self._ack_now.wait()
            await self.flush_acks()

    async def flush_acks(self) -> None:
        async with self._ack_lock:
            while self._acks:
                batch = self._acks[:MAX_BATCH_SIZE]
                del self._acks[:len(batch)]
                if not self._acks:
                    self._ack_ready = anyio.Event()
                    self._ack_now = anyio.Event()
                try:
                    await self.send_acks(batch)
                except anyio.get_cancelled_exc_class():
                    # Interrupted (the worker is being cancelled): the batch goes back
                    # so that the final cleanup sends it. If it had reached the broker,
                    # the resend is answered "ignored", and nothing is emitted twice.
                    self._acks[:0] = batch
                    self._ack_ready.set()
                    raise

    async def send_acks(self, batch: list[tuple[Lease, Any]]) -> None:
        """One ``ACKB``; ``completed`` for each position the broker applied.

        The broker checks every token before applying anything, so one lease that is
        no longer ours refuses the whole batch: then each job is acknowledged alone,
        so that the others still count and the refused one is reported by itself. A
        result the wire cannot carry is refused before anything is sent (the processor's
        result is checked as it returns, so this is a second line): that job is failed
        with the error naming the value (its processor's bug, and retrying it shows the
        error where the job's owner looks), and the rest of the batch is acknowledged.
        """
        fields = {"ids": [lease.job.id for lease, _ in batch],
                  "tokens": [lease.token for lease, _ in batch],
                  "results": [result for _, result in batch]}
        try:
            reply = await self._call_retrying("ACKB", **fields)
        except ValidationError as exc:  # refused here, before sending
            await self._ack_sendable(batch, exc)
            return
        except CommandError as exc:
            if len(batch) > 1:
                for item in batch:
                    await self.send_acks([item])
                return
            self.leases.held.discard(batch[0][0])
            self.events.report(exc, "ack")
            return
        except TrioqueueError as exc:  # the connection stayed lost through the retries
            for lease, _ in batch:
                self.leases.held.discard(lease)
            self.events.report(exc, "ack")
            return
        except Exception as exc:  # encoding: nothing was sent
            if len(batch) > 1:
                for item in batch:
                    await self.send_acks([item])
                return
            await self.send_fail(batch[0][0], exc)
            return
        data = reply.get("data") or {}
        ignored = set(data.get("ignoredIndices") or ())
        if "ignoredIndices" not in data and data.get("ignoredIds"):
            # Older brokers: positions by id (the batch has each lease once).
            ignored_ids = set(data["ignoredIds"])
            ignored = {i for i, (lease, _) in enumerate(batch) if lease.job.id in ignored_ids}
        for i, (lease, result) in enumerate(batch):
            self.leases.held.discard(lease)
            if i in ignored:
                continue  # not applied: the job was removed or finished meanwhile
            self.processed += 1
            self.events.emit("completed", lease.job, result)

    async def _ack_sendable(self, batch: list[tuple[Lease, Any]],
                            exc: ValidationError) -> None:
        """Fail the jobs of ``batch`` whose result cannot be sent; acknowledge the rest."""
        sendable = []
        for lease, result in batch:
            try:
                check_value(result, "result")
            except ValidationError as refused:
                await self.send_fail(lease, refused)
            else:
                sendable.append((lease, result))
        if len(sendable) == len(batch):  # not a result: a bug of ours, told as it is
            for lease, _ in batch:
                self.leases.held.discard(lease)
            self.events.report(exc, "ack")
            return
        if sendable:
            await self.send_acks(sendable)

    async def send_fail(self, lease: Lease, error: Exception) -> None:
        lease.state = FAILING
        lease.error = error
        message, stack = error_text(error)
        fields: dict[str, Any] = {"id": lease.job.id, "token": lease.token, "error": message}
        if stack:
            fields["stack"] = stack
        if isinstance(error, UnrecoverableError):
            fields["unrecoverable"] = True
        try:
            reply = await self._call_retrying("FAIL", **fields)
        except TrioqueueError as exc:
            self.leases.held.discard(lease)
            self.events.report(exc, "fail")
            return
        self.leases.held.discard(lease)
        if (reply.get("data") or {}).get("applied") is False:
            return  # the attempt was already charged (lock expiry): nothing happened
        self.failed += 1
        lease.job.attempts_made += 1
        self.events.emit("failed", lease.job, error)

    async def _call_retrying(self, cmd: str, **fields: Any) -> dict[str, Any]:
        """An outcome command, retried a few times over a lost connection: the lease
        outlives a reconnect, so a retry usually lands, and a duplicate is harmless
        (an ACK applied twice is "ignored", a FAIL "not applied")."""
        for delay in (*_RETRY_DELAYS_S, None):
            try:
                return await self.connection.call(cmd, **fields)
            except ConnectionLost:
                if delay is None:
                    raise
                await anyio.sleep(delay)
        raise AssertionError("unreachable")
