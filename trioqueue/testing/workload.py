"""A small load for fault tests, every operation recorded in a
:class:`~trioqueue.testing.history.History` for the checker.

Producers push jobs with custom ids (so an unknown outcome can be judged later);
workers pull them one at a time under a lock, hold each a random moment while they
renew its lock with ``JobHeartbeat``, then ``ACK`` or ``FAIL`` it with the delivery's
token. Every add, delivery (with its token), heartbeat and outcome goes in the history;
a connection that dies is recorded as ``LOST`` and the client reconnects, to any broker
of the list, as a new process name (what it held before is no longer a live holder's).

Everything is bounded: producers by their job count and a deadline, workers by an event
and the longest hold. Against one broker or several (a cluster): ``targets`` is called
for the ports to use each time a client (re)connects, so restarted brokers on new ports
are found.

A scenario is then: start the load, inject its faults, wait for the producers, stop the
workers, :func:`drain_and_read`, and :func:`~trioqueue.testing.history.check`.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from .history import ACK, ADD, HEARTBEAT, LOST, NACK, PULL, History, Op
from .process import BrokerProcess
from .wire import RawClient

# How an error reply says the command may have been applied all the same (a cluster's
# forward lost with the broker it went to).
AMBIGUOUS = "may or may not"
CONNECTION_ERRORS = (EOFError, trio.BrokenResourceError, trio.ClosedResourceError, OSError)


class Lost(Exception):
    """The connection died before the reply came."""


class Link:
    """One connection shared by many tasks: one reader hands each reply to the task
    that waits for it (``reqId``), sends take turns. When the connection dies every
    waiting call raises :class:`Lost`."""

    def __init__(self, client: RawClient) -> None:
        self.client = client
        self._ids = itertools.count(1)
        self._waiting: dict[str, list[Any]] = {}  # reqId -> [event, reply]
        self._send_lock = trio.Lock()
        self.closed = trio.Event()
        # The last moment the connection surely still held: when its last frame came
        # (the broker may have dropped it, and released what it held, any time after).
        self.last_heard = time.monotonic()

    @classmethod
    async def open(cls, nursery: trio.Nursery, port: int) -> Link:
        link = cls(await RawClient.connect(port))
        nursery.start_soon(link._read)
        return link

    async def _read(self) -> None:
        try:
            while True:
                msg = await self.client.receive()
                self.last_heard = time.monotonic()
                slot = self._waiting.pop(str(msg.get("reqId")), None)
                if slot is not None:
                    slot[1] = msg
                    slot[0].set()
        except CONNECTION_ERRORS:
            pass
        finally:
            self.closed.set()
            for slot in self._waiting.values():
                slot[0].set()
            self._waiting.clear()

    async def call(self, cmd: str, **fields: Any) -> dict[str, Any]:
        if self.closed.is_set():
            raise Lost("connection closed")
        req_id = f"w{next(self._ids)}"
        slot: list[Any] = [trio.Event(), None]
        self._waiting[req_id] = slot  # before sending: the reply may come at once
        try:
            async with self._send_lock:
                await self.client.send_raw(self.client.frame(
                    {"cmd": cmd, "reqId": req_id, **fields}))
        except CONNECTION_ERRORS as exc:
            self._waiting.pop(req_id, None)
            raise Lost(str(exc)) from exc
        await slot[0].wait()
        if slot[1] is None:
            raise Lost("connection closed before the reply")
        reply: dict[str, Any] = slot[1]
        return reply

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await self.client.aclose()


def running_ports(brokers: Sequence[BrokerProcess]) -> Callable[[], list[int]]:
    """``targets`` for a workload: the ports of the brokers that run now (not
    paused: a client would wait on one)."""
    def ports() -> list[int]:
        return [b.tcp_port for b in brokers
                if b.process is not None and b.process.returncode is None and not b.paused]
    return ports


def record_reply(history: History, op: Op, reply: dict[str, Any], **detail: Any) -> None:
    """An answer as the history's outcome: ok, refused (it did not happen) or unknown."""
    if reply.get("ok"):
        history.ok(op, **detail)
    elif AMBIGUOUS in str(reply.get("error", "")):
        history.unknown(op, str(reply["error"]))
    else:
        history.fail(op, str(reply.get("error", "")))


@dataclass
class Workload:
    """Producers and workers on ``queues`` through the brokers ``targets()`` names.

    Producers: ``producers`` of ``jobs_per_producer`` jobs each, ``window`` pushes in
    flight each, at most one push per ``push_interval_s`` per slot, stopping at
    ``deadline_s`` after the start whatever is left. Workers: ``workers`` connections
    (reconnecting when theirs dies) with ``concurrency`` jobs each; a job is held a
    random time up to ``max_hold_s`` (a ``hold_ratio`` share of them; the others are
    settled at once), its lock renewed every ``heartbeat_every_s``, then acknowledged,
    or failed with probability ``fail_ratio``.
    """

    history: History
    targets: Callable[[], Sequence[int]]
    queues: Sequence[str]
    prefix: str = "j"
    producers: int = 2
    jobs_per_producer: int = 200
    window: int = 4
    push_interval_s: float = 0.0
    payload_bytes: int = 16
    max_attempts: int = 100
    workers: int = 2
    concurrency: int = 8
    lock_ttl_ms: int = 2000
    hold_ratio: float = 0.2
    max_hold_s: float = 0.3
    heartbeat_every_s: float = 0.1
    fail_ratio: float = 0.1
    deadline_s: float = 60.0
    reconnect_every_s: float = 0.05
    stop_grace_s: float = 30.0
    seed: int = 0
    producers_done: trio.Event = field(default_factory=trio.Event)
    _stop: trio.Event = field(default_factory=trio.Event)
    _rng: random.Random = field(init=False)
    _names: itertools.count[int] = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    # ------------------------------------------------------------------ running

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Producers and workers until :meth:`stop` (``nursery.start(load.run)``)."""
        deadline = trio.current_time() + self.deadline_s
        async with trio.open_nursery() as guard:
            async with trio.open_nursery() as nursery:
                guard.start_soon(self._cut_off_after_stop, nursery.cancel_scope)
                async with trio.open_nursery() as producing:
                    task_status.started()
                    for w in range(self.workers):
                        nursery.start_soon(self._worker, f"{self.prefix}-worker-{w}")
                    for p in range(self.producers):
                        producing.start_soon(self._producer, f"{self.prefix}-producer-{p}",
                                             f"{self.prefix}{p}-", deadline)
                self.producers_done.set()
            guard.cancel_scope.cancel()

    async def _cut_off_after_stop(self, scope: trio.CancelScope) -> None:
        """Bounds the end: ``stop_grace_s`` after :meth:`stop`, whatever still waits
        (a reply from a broker that never answers) is cancelled; its operations stay
        pending, and ``pending_as_unknown`` makes them unknown."""
        await self._stop.wait()
        await trio.sleep(self.stop_grace_s)  # (the bound itself)
        scope.cancel()

    def stop(self) -> None:
        """Workers take no new job and settle those they hold at once, then close."""
        self._stop.set()

    def acknowledged_adds(self) -> int:
        return len(self.history.by_kind(ADD, "ok"))

    async def wait_for_adds(self, count: int, timeout_s: float = 60.0) -> None:
        """Until ``count`` adds are acknowledged (or the producers are done)."""
        with trio.fail_after(timeout_s):
            while self.acknowledged_adds() < count and not self.producers_done.is_set():
                await trio.sleep(0.02)  # (polling the history, under the deadline)

    async def _connect(self, nursery: trio.Nursery) -> Link | None:
        ports = list(self.targets())
        if not ports:
            return None
        try:
            return await Link.open(nursery, self._rng.choice(ports))
        except OSError:
            return None

    # ------------------------------------------------------------------ producers

    async def _producer(self, name: str, prefix: str, deadline: float) -> None:
        numbers = iter(range(self.jobs_per_producer))
        left = [True]
        while left[0] and trio.current_time() < deadline:
            async with trio.open_nursery() as nursery:
                link = await self._connect(nursery)
                if link is None:
                    await trio.sleep(self.reconnect_every_s)  # (the broker is down)
                    continue
                async with trio.open_nursery() as pushing:
                    for _ in range(self.window):
                        pushing.start_soon(self._pusher, link, name, prefix, numbers,
                                           deadline, left)
                await link.aclose()

    async def _pusher(self, link: Link, name: str, prefix: str, numbers: Any,
                      deadline: float, left: list[bool]) -> None:
        payload = "x" * self.payload_bytes
        while trio.current_time() < deadline:
            number = next(numbers, None)
            if number is None:
                left[0] = False
                return
            job_id = f"{prefix}{number}"
            queue = self.queues[number % len(self.queues)]
            op = self.history.invoke(name, ADD, job_id, queue=queue)
            try:
                reply = await link.call("PUSH", queue=queue, name="n", jobId=job_id,
                                        data={"n": number, "pad": payload}, backoff=0,
                                        maxAttempts=self.max_attempts)
            except Lost as exc:
                self.history.unknown(op, f"connection lost: {exc}")
                return
            record_reply(self.history, op, reply)
            if self.push_interval_s:
                await trio.sleep(self.push_interval_s)  # (pacing the load, not a wait)

    # ------------------------------------------------------------------ workers

    async def _worker(self, name: str) -> None:
        while not self._stop.is_set():
            process = f"{name}.{next(self._names)}"
            async with trio.open_nursery() as nursery:
                link = await self._connect(nursery)
                if link is None:
                    await trio.sleep(self.reconnect_every_s)  # (no broker is up)
                    continue
                nursery.start_soon(self._record_loss, link, process)
                async with trio.open_nursery() as slots:
                    for slot in range(self.concurrency):
                        slots.start_soon(self._slot, link, process, slot)
                await link.aclose()
            if not self._stop.is_set():
                await trio.sleep(self.reconnect_every_s)  # (before reconnecting)

    async def _record_loss(self, link: Link, process: str) -> None:
        """``LOST`` as soon as the connection dies, dated from its last frame: what the
        process held is no longer a live holder's from then on (its slots may still be
        finishing their holds)."""
        await link.closed.wait()
        lost = self.history.invoke(process, LOST)
        lost.invoked_at = link.last_heard
        self.history.ok(lost)

    async def _slot(self, link: Link, process: str, slot: int) -> None:
        """One job at a time: PULL under a lock, hold and renew, settle."""
        pulls = itertools.count(slot)
        while not self._stop.is_set() and not link.closed.is_set():
            queue = self.queues[next(pulls) % len(self.queues)]
            sent_at = time.monotonic()
            try:
                reply = await link.call("PULL", queue=queue, owner=process,
                                        lockTtl=self.lock_ttl_ms, timeout=100)
            except Lost:
                return
            job = reply.get("job") if reply.get("ok") else None
            if job is None:
                if not reply.get("ok"):
                    await trio.sleep(self.reconnect_every_s)  # (a refused pull: retry)
                continue
            token = reply.get("token")
            delivery = self.history.invoke(process, PULL, job["id"])
            delivery.invoked_at = sent_at
            self.history.ok(delivery, attempts=job.get("attempts", 0),
                            stallCount=job.get("stallCount", 0), token=token,
                            lock_ttl_ms=self.lock_ttl_ms, queue=queue)
            await self._hold(link, process, job["id"], token)

    async def _hold(self, link: Link, process: str, job_id: str, token: str | None
                    ) -> None:
        held = self._rng.random() < self.hold_ratio
        hold_until = trio.current_time() + (
            self._rng.uniform(0, self.max_hold_s) if held else 0.0)
        async with trio.open_nursery() as beats:
            while trio.current_time() < hold_until and not self._stop.is_set():
                with trio.move_on_after(max(0.0, min(self.heartbeat_every_s,
                                                     hold_until - trio.current_time()))):
                    await self._stop.wait()  # (holding the job; a stop cuts it short)
                if trio.current_time() >= hold_until or self._stop.is_set():
                    break
                beats.start_soon(self._settle_or_renew, link, process, HEARTBEAT,
                                 job_id, token)
            # the outcome goes after the heartbeats sent (one connection keeps order)
            kind = NACK if self._rng.random() < self.fail_ratio else ACK
            await self._settle_or_renew(link, process, kind, job_id, token)

    async def _settle_or_renew(self, link: Link, process: str, kind: str, job_id: str,
                               token: str | None) -> None:
        op = self.history.invoke(process, kind, job_id, token=token)
        fields: dict[str, Any] = {"id": job_id, "token": token}
        if kind == ACK:
            cmd, fields["result"] = "ACK", {"by": process}
        elif kind == NACK:
            cmd, fields["error"] = "FAIL", "failed on purpose"
        else:
            cmd = "JobHeartbeat"
        try:
            reply = await link.call(cmd, **fields)
        except Lost as exc:
            self.history.unknown(op, f"connection lost: {exc}")
            return
        if reply.get("ok") and (reply.get("data") or {}).get("applied") is False:
            # FAIL answered "already-finalized": the broker did not apply it
            self.history.fail(op, f"not applied: {reply['data'].get('reason')}")
            return
        record_reply(self.history, op, reply)


async def drain_and_read(history: History, targets: Callable[[], Sequence[int]],
                         queues: Sequence[str], *, lock_ttl_ms: int = 2000,
                         timeout_s: float = 60.0, seed: int = 1
                         ) -> dict[str, dict[str, Any] | None]:
    """Process every job left (recorded, as a workload's workers, without failures),
    then read the final record of every job the history names."""
    drainer = Workload(history, targets, queues, prefix="drain", producers=0,
                       workers=1, concurrency=8, lock_ttl_ms=lock_ttl_ms, max_hold_s=0,
                       fail_ratio=0.0, seed=seed)
    async with trio.open_nursery() as nursery:
        await nursery.start(drainer.run)
        with trio.fail_after(timeout_s):
            await _until_empty(targets, queues)
        drainer.stop()
    return await read_final(history, targets)


async def _until_empty(targets: Callable[[], Sequence[int]], queues: Sequence[str]
                       ) -> None:
    busy = ("waiting", "delayed", "active", "prioritized", "paused", "waiting-children")
    while True:
        try:
            client = await RawClient.connect(targets()[0])
            try:
                for queue in queues:
                    while True:
                        reply = await client.call("GetJobCounts", queue=queue)
                        counts = reply.get("counts") if reply.get("ok") else None
                        if counts is not None and not any(counts.get(k) for k in busy):
                            break
                        await trio.sleep(0.05)  # (polling the counts, under a deadline)
                return
            finally:
                await client.aclose()
        except CONNECTION_ERRORS:
            await trio.sleep(0.05)  # (a broker went away: ask another)


async def read_final(history: History, targets: Callable[[], Sequence[int]]
                     ) -> dict[str, dict[str, Any] | None]:
    """``GetJob`` for every job id the history names (pipelined on one connection)."""
    ids = sorted({op.job_id for op in history.ops if op.job_id is not None})
    final: dict[str, dict[str, Any] | None] = {}
    async with trio.open_nursery() as nursery:
        link = await Link.open(nursery, targets()[0])

        async def read(chunk: Sequence[str]) -> None:
            for job_id in chunk:
                reply = await link.call("GetJob", id=job_id)
                if not reply.get("ok") and "not found" not in str(reply.get("error")):
                    raise AssertionError(f"GetJob {job_id}: {reply}")
                final[job_id] = reply.get("job") if reply.get("ok") else None

        async with trio.open_nursery() as reading:
            for i in range(16):
                reading.start_soon(read, ids[i::16])
        await link.aclose()
    return final
