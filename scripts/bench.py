#!/usr/bin/env python3
"""Throughput and latency benchmark for any broker that speaks bunqueue's TCP protocol.

Works against trioqueue or the real bunqueue server: it only needs a host:port.

Usage:
    python scripts/bench.py --target 127.0.0.1:6789 [--codec msgpack|cbor] [--n 20000]
        [--rows all|push_seq,pullb_ackb_100,...] [--json out.json] [--time-limit-s 60]
        [--repeat 1] [--e2e-jobs 2000] [--data-bytes 0] [--auth-token TOKEN]
        [--io-timeout-s 30] [--no-cleanup]

Rows (each is bounded by its job count AND by --time-limit-s; a row that hits the time
limit stops and reports what it completed):
    push_seq            N/4 PUSH, one request per round trip.
    push_pipelined_256  N PUSH on one connection, 256 requests kept in flight.
    pushb_100           N jobs as PUSHB batches of 100, 4 batches in flight.
    pushb_1000          N jobs as PUSHB batches of 1000, 4 batches in flight.
    pull_ack_1          preload N/4 (untimed), then PULL(timeout 0) + ACK per job, sequential.
    pullb_ackb_100      preload N (untimed), then PULLB(count 100) + ACKB, sequential.
    pullb_ackb_1000     preload N (untimed), then PULLB(count 1000) + ACKB, sequential.
    pullb_ackb_100_concurrency  pullb_ackb_100 on a queue with SetConcurrency 100 (every
                        pull passes the queue's concurrency gate; each takes all slots).
    pullb_ackb_100_groups       pullb_ackb_100 with the jobs spread over 10,000 job
                        groups (groupId i % 10000): every job is a round-robin claim.
    pullb_ackb_100_groups_10    the same over 10 groups: a claim should cost the same.
    e2e_latency         worker thread parks PULL(timeout 5000) on its own socket; producer
                        pushes one job at a time; latency = PUSH sent -> worker's ACK reply
                        received; p50/p99 ms and jobs/s.
    delayed_lateness    --e2e-jobs/4 jobs pushed with delays spread over 100-1100 ms while a
                        worker thread long-polls PULL; lateness = PULL reply received -
                        (PUSH sent + delay); p50/p99 ms. Timers of the broker, not
                        throughput: jobs/s is the worker's rate.
    rss_100k            preload 100,000 jobs (PUSHB 1000), then the broker's resident
                        memory (VmRSS of --broker-pid, this machine only) in MB; shown in
                        the p50 column as MB; skipped without --broker-pid.
    client_*            through trioqueue's Python client (needs trioqueue installed):
                        add one at a time, add_bulk 1000, a Worker at concurrency 1,
                        10 and 100 draining no-op jobs, add-to-result latency through
                        wait_job_until_finished; see scripts/bench_client.py.
                        Chosen with --rows client (or everything); 'all' is the
                        broker rows only.

Wire format: 4-byte big-endian length + msgpack (or CBOR) map with "cmd" and "reqId";
replies carry the same "reqId" and may arrive out of order; frames without a reqId
(server-pushed events) are ignored.  Request frames that do not depend on earlier replies
are encoded before the timer starts, so the numbers measure the broker, not the encoder.

Only the standard library, msgpack and cbor2 are used.  Exit status is 0 when every row
finished without an error, 1 when some row reported errors, 2 when the target is
unreachable.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import queue
import secrets
import socket
import statistics
import struct
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import cbor2
import msgpack

ROWS: tuple[str, ...] = (
    "push_seq",
    "push_pipelined_256",
    "pushb_100",
    "pushb_1000",
    "pull_ack_1",
    "pullb_ackb_100",
    "pullb_ackb_1000",
    "pullb_ackb_100_concurrency",
    "pullb_ackb_100_groups",
    "pullb_ackb_100_groups_10",
    "e2e_latency",
    "delayed_lateness",
    "rss_100k",
)

# Rows measured through trioqueue's Python client: scripts/bench_client.py.
# Untimed before the rows (--warmup): one job per round trip, bulk pushes, bulk pulls.
WARMUP_ROWS: tuple[str, ...] = ("push_seq", "pushb_1000", "pullb_ackb_1000")

CLIENT_ROWS: tuple[str, ...] = (
    "client_add_seq",
    "client_add_bulk_1000",
    "client_worker_c1",
    "client_worker_c10",
    "client_worker_c100",
    "client_wait_latency",
)

OWNER = "bench"
JOB_NAME = "bench"
LOCK_TTL_MS = 30_000
E2E_PULL_TIMEOUT_MS = 5_000
PRELOAD_BATCH = 1000
PRELOAD_WINDOW = 4
RECV_CHUNK = 1 << 20
MAX_FRAME = 64 << 20
INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1

_LEN = struct.Struct(">I")
perf = time.perf_counter


class ProtocolError(Exception):
    """The broker sent something that is not a valid frame."""


# --------------------------------------------------------------------------- codecs


def _int32_safe(value: Any) -> Any:
    """Send integers outside int32 as float64 (the protocol's msgpack int64 rule)."""
    kind = type(value)
    if kind is int:
        return float(value) if value > INT32_MAX or value < INT32_MIN else value
    if kind is str:
        return value
    if kind is dict:
        return {k: _int32_safe(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [_int32_safe(v) for v in value]
    return value


def _msgpack_ext(code: int, data: bytes) -> Any:
    # ext type 0 is the wire form of JavaScript's `undefined`.
    if code == 0:
        return None
    return msgpack.ExtType(code, data)


class MsgpackCodec:
    name = "msgpack"

    def __init__(self) -> None:
        # A Packer is not thread-safe: every connection owns its own codec.
        self._packer = msgpack.Packer(use_bin_type=True)

    def encode(self, obj: dict[str, Any]) -> bytes:
        return self._packer.pack(_int32_safe(obj))

    def decode(self, buf: Any) -> Any:
        return msgpack.unpackb(buf, raw=False, ext_hook=_msgpack_ext, strict_map_key=False)


class CborCodec:
    name = "cbor"

    def encode(self, obj: dict[str, Any]) -> bytes:
        return cbor2.dumps(obj)

    def decode(self, buf: Any) -> Any:
        return cbor2.loads(bytes(buf))


CODECS: dict[str, Callable[[], MsgpackCodec | CborCodec]] = {
    "msgpack": MsgpackCodec,
    "cbor": CborCodec,
}

_CBOR_UNDEFINED = getattr(cbor2, "undefined", None)


def is_nil(value: Any) -> bool:
    return value is None or (_CBOR_UNDEFINED is not None and value is _CBOR_UNDEFINED)


# --------------------------------------------------------------------------- connection


class Conn:
    """One blocking TCP connection; replies are matched to requests by reqId."""

    def __init__(self, host: str, port: int, codec: str, io_timeout: float) -> None:
        self.sock = socket.create_connection((host, port), timeout=io_timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.codec = CODECS[codec]()
        self._buf = bytearray()  # the unfinished frame of the last recv, if any
        self._rview = memoryview(bytearray(RECV_CHUNK))
        self._seq = 0
        self._stash: dict[Any, dict[str, Any]] = {}
        self.events = 0  # server-pushed frames without a reqId (ignored)
        self.orphans: list[Any] = []  # reqId-less frames that look like errors

    # -- encoding
    def make(self, cmd: str, **fields: Any) -> tuple[str, bytes]:
        """Encode one request frame; returns (reqId, frame bytes)."""
        self._seq += 1
        rid = str(self._seq)
        msg = {"cmd": cmd, "reqId": rid}
        msg.update(fields)
        payload = self.codec.encode(msg)
        return rid, _LEN.pack(len(payload)) + payload

    # -- io
    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_msgs(self) -> list[dict[str, Any]]:
        """One recv (up to 1 MiB); returns every complete reply frame it finished.

        Into a buffer kept for the connection: ``recv(1 MiB)`` allocates (and, past
        malloc's mmap threshold, maps and unmaps) a fresh megabyte per call, which
        cost ~12 us per round trip, a tenth of one PUSH per round trip.
        """
        got = self.sock.recv_into(self._rview)
        if not got:
            raise ConnectionError("connection closed by the broker")
        data = self._rview[:got]
        buf = self._buf
        if buf:
            buf += data
            src: bytearray | memoryview = buf
        else:
            src = data
        out: list[dict[str, Any]] = []
        end = len(src)
        off = 0
        decode = self.codec.decode
        with memoryview(src) as view:
            while end - off >= 4:
                (size,) = _LEN.unpack_from(src, off)
                if size > MAX_FRAME:
                    raise ProtocolError(f"frame of {size} bytes exceeds {MAX_FRAME}")
                stop = off + 4 + size
                if stop > end:
                    break
                msg = decode(view[off + 4 : stop])
                off = stop
                if type(msg) is dict and msg.get("reqId") is not None:
                    out.append(msg)
                elif type(msg) is dict and (msg.get("type") == "event" or "ok" not in msg):
                    self.events += 1
                else:
                    self.orphans.append(msg)
        if src is buf:
            del buf[:off]
        elif off < end:
            buf += data[off:]
        return out

    def wait(self, rid: str) -> dict[str, Any]:
        """Block until the reply for `rid` arrives; other replies are kept for later."""
        found = self._stash.pop(rid, None)
        while found is None:
            for msg in self.recv_msgs():
                if found is None and msg["reqId"] == rid:
                    found = msg
                else:
                    self._stash[msg["reqId"]] = msg
        return found

    def call(self, cmd: str, **fields: Any) -> dict[str, Any]:
        rid, frame = self.make(cmd, **fields)
        self.send(frame)
        return self.wait(rid)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


# --------------------------------------------------------------------------- results


@dataclass
class RunResult:
    row: str
    run: int
    queue: str
    jobs: int = 0
    expected_jobs: int = 0
    seconds: float = 0.0
    jobs_per_s: float = 0.0
    p50_ms: float | None = None
    p99_ms: float | None = None
    latency_ms: dict[str, float] | None = None
    stopped_by_time: bool = False
    errors: int = 0
    first_error: str | None = None
    sanity: list[str] = field(default_factory=list)  # failed sanity checks (also errors)
    notes: list[str] = field(default_factory=list)  # remarks that are not errors
    preloaded: int | None = None
    preload_seconds: float | None = None
    empty_pulls: int = 0
    events_ignored: int = 0
    cleanup: str | None = None

    def fail(self, text: str) -> None:
        self.errors += 1
        if self.first_error is None:
            self.first_error = text

    def check(self, reply: dict[str, Any], what: str) -> bool:
        if reply.get("ok") is True:
            return True
        self.fail(f"{what}: {reply.get('error', reply)!r}")
        return False

    def insane(self, text: str) -> None:
        """A sanity check failed: counts as an error too."""
        self.sanity.append(text)
        self.fail(f"sanity: {text}")

    def finish(self, jobs: int, seconds: float) -> None:
        self.jobs = jobs
        self.seconds = seconds
        self.jobs_per_s = jobs / seconds if seconds > 0 else 0.0


@dataclass
class Ctx:
    host: str
    port: int
    codec: str
    n: int
    time_limit_s: float
    io_timeout_s: float
    e2e_jobs: int
    data_pad: str
    auth_token: str | None
    broker_pid: int | None = None
    # In a cluster (docs/scale-out.md): (broker id, every broker's id), so that each
    # row's queue is one that broker serves (scripts/bench_cluster.py)
    place: tuple[str, list[str]] | None = None
    conns: list[Conn] = field(default_factory=list)

    def connect(self) -> Conn:
        conn = Conn(self.host, self.port, self.codec, self.io_timeout_s)
        self.conns.append(conn)
        if self.auth_token is not None:
            reply = conn.call("Auth", token=self.auth_token)
            if reply.get("ok") is not True:
                raise RuntimeError(f"Auth refused: {reply.get('error', reply)!r}")
        return conn

    def data(self, i: int) -> dict[str, Any]:
        if self.data_pad:
            return {"i": i, "pad": self.data_pad}
        return {"i": i}

    def deadline(self) -> float:
        return perf() + self.time_limit_s

    def close_all(self) -> None:
        for conn in self.conns:
            conn.close()
        self.conns.clear()


def percentile(sorted_values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile of an already sorted, non-empty sequence."""
    rank = max(1, math.ceil(pct / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


# --------------------------------------------------------------------------- engines

# A pipelined request: (reqId, frame bytes, number of jobs it carries).
Frame = tuple[str, bytes, int]


def pipeline(
    conn: Conn,
    frames: Sequence[Frame],
    window: int,
    deadline: float,
    res: RunResult,
    what: str,
    on_ok: Callable[[dict[str, Any], int], int],
) -> tuple[int, float, float, bool]:
    """Keep `window` requests in flight until every frame is answered or time runs out.

    Returns (jobs done, first send time, last reply time, stopped by time).
    """
    total = len(frames)
    if total == 0:
        now = perf()
        return 0, now, now, False
    inflight: dict[Any, int] = {}  # reqId -> jobs carried
    sock = conn.sock
    done = 0
    idx = min(window, total)
    first = frames[:idx]
    for rid, _frame, njobs in first:
        inflight[rid] = njobs
    t_first = perf()
    sock.sendall(b"".join(f[1] for f in first))
    t_last = t_first
    stopped = False
    while inflight:
        for msg in conn.recv_msgs():
            njobs = inflight.pop(msg["reqId"], -1)
            if njobs < 0:
                res.fail(f"{what}: reply with unknown reqId {msg['reqId']!r}")
                continue
            if msg.get("ok") is True:
                done += on_ok(msg, njobs)
            else:
                res.fail(f"{what}: {msg.get('error', msg)!r}")
        t_last = perf()
        if t_last >= deadline:
            stopped = bool(inflight) or idx < total
            break
        free = window - len(inflight)
        if free > 0 and idx < total:
            chunk = frames[idx : idx + free]
            idx += len(chunk)
            for rid, _frame, njobs in chunk:
                inflight[rid] = njobs
            sock.sendall(b"".join(f[1] for f in chunk))
    return done, t_first, t_last, stopped


def push_frames(ctx: Ctx, conn: Conn, q: str, count: int) -> list[Frame]:
    frames: list[Frame] = []
    for i in range(count):
        rid, frame = conn.make("PUSH", queue=q, name=JOB_NAME, data=ctx.data(i))
        frames.append((rid, frame, 1))
    return frames


def pushb_frames(ctx: Ctx, conn: Conn, q: str, count: int, batch: int,
                 groups: int = 0) -> list[Frame]:
    frames: list[Frame] = []
    for start in range(0, count, batch):
        size = min(batch, count - start)
        jobs = [{"name": JOB_NAME, "data": ctx.data(start + k)} for k in range(size)]
        if groups:
            for k, job in enumerate(jobs):
                job["groupId"] = f"g{(start + k) % groups}"
        rid, frame = conn.make("PUSHB", queue=q, jobs=jobs)
        frames.append((rid, frame, size))
    return frames


def _on_push_ok(res: RunResult) -> Callable[[dict[str, Any], int], int]:
    def on_ok(msg: dict[str, Any], njobs: int) -> int:
        if is_nil(msg.get("id")):
            res.insane("PUSH reply without an id")
        return njobs

    return on_ok


def _on_pushb_ok(res: RunResult, collect: list[Any] | None) -> Callable[[dict[str, Any], int], int]:
    def on_ok(msg: dict[str, Any], njobs: int) -> int:
        ids = msg.get("ids")
        if not isinstance(ids, list) or len(ids) != njobs:
            got = len(ids) if isinstance(ids, list) else ids
            res.insane(f"PUSHB of {njobs} jobs answered with {got!r} ids")
            return 0
        if collect is not None:
            collect.extend(ids)
        return njobs

    return on_ok


def preload(ctx: Ctx, conn: Conn, q: str, count: int, res: RunResult,
            groups: int = 0) -> list[Any]:
    """Untimed PUSHB preload (batches of 1000, 4 in flight); returns the pushed ids
    (spread over ``groups`` job groups when not 0)."""
    frames = pushb_frames(ctx, conn, q, count, PRELOAD_BATCH, groups)
    ids: list[Any] = []
    done, t0, t1, stopped = pipeline(
        conn,
        frames,
        PRELOAD_WINDOW,
        ctx.deadline(),
        res,
        "preload PUSHB",
        _on_pushb_ok(res, ids),
    )
    res.preloaded = done
    res.preload_seconds = t1 - t0
    if stopped:
        res.notes.append(f"preload hit the time limit after {done} of {count} jobs")
    return ids


def pull_reply_jobs(reply: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    jobs = reply.get("jobs")
    tokens = reply.get("tokens")
    return (
        jobs if isinstance(jobs, list) else [],
        tokens if isinstance(tokens, list) else [],
    )


def job_id(job: Any) -> Any:
    return job.get("id") if isinstance(job, dict) else None


def check_ack_outcome(reply: dict[str, Any], res: RunResult, what: str) -> int:
    """Count ids the broker reports as ignored in an ok ACK/ACKB reply."""
    data = reply.get("data")
    if isinstance(data, dict):
        ignored = data.get("ignoredIds")
        if isinstance(ignored, list) and ignored:
            res.insane(f"{what}: broker ignored {len(ignored)} acks (first {ignored[0]!r})")
            return len(ignored)
    return 0


def verify_drained(conn: Conn, q: str, res: RunResult) -> None:
    """After a full drain one more PULL(timeout 0) must come back empty (untimed)."""
    reply = conn.call("PULL", queue=q, timeout=0, owner=OWNER, lockTtl=LOCK_TTL_MS)
    if res.check(reply, "final PULL") and not is_nil(reply.get("job")):
        res.insane(f"queue still had job {job_id(reply.get('job'))!r} after the drain")


def verify_pulled(
    res: RunResult, pushed: list[Any], pulled: set[Any], pulled_count: int, drained: bool
) -> None:
    if len(pulled) != pulled_count:
        res.insane(f"{pulled_count - len(pulled)} jobs were delivered more than once")
    unknown = {str(i) for i in pulled} - {str(i) for i in pushed}
    if unknown:
        res.insane(f"{len(unknown)} pulled ids were never pushed (e.g. {next(iter(unknown))!r})")
    if drained and pulled_count != len(pushed):
        res.insane(f"pulled {pulled_count} jobs but {len(pushed)} were pushed")


# --------------------------------------------------------------------------- rows


def row_push_seq(ctx: Ctx, q: str, res: RunResult) -> None:
    count = max(1, ctx.n // 4)
    res.expected_jobs = count
    conn = ctx.connect()
    frames = push_frames(ctx, conn, q, count)
    send = conn.sock.sendall
    wait = conn.wait
    done = 0
    deadline = ctx.deadline()
    t0 = perf()
    t1 = t0
    for rid, frame, _njobs in frames:
        send(frame)
        reply = wait(rid)
        if reply.get("ok") is True:
            done += 1
            if is_nil(reply.get("id")):
                res.insane("PUSH reply without an id")
        else:
            res.fail(f"PUSH: {reply.get('error', reply)!r}")
        t1 = perf()
        if t1 >= deadline:
            res.stopped_by_time = done + res.errors < count
            break
    res.finish(done, t1 - t0)
    res.events_ignored = conn.events


def _row_pipelined_push(ctx: Ctx, q: str, res: RunResult, batch: int, window: int) -> None:
    count = ctx.n
    res.expected_jobs = count
    conn = ctx.connect()
    if batch == 1:
        frames = push_frames(ctx, conn, q, count)
        on_ok = _on_push_ok(res)
        what = "PUSH"
    else:
        frames = pushb_frames(ctx, conn, q, count, batch)
        on_ok = _on_pushb_ok(res, None)
        what = "PUSHB"
    done, t0, t1, stopped = pipeline(conn, frames, window, ctx.deadline(), res, what, on_ok)
    res.stopped_by_time = stopped
    res.finish(done, t1 - t0)
    res.events_ignored = conn.events


def row_push_pipelined_256(ctx: Ctx, q: str, res: RunResult) -> None:
    _row_pipelined_push(ctx, q, res, batch=1, window=256)


def row_pushb_100(ctx: Ctx, q: str, res: RunResult) -> None:
    _row_pipelined_push(ctx, q, res, batch=100, window=4)


def row_pushb_1000(ctx: Ctx, q: str, res: RunResult) -> None:
    _row_pipelined_push(ctx, q, res, batch=1000, window=4)


def row_pull_ack_1(ctx: Ctx, q: str, res: RunResult) -> None:
    conn = ctx.connect()
    pushed = preload(ctx, conn, q, max(1, ctx.n // 4), res)
    expected = len(pushed)
    res.expected_jobs = expected
    pulls = [
        conn.make("PULL", queue=q, timeout=0, owner=OWNER, lockTtl=LOCK_TTL_MS)
        for _ in range(expected)
    ]
    send = conn.sock.sendall
    wait = conn.wait
    make = conn.make
    pulled: set[Any] = set()
    pulled_count = 0
    acked = 0
    empty_streak = 0
    deadline = ctx.deadline()
    t0 = perf()
    t1 = t0
    i = 0
    while pulled_count < expected:
        if i < len(pulls):
            rid, frame = pulls[i]
            i += 1
        else:  # only after empty pulls: wait a little for a straggler
            rid, frame = make("PULL", queue=q, timeout=100, owner=OWNER, lockTtl=LOCK_TTL_MS)
        send(frame)
        reply = wait(rid)
        if reply.get("ok") is not True:
            res.fail(f"PULL: {reply.get('error', reply)!r}")
            break
        job = reply.get("job")
        if is_nil(job):
            res.empty_pulls += 1
            empty_streak += 1
            if empty_streak > 3:
                break
        else:
            empty_streak = 0
            jid = job_id(job)
            pulled_count += 1
            pulled.add(jid)
            token = reply.get("token")
            if is_nil(token):
                arid, aframe = make("ACK", id=jid)
            else:
                arid, aframe = make("ACK", id=jid, token=token)
            send(aframe)
            ack = wait(arid)
            if ack.get("ok") is True:
                acked += 1 - check_ack_outcome(ack, res, "ACK")
            else:
                res.fail(f"ACK: {ack.get('error', ack)!r}")
        t1 = perf()
        if t1 >= deadline:
            res.stopped_by_time = pulled_count < expected
            break
    res.finish(acked, t1 - t0)
    drained = not res.stopped_by_time
    verify_pulled(res, pushed, pulled, pulled_count, drained)
    if drained:
        verify_drained(conn, q, res)
    res.events_ignored = conn.events


def _row_pullb_ackb(ctx: Ctx, q: str, res: RunResult, count: int, groups: int = 0
                    ) -> None:
    conn = ctx.connect()
    pushed = preload(ctx, conn, q, ctx.n, res, groups)
    expected = len(pushed)
    res.expected_jobs = expected
    rounds = -(-expected // count)
    pulls = [
        conn.make("PULLB", queue=q, count=count, timeout=0, owner=OWNER) for _ in range(rounds)
    ]
    send = conn.sock.sendall
    wait = conn.wait
    make = conn.make
    pulled: set[Any] = set()
    pulled_count = 0
    acked = 0
    empty_streak = 0
    deadline = ctx.deadline()
    t0 = perf()
    t1 = t0
    i = 0
    while pulled_count < expected:
        if i < len(pulls):
            rid, frame = pulls[i]
            i += 1
        else:
            rid, frame = make("PULLB", queue=q, count=count, timeout=100, owner=OWNER)
        send(frame)
        reply = wait(rid)
        if reply.get("ok") is not True:
            res.fail(f"PULLB: {reply.get('error', reply)!r}")
            break
        jobs, tokens = pull_reply_jobs(reply)
        if not jobs:
            res.empty_pulls += 1
            empty_streak += 1
            if empty_streak > 3:
                break
        else:
            empty_streak = 0
            if len(jobs) > count:
                res.insane(f"PULLB(count={count}) returned {len(jobs)} jobs")
            ids = [job_id(job) for job in jobs]
            pulled_count += len(ids)
            pulled.update(ids)
            if len(tokens) == len(ids):
                arid, aframe = make("ACKB", ids=ids, tokens=tokens)
            else:
                res.insane(f"PULLB returned {len(ids)} jobs but {len(tokens)} tokens")
                arid, aframe = make("ACKB", ids=ids)
            send(aframe)
            ack = wait(arid)
            if ack.get("ok") is True:
                acked += len(ids) - check_ack_outcome(ack, res, "ACKB")
            else:
                res.fail(f"ACKB: {ack.get('error', ack)!r}")
        t1 = perf()
        if t1 >= deadline:
            res.stopped_by_time = pulled_count < expected
            break
    res.finish(acked, t1 - t0)
    drained = not res.stopped_by_time
    verify_pulled(res, pushed, pulled, pulled_count, drained)
    if drained:
        verify_drained(conn, q, res)
    res.events_ignored = conn.events


def row_pullb_ackb_100(ctx: Ctx, q: str, res: RunResult) -> None:
    _row_pullb_ackb(ctx, q, res, 100)


def row_pullb_ackb_1000(ctx: Ctx, q: str, res: RunResult) -> None:
    _row_pullb_ackb(ctx, q, res, 1000)


def row_pullb_ackb_100_concurrency(ctx: Ctx, q: str, res: RunResult) -> None:
    conn = ctx.connect()
    try:
        reply = conn.call("SetConcurrency", queue=q, limit=100)
    finally:
        conn.close()
    if res.check(reply, "SetConcurrency"):
        _row_pullb_ackb(ctx, q, res, 100)


def row_pullb_ackb_100_groups(ctx: Ctx, q: str, res: RunResult) -> None:
    _row_pullb_ackb(ctx, q, res, 100, groups=10_000)


def row_pullb_ackb_100_groups_10(ctx: Ctx, q: str, res: RunResult) -> None:
    _row_pullb_ackb(ctx, q, res, 100, groups=10)


def row_e2e_latency(ctx: Ctx, q: str, res: RunResult) -> None:
    total = max(1, ctx.e2e_jobs)
    res.expected_jobs = total
    producer = ctx.connect()
    worker = ctx.connect()
    # (job id, time the ACK reply arrived, error text or None), or ("!", exception text)
    signals: queue.SimpleQueue[tuple[Any, float, str | None]] = queue.SimpleQueue()
    stop = threading.Event()

    def park() -> str:
        rid, frame = worker.make(
            "PULL", queue=q, timeout=E2E_PULL_TIMEOUT_MS, owner=OWNER, lockTtl=LOCK_TTL_MS
        )
        worker.send(frame)
        return rid

    def work() -> None:
        try:
            rid = park()
            while True:
                reply = worker.wait(rid)
                if reply.get("ok") is not True:
                    signals.put(("!", perf(), f"worker PULL: {reply.get('error', reply)!r}"))
                    return
                job = reply.get("job")
                if is_nil(job):  # the long poll expired without a job
                    if stop.is_set():
                        return
                    rid = park()
                    continue
                jid = job_id(job)
                token = reply.get("token")
                if is_nil(token):
                    arid, aframe = worker.make("ACK", id=jid)
                else:
                    arid, aframe = worker.make("ACK", id=jid, token=token)
                worker.send(aframe)
                ack = worker.wait(arid)
                t_ack = perf()
                err = None if ack.get("ok") is True else f"ACK: {ack.get('error', ack)!r}"
                if not stop.is_set():
                    rid = park()  # re-park before handing over, so the next push finds it
                signals.put((jid, t_ack, err))
                if stop.is_set():
                    return
        except Exception as exc:  # noqa: BLE001 - reported through the signal queue
            if not stop.is_set():
                signals.put(("!", perf(), f"worker: {type(exc).__name__}: {exc}"))

    frames = push_frames(ctx, producer, q, total)
    thread = threading.Thread(target=work, name="bench-e2e-worker", daemon=True)
    thread.start()
    time.sleep(0.1)  # untimed: let the first PULL reach the broker and park
    latencies: list[float] = []
    done = 0
    deadline = ctx.deadline()
    t_start = perf()
    t_end = t_start
    try:
        for rid, frame, _njobs in frames:
            t_sent = perf()
            if t_sent >= deadline:
                res.stopped_by_time = True
                break
            producer.send(frame)
            reply = producer.wait(rid)
            if not res.check(reply, "PUSH"):
                break
            try:
                jid, t_ack, err = signals.get(timeout=max(1.0, deadline - perf()) + 10.0)
            except queue.Empty:
                res.fail(f"job {reply.get('id')!r} was not delivered to the parked worker")
                break
            if jid == "!":
                res.fail(str(err))
                break
            t_end = t_ack
            if err is not None:
                res.fail(err)
                continue
            if str(jid) != str(reply.get("id")):
                res.insane(f"worker got job {jid!r} while {reply.get('id')!r} was pushed")
            done += 1
            latencies.append((t_ack - t_sent) * 1000.0)
    finally:
        stop.set()
        try:
            worker.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        thread.join(timeout=E2E_PULL_TIMEOUT_MS / 1000 + 2)
    res.finish(done, t_end - t_start)
    if latencies:
        lat = sorted(latencies)
        res.p50_ms = percentile(lat, 50)
        res.p99_ms = percentile(lat, 99)
        res.latency_ms = {
            "min": lat[0],
            "mean": statistics.fmean(lat),
            "p50": res.p50_ms,
            "p90": percentile(lat, 90),
            "p99": res.p99_ms,
            "max": lat[-1],
        }
    res.events_ignored = producer.events + worker.events


def row_delayed_lateness(ctx: Ctx, q: str, res: RunResult) -> None:
    total = max(1, ctx.e2e_jobs // 4)
    res.expected_jobs = total
    producer = ctx.connect()
    worker = ctx.connect()
    scheduled: dict[Any, float] = {}
    started: dict[Any, float] = {}
    failures: list[str] = []

    def work() -> None:
        while len(started) < total:
            reply = worker.call("PULL", queue=q, timeout=E2E_PULL_TIMEOUT_MS, owner=OWNER,
                                lockTtl=LOCK_TTL_MS)
            now = perf()
            if reply.get("ok") is not True:
                failures.append(f"PULL: {reply.get('error', reply)!r}")
                return
            job = reply.get("job")
            if is_nil(job):
                if perf() > deadline:
                    return
                continue
            started[job_id(job)] = now
            worker.call("ACK", id=job_id(job), token=reply.get("token"))

    deadline = ctx.deadline()
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    t0 = perf()
    for i in range(total):
        delay_ms = 100 + (i * 1000) // total
        sent = perf()
        reply = producer.call("PUSH", queue=q, name=JOB_NAME, data=ctx.data(i),
                              delay=delay_ms)
        if res.check(reply, "PUSH"):
            scheduled[reply.get("id")] = sent + delay_ms / 1000.0
    thread.join(timeout=max(deadline - perf(), 1.0))
    for text in failures:
        res.fail(text)
    late = sorted((started[j] - scheduled[j]) * 1000.0 for j in started if j in scheduled)
    res.finish(len(late), perf() - t0)
    res.stopped_by_time = len(late) < total
    if late:
        res.p50_ms = percentile(late, 50)
        res.p99_ms = percentile(late, 99)
        if late[0] < -5.0:
            res.insane(f"a delayed job started {-late[0]:.1f} ms early")


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError(f"no VmRSS for pid {pid}")


def row_rss_100k(ctx: Ctx, q: str, res: RunResult) -> None:
    if ctx.broker_pid is None:
        res.notes.append("skipped: needs --broker-pid (the broker runs on this machine)")
        return
    count = 100_000
    res.expected_jobs = count
    conn = ctx.connect()
    before = _rss_mb(ctx.broker_pid)
    preload(ctx, conn, q, count, res)
    conn.call("Ping")
    after = _rss_mb(ctx.broker_pid)
    res.finish(res.preloaded or 0, res.preload_seconds or 0.0)
    res.p50_ms = after  # shown in the p50 column; it is MB, not ms
    res.notes.append(f"RSS {before:.0f} MB before, {after:.0f} MB with {count:,} jobs waiting")


ROW_FUNCS: dict[str, Callable[[Ctx, str, RunResult], None]] = {
    "push_seq": row_push_seq,
    "push_pipelined_256": row_push_pipelined_256,
    "pushb_100": row_pushb_100,
    "pushb_1000": row_pushb_1000,
    "pull_ack_1": row_pull_ack_1,
    "pullb_ackb_100": row_pullb_ackb_100,
    "pullb_ackb_1000": row_pullb_ackb_1000,
    "pullb_ackb_100_concurrency": row_pullb_ackb_100_concurrency,
    "pullb_ackb_100_groups": row_pullb_ackb_100_groups,
    "pullb_ackb_100_groups_10": row_pullb_ackb_100_groups_10,
    "e2e_latency": row_e2e_latency,
    "delayed_lateness": row_delayed_lateness,
    "rss_100k": row_rss_100k,
}


# --------------------------------------------------------------------------- driver


def obliterate(ctx: Ctx, q: str) -> str:
    """Best effort: drop the row's queue.  Brokers without Obliterate are fine."""
    try:
        conn = Conn(ctx.host, ctx.port, ctx.codec, ctx.io_timeout_s)
        try:
            if ctx.auth_token is not None:
                conn.call("Auth", token=ctx.auth_token)
            reply = conn.call("Obliterate", queue=q)
        finally:
            conn.close()
    except Exception as exc:  # noqa: BLE001 - cleanup must never fail a row
        return f"failed: {type(exc).__name__}: {exc}"
    if reply.get("ok") is True:
        return "ok"
    return f"refused: {reply.get('error', reply)!r}"


def row_function(row: str) -> Callable[[Ctx, str, RunResult], None]:
    if row in ROW_FUNCS:
        return ROW_FUNCS[row]
    # The client rows need trioqueue (and trio); only they import it.
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_client import CLIENT_ROW_FUNCS

    return CLIENT_ROW_FUNCS[row]


def queue_for(ctx: Ctx, row: str) -> str:
    """A fresh queue name for a row; with ``ctx.place``, one the rendezvous gives to
    the named broker (the same rule the brokers use: trioqueue.cluster.rendezvous)."""
    while True:
        q = f"bench-{row}-{secrets.token_hex(4)}"
        if ctx.place is None:
            return q
        from trioqueue.cluster.rendezvous import preferred_owner

        if preferred_owner(q, ctx.place[1]) == ctx.place[0]:
            return q


def run_row(ctx: Ctx, row: str, run: int, cleanup: bool) -> RunResult:
    q = queue_for(ctx, row)
    res = RunResult(row=row, run=run, queue=q)
    try:
        row_function(row)(ctx, q, res)
    except Exception as exc:  # noqa: BLE001 - one broken row must not stop the others
        res.fail(f"{type(exc).__name__}: {exc}")
    finally:
        for conn in ctx.conns:
            for orphan in conn.orphans[:1]:
                res.fail(f"reply without reqId: {orphan!r}")
        ctx.close_all()
    if cleanup:
        res.cleanup = obliterate(ctx, q)
    return res


def ping(ctx: Ctx) -> str:
    conn = ctx.connect()
    try:
        t0 = perf()
        reply = conn.call("Ping")
        rtt = (perf() - t0) * 1000.0
    finally:
        ctx.close_all()
    if reply.get("ok") is not True:
        raise RuntimeError(f"Ping refused: {reply.get('error', reply)!r}")
    return f"{rtt:.2f} ms"


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _spread(values: list[float], digits: int) -> str:
    """Median, followed by [min-max] when the runs differ."""
    med = f"{statistics.median(values):.{digits}f}"
    lo, hi = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return med if lo == hi else f"{med} [{lo}-{hi}]"


def summarize(rows: list[str], runs: list[RunResult]) -> tuple[str, list[dict[str, Any]]]:
    header = ("row", "runs", "jobs", "seconds", "jobs/s", "p50 ms", "p99 ms", "errors")
    lines: list[tuple[str, ...]] = [header]
    summary: list[dict[str, Any]] = []
    for row in rows:
        mine = [r for r in runs if r.row == row]
        if not mine:
            continue
        jobs = [float(r.jobs) for r in mine]
        secs = [r.seconds for r in mine]
        rates = [r.jobs_per_s for r in mine]
        p50s = [r.p50_ms for r in mine if r.p50_ms is not None]
        p99s = [r.p99_ms for r in mine if r.p99_ms is not None]
        errors = sum(r.errors for r in mine)
        timed_out = sum(1 for r in mine if r.stopped_by_time)
        err_text = str(errors) + (f" (time-limited {timed_out})" if timed_out else "")
        lines.append(
            (
                row,
                str(len(mine)),
                _spread(jobs, 0),
                _spread(secs, 3),
                _spread(rates, 0),
                _spread(p50s, 3) if p50s else "-",
                _spread(p99s, 3) if p99s else "-",
                err_text,
            )
        )
        summary.append(
            {
                "row": row,
                "runs": len(mine),
                "jobs_median": statistics.median(jobs),
                "seconds_median": statistics.median(secs),
                "jobs_per_s_median": statistics.median(rates),
                "jobs_per_s_min": min(rates),
                "jobs_per_s_max": max(rates),
                "p50_ms_median": statistics.median(p50s) if p50s else None,
                "p99_ms_median": statistics.median(p99s) if p99s else None,
                "errors": errors,
                "time_limited_runs": timed_out,
            }
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = []
    for k, line in enumerate(lines):
        cells = [
            cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i])
            for i, cell in enumerate(line)
        ]
        out.append("  ".join(cells))
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out), summary


def parse_target(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def parse_rows(text: str) -> list[str]:
    """``all`` (the broker rows), ``client`` (the trioqueue client rows), ``everything``,
    or a comma list of row names."""
    groups = {"all": list(ROWS), "client": list(CLIENT_ROWS),
              "everything": list(ROWS) + list(CLIENT_ROWS)}
    rows: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if part:
            rows.extend(groups.get(part, [part]))
    unknown = [r for r in rows if r not in ROW_FUNCS and r not in CLIENT_ROWS]
    if unknown or not rows:
        raise argparse.ArgumentTypeError(
            f"unknown row(s) {unknown}; choose from: all, client, everything, "
            f"{', '.join(ROWS + CLIENT_ROWS)}"
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Benchmark a bunqueue-protocol broker (trioqueue or bunqueue).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    ap.add_argument("--target", type=parse_target, default="127.0.0.1:6789", help="HOST:PORT")
    ap.add_argument("--codec", choices=sorted(CODECS), default="msgpack")
    ap.add_argument("--n", type=int, default=20000, help="base job count per row")
    ap.add_argument("--rows", type=parse_rows, default="all",
                    help="'all' (broker rows), 'client', 'everything' or a comma list")
    ap.add_argument("--json", metavar="PATH", help="write every raw run and a summary here")
    ap.add_argument("--time-limit-s", type=float, default=60.0, help="wall-clock cap per row")
    ap.add_argument("--repeat", type=int, default=1, help="runs per row (median, min-max)")
    ap.add_argument("--e2e-jobs", type=int, default=2000, help="jobs in the e2e_latency row")
    ap.add_argument("--data-bytes", type=int, default=0, help="extra padding in each job's data")
    ap.add_argument("--auth-token", default=None, help="send Auth{token} on every connection")
    ap.add_argument("--io-timeout-s", type=float, default=30.0, help="socket timeout")
    ap.add_argument("--no-cleanup", action="store_true", help="skip Obliterate after each row")
    ap.add_argument("--warmup", type=int, default=1,
                    help="untimed rounds of " + ", ".join(WARMUP_ROWS) + " first")
    ap.add_argument("--place", metavar="ID@ID,ID,...", default=None,
                    help="a cluster: each row's queue is one the broker ID (before the @) "
                         "serves among the brokers listed after it")
    ap.add_argument("--broker-pid", type=int, default=None,
                    help="the broker's pid, for the rss_100k row (same machine only)")
    args = ap.parse_args(argv)
    if args.n < 1 or args.repeat < 1 or args.time_limit_s <= 0 or args.warmup < 0:
        ap.error("--n and --repeat must be >= 1, --warmup >= 0 and --time-limit-s > 0")
    if args.io_timeout_s <= E2E_PULL_TIMEOUT_MS / 1000:
        ap.error(f"--io-timeout-s must exceed the {E2E_PULL_TIMEOUT_MS} ms long poll")

    host, port = args.target
    rows: list[str] = args.rows
    ctx = Ctx(
        host=host,
        port=port,
        codec=args.codec,
        n=args.n,
        time_limit_s=args.time_limit_s,
        io_timeout_s=args.io_timeout_s,
        e2e_jobs=args.e2e_jobs,
        data_pad="x" * max(0, args.data_bytes),
        auth_token=args.auth_token,
        broker_pid=args.broker_pid,
    )
    if args.place:
        owner, _, brokers = args.place.partition("@")
        if not owner or owner not in brokers.split(","):
            ap.error("--place needs ID@ID,ID,... with the first ID among the others")
        ctx.place = (owner, brokers.split(","))
    try:
        rtt = ping(ctx)
    except Exception as exc:  # noqa: BLE001
        print(f"cannot reach {host}:{port}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    print(
        f"target {host}:{port}  codec {args.codec}  n {args.n}  repeat {args.repeat}  "
        f"time limit {args.time_limit_s:g}s/row  ping {rtt}",
        flush=True,
    )

    for _ in range(args.warmup):
        # A fresh broker is slower at first: a JIT (Bun) has not compiled its hot
        # paths, a store file (LMDB, SQLite) still grows with every commit. Both
        # brokers of a comparison get the same untimed rounds.
        for row in WARMUP_ROWS:
            warm = run_row(ctx, row, -1, cleanup=True)
            if warm.errors:
                print(f"  warm-up {row}: {warm.errors} errors ({warm.first_error})", flush=True)
    if args.warmup:
        print(f"  warmed up ({args.warmup} x {', '.join(WARMUP_ROWS)})", flush=True)

    started_unix = time.time()
    runs: list[RunResult] = []
    for row in rows:
        for run in range(args.repeat):
            res = run_row(ctx, row, run, cleanup=not args.no_cleanup)
            runs.append(res)
            p = (
                f"  p50 {_fmt(res.p50_ms, 3)} ms  p99 {_fmt(res.p99_ms, 3)} ms"
                if res.p50_ms
                else ""
            )
            flag = "  [time limit]" if res.stopped_by_time else ""
            notes = list(res.notes)
            if res.preload_seconds is not None:
                notes.insert(0, f"preloaded {res.preloaded} in {res.preload_seconds:.3f}s")
            if notes:
                flag += "  (" + "; ".join(notes) + ")"
            print(
                f"  {row} #{run + 1}: {res.jobs}/{res.expected_jobs} jobs in {res.seconds:.3f}s"
                f" = {res.jobs_per_s:,.0f} jobs/s{p}  errors {res.errors}{flag}",
                flush=True,
            )
        firsts = [r.first_error for r in runs if r.row == row and r.first_error]
        if firsts:
            print(f"    first error: {firsts[0]}", flush=True)

    table, summary = summarize(rows, runs)
    print()
    print(table)

    if args.json:
        doc = {
            "target": f"{host}:{port}",
            "codec": args.codec,
            "n": args.n,
            "rows": rows,
            "repeat": args.repeat,
            "time_limit_s": args.time_limit_s,
            "e2e_jobs": args.e2e_jobs,
            "data_bytes": args.data_bytes,
            "ping": rtt,
            "started_unix": started_unix,
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "summary": summary,
            "runs": [asdict(r) for r in runs],
        }
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=2, default=str)
        print(f"\nwrote {args.json}")
    return 1 if any(r.errors for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
