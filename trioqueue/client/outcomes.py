"""The settling half of a :class:`~trioqueue.client.worker.Worker`: results batched
into ``ACKB``, failures sent as ``FAIL``, jobs handed back with ``MoveToWait``.

Bound as the worker's methods, like :mod:`.pulling`. The contract: ``completed`` and
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
from .lease import ACKING, FAILING, MAX_BATCH_SIZE, Lease, log
from .queue import error_text
from .values import check_value

if TYPE_CHECKING:
    from .worker import Worker

_RETRY_DELAYS_S = (0.1, 0.2, 0.4)  # outcome commands retried after a lost connection


class UnrecoverableError(Exception):
    """Raise it from a processor to fail the job for good: the ``FAIL`` carries
    ``unrecoverable: true``, so the broker dead-letters the job whatever attempts are
    left. For errors that a retry cannot fix (bad input, a refused permission)."""

    # Its public home: tracebacks (and so the stack a FAIL stores) name it as before.
    __module__ = "trioqueue.client.worker"


async def _release(w: Worker, leases: Iterable[Lease]) -> None:
    """Hand jobs back to the queue: ``MoveToWait`` with the lease's token, which
    charges no attempt. A refusal means the job is no longer ours (finished,
    removed, taken back after its lock expired): exactly what we wanted, so it is
    only logged. A lost connection is left to the pull channel's close."""

    async def one(lease: Lease) -> None:
        try:
            await w.connection.call("MoveToWait", id=lease.job.id, token=lease.token)
        except TrioqueueError as exc:
            log.info("worker %s: handing back %s: %r", w.name, lease.job.id, exc)
        w.leases.held.discard(lease)

    async with anyio.create_task_group() as nursery:
        for lease in leases:
            nursery.start_soon(one, lease)


def _queue_ack(w: Worker, lease: Lease, result: Any) -> None:
    lease.state = ACKING
    w._acks.append((lease, result))
    w._ack_ready.set()
    if len(w._acks) >= w.batch_size or w.leases.running == 0:
        w._ack_now.set()


async def _ack_loop(w: Worker) -> None:
    delay_s = w.ack_batch_delay_ms / 1000
    while True:
        await w._ack_ready.wait()
        with anyio.move_on_after(delay_s):
            await w._ack_now.wait()
        await w._flush_acks()


async def _flush_acks(w: Worker) -> None:
    async with w._ack_lock:
        while w._acks:
            batch = w._acks[:MAX_BATCH_SIZE]
            del w._acks[:len(batch)]
            if not w._acks:
                w._ack_ready = anyio.Event()
                w._ack_now = anyio.Event()
            try:
                await w._send_acks(batch)
            except anyio.get_cancelled_exc_class():
                # Interrupted (the worker is being cancelled): the batch goes back
                # so that the final cleanup sends it. If it had reached the broker,
                # the resend is answered "ignored", and nothing is emitted twice.
                w._acks[:0] = batch
                w._ack_ready.set()
                raise


async def _send_acks(w: Worker, batch: list[tuple[Lease, Any]]) -> None:
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
        reply = await w._call_retrying("ACKB", **fields)
    except ValidationError as exc:  # refused here, before sending
        await _ack_sendable(w, batch, exc)
        return
    except CommandError as exc:
        if len(batch) > 1:
            for item in batch:
                await w._send_acks([item])
            return
        w.leases.held.discard(batch[0][0])
        w.events.report(exc, "ack")
        return
    except TrioqueueError as exc:  # the connection stayed lost through the retries
        for lease, _ in batch:
            w.leases.held.discard(lease)
        w.events.report(exc, "ack")
        return
    except Exception as exc:  # encoding: nothing was sent
        if len(batch) > 1:
            for item in batch:
                await w._send_acks([item])
            return
        await w._send_fail(batch[0][0], exc)
        return
    data = reply.get("data") or {}
    ignored = set(data.get("ignoredIndices") or ())
    if "ignoredIndices" not in data and data.get("ignoredIds"):
        # Older brokers: positions by id (the batch has each lease once).
        ignored_ids = set(data["ignoredIds"])
        ignored = {i for i, (lease, _) in enumerate(batch) if lease.job.id in ignored_ids}
    for i, (lease, result) in enumerate(batch):
        w.leases.held.discard(lease)
        if i in ignored:
            continue  # not applied: the job was removed or finished meanwhile
        w.processed_count += 1
        w.events.emit("completed", lease.job, result)


async def _ack_sendable(w: Worker, batch: list[tuple[Lease, Any]],
                        exc: ValidationError) -> None:
    """Fail the jobs of ``batch`` whose result cannot be sent; acknowledge the rest."""
    sendable = []
    for lease, result in batch:
        try:
            check_value(result, "result")
        except ValidationError as refused:
            await w._send_fail(lease, refused)
        else:
            sendable.append((lease, result))
    if len(sendable) == len(batch):  # not a result: a bug of ours, told as it is
        for lease, _ in batch:
            w.leases.held.discard(lease)
        w.events.report(exc, "ack")
        return
    if sendable:
        await w._send_acks(sendable)


async def _send_fail(w: Worker, lease: Lease, error: Exception) -> None:
    lease.state = FAILING
    lease.error = error
    message, stack = error_text(error)
    fields: dict[str, Any] = {"id": lease.job.id, "token": lease.token, "error": message}
    if stack:
        fields["stack"] = stack
    if isinstance(error, UnrecoverableError):
        fields["unrecoverable"] = True
    try:
        reply = await w._call_retrying("FAIL", **fields)
    except TrioqueueError as exc:
        w.leases.held.discard(lease)
        w.events.report(exc, "fail")
        return
    w.leases.held.discard(lease)
    if (reply.get("data") or {}).get("applied") is False:
        return  # the attempt was already charged (lock expiry): nothing happened
    w.failed_count += 1
    lease.job.attempts_made += 1
    w.events.emit("failed", lease.job, error)


async def _call_retrying(w: Worker, cmd: str, **fields: Any) -> dict[str, Any]:
    """An outcome command, retried a few times over a lost connection: the lease
    outlives a reconnect, so a retry usually lands, and a duplicate is harmless
    (an ACK applied twice is "ignored", a FAIL "not applied")."""
    for delay in (*_RETRY_DELAYS_S, None):
        try:
            return await w.connection.call(cmd, **fields)
        except ConnectionLost:
            if delay is None:
                raise
            await anyio.sleep(delay)
    raise AssertionError("unreachable")

