#!/usr/bin/env python3
"""The broker with a big queue: page reads, stalls of other queues, WaitJob holds, memory.

Against a real broker (started here on a temporary LMDB store with ``--fsync never``, or
an already running one with ``--target HOST:PORT``), with ``--jobs`` N (default
1,000,000) in one queue, it measures:

- GetJobs of a live state (waiting, delayed, active), limit 100, at offsets 0, N/2 and
  N-100, and of completed jobs at offsets 0 and min(500,000, N/2): median and max of
  ``--calls`` calls;
- how long another queue waits while one heavy command runs: a probe process sends
  GetJobCounts on queue ``probe-*`` in a tight loop on its own socket; per command, its
  own duration and the probe's worst latency (GetJobs at N/2, PromoteJobs of N delayed
  jobs, Drain of N waiting jobs, Obliterate of N completed jobs, and an idle window with
  N active jobs, in which the stall sweep runs every 5 s); each probe row also gives
  the worst latency less the time the probe itself waited for its core (Linux's
  ``schedstat``: it shares a core with the load), which is what the broker held it;
- the broker's own slow steps (started here with ``--log-slow-step-ms``, default 10):
  for each heavy command and each section, how many task steps held the event loop
  10 ms or more, and how many passes of its loop did (kind ``pass``: the steps run
  between two polls of the sockets, which is what bounds the probe's latency), the
  worst by wall time and by CPU time (CPU time excludes the time the OS gave the core
  to another process, so it tells the broker's slow steps from a noisy machine's);
- WaitJob holds: broker time per hold registered at the first ``--holds-low`` holds and
  at the last of ``--holds-high`` holds (40 per connection, the broker's per-connection
  limit), the latency of a WaitJob refused at that limit (it counts the holds first),
  and the same again after the connections with all but the first ``--holds-low``
  holds closed (do the closed holds still cost?);
- memory (VmRSS of the broker; needs the broker on this machine: started here, or
  ``--broker-pid``): idle, with N waiting jobs (bytes per job), and after each of
  ``--cycles`` rounds of pushing N jobs and draining them.

Every load loop is bounded by its count and by ``--time-limit-s`` (per step); a step
that hits the limit stops, and its row says so.

    python scripts/bench_scale.py [--jobs 1000000] [--target HOST:PORT [--broker-pid PID]]
        [--sections memory,live,delayed,active,completed,holds] [--calls 3]
        [--holds-low 1000] [--holds-high 40000] [--cycles 3] [--stall-window-s 11]
        [--time-limit-s 300] [--json out.json] [--broker-cpus 0 --load-cpus 1]

On a machine of two cores, three busy processes (broker, load, probe) make the probe
measure the host's scheduler as much as the broker; ``--broker-cpus 0 --load-cpus 1``
gives the broker a core of its own, as a production broker would have.

Exit status: 0 when every step finished without an error, 1 otherwise, 2 when the broker
cannot be reached or started.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import platform
import re
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import Conn, Frame, parse_target, perf  # noqa: E402

SECTIONS = ("memory", "live", "delayed", "active", "completed", "holds")
BATCH = 1000  # PUSHB / PULLB / ACKB size (PULLB's maximum)
WINDOW = 4  # PUSHB batches in flight
OWNER = "bench-scale"
LONG_LOCK_MS = 3_600_000  # active jobs must not expire during the run
LONG_DELAY_MS = 3_600_000  # delayed jobs must not come due during the run
DUE_DELAY_MS = 2_000  # "fall due together": due 2 s after the last push at the latest
HOLD_TIMEOUT_MS = 600_000  # WaitJob's maximum: holds outlive the run
HOLDS_PER_CONN = 40  # the broker's default max_wait_holds_per_connection
PAGE = 100
READY = re.compile(rb"trioqueue ready: tcp [^:]+:(\d+) ws [^:]+:(\d+)")
SLOW = re.compile(rb"slow step: (.+) held the event loop ([\d.]+) ms \(([\d.]+) ms CPU\)")
# A pass of trio's loop (every step run between two polls of the sockets) that long:
# what another queue's client waits for, counted under the kind "pass".
# How often fall_due asks whether every due job was promoted.
FALL_DUE_POLL_S = 0.05
SLOW_PASS = re.compile(rb"slow pass: \d+ steps held the event loop ([\d.]+) ms "
                       rb"\(([\d.]+) ms CPU\)")


class StepError(Exception):
    """The broker refused a command a step needs."""


def ok(reply: dict[str, Any], what: str) -> dict[str, Any]:
    if reply.get("ok") is not True:
        raise StepError(f"{what}: {reply.get('error', reply)!r}")
    return reply


# --------------------------------------------------------------------------- results


@dataclass
class Row:
    """One line of the table: a timed command, or a measurement."""

    section: str
    name: str
    value: str  # what the table shows
    numbers: dict[str, Any] = field(default_factory=dict)  # raw values for --json
    note: str = ""


@dataclass
class Run:
    jobs: int
    rows: list[Row] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def add(self, section: str, name: str, value: str, note: str = "",
            **numbers: Any) -> None:
        row = Row(section, name, value, numbers, note)
        self.rows.append(row)
        extra = f"  ({note})" if note else ""
        print(f"  [{section}] {name}: {value}{extra}", flush=True)


def ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


def table(rows: list[Row]) -> str:
    lines = [("section", "measurement", "value", "note")]
    lines += [(r.section, r.name, r.value, r.note) for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(3)]
    out = []
    for k, line in enumerate(lines):
        text = "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line[:3]))
        out.append((text + "  " + line[3]).rstrip())
        if k == 0:
            out.append("  ".join("-" * w for w in widths) + "  ----")
    return "\n".join(out)


# --------------------------------------------------------------------------- the broker


class LocalBroker:
    """``python -m trioqueue serve`` on a temporary LMDB directory and free ports."""

    def __init__(self, data_dir: str, fsync: str, timeout_s: float = 30.0,
                 slow_step_ms: float = 0, cpus: set[int] | None = None) -> None:
        args = [sys.executable, "-m", "trioqueue", "serve", "--host", "127.0.0.1",
                "--tcp-port", "0", "--ws-port", "0", "--data-dir", data_dir,
                "--fsync", fsync, "--log-slow-step-ms", str(slow_step_ms)]
        # The broker's own slow steps, from its log: (task, wall ms, CPU ms).
        self.slow: list[tuple[str, float, float]] = []
        # stderr carries the ready line (and the log): a thread reads it to the end,
        # keeping the last few kilobytes, so the broker never blocks on a full pipe.
        # Pinned before exec, so every thread the broker starts inherits the mask.
        pin = None if cpus is None else (lambda: os.sched_setaffinity(0, cpus))
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     preexec_fn=pin)
        self.pid = self.proc.pid
        self.tail = b""
        self.port = 0
        assert self.proc.stderr is not None
        found = threading.Event()
        self._reader = threading.Thread(target=self._read, args=(found,), daemon=True)
        self._reader.start()
        if not found.wait(timeout_s) or not self.port:
            self.stop()
            raise RuntimeError(f"broker not ready in {timeout_s:g}s:\n{self.tail.decode()}")

    def _read(self, found: threading.Event) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:  # until the broker exits and closes its stderr
            self.tail = (self.tail + line)[-8192:]
            slow = SLOW.search(line)
            if slow:
                self.slow.append((slow[1].decode(errors="replace"), float(slow[2]),
                                  float(slow[3])))
            slow = SLOW_PASS.search(line)
            if slow:
                self.slow.append(("pass", float(slow[1]), float(slow[2])))
            if not self.port:
                match = READY.search(line)
                if match:
                    self.port = int(match[1])
                    found.set()
        found.set()

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM (a clean shutdown), SIGKILL if it does not exit in time; by pid."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout_s)
        self._reader.join(5.0)


def rss_split(pid: int) -> dict[str, int]:
    """VmRSS, RssAnon (the heap) and RssFile (mapped files: LMDB's pages) in bytes."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile"):
                out[key] = int(rest.split()[0]) * 1024
    if "VmRSS" not in out:
        raise RuntimeError(f"no VmRSS for pid {pid}")
    return out


def mb(n: int) -> str:
    return f"{n / 1e6:,.0f} MB"


def rss_text(split: dict[str, int]) -> str:
    return (f"{mb(split['VmRSS'])} (anon {mb(split.get('RssAnon', 0))}, "
            f"file {mb(split.get('RssFile', 0))})")


# --------------------------------------------------------------------------- the probe


def probe_text(seen: dict[str, float]) -> str:
    return (f"probe max {seen['max_ms']:,.1f} ms (p99 {seen['p99_ms']:.1f} ms, "
            f"{seen['over_10ms']:.0f} of {seen['calls']:.0f} calls over 10 ms; less the "
            f"probe's own wait for its core: max {seen['held_max_ms']:,.1f} ms, "
            f"{seen['held_over_10ms']:.0f} over 10 ms)")


def probe_numbers(seen: dict[str, float]) -> dict[str, float]:
    return {"probe_max_ms": seen["max_ms"], "probe_p50_ms": seen["p50_ms"],
            "probe_p99_ms": seen["p99_ms"], "probe_over_10ms": seen["over_10ms"],
            "probe_calls": seen["calls"], "probe_held_max_ms": seen["held_max_ms"],
            "probe_held_over_10ms": seen["held_over_10ms"]}


def _run_queue_wait() -> Callable[[], float]:
    """Seconds this thread has so far spent runnable but waiting for a CPU (Linux's
    ``schedstat``; 0 where there is none). The probe shares its core with the load: a
    call that waited that long for the probe's own turn was not stalled by the broker."""
    try:
        fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
    except OSError:
        return lambda: 0.0
    return lambda: int(os.pread(fd, 64, 0).split()[1]) / 1e9


def _probe_loop(host: str, port: int, queue: str, io_timeout_s: float,
                pipe: Connection) -> None:
    """The probe's process: GetJobCounts on ``queue`` in a tight loop while told to
    (``"start"`` ... ``"stop"``), then the (sent, answered) times of every call."""
    conn = Conn(host, port, "msgpack", io_timeout_s)
    conn.call("GetJobCounts", queue=queue)  # creates the queue's actor
    waited = _run_queue_wait()
    while pipe.recv() == "start":
        samples: list[tuple[float, float, float]] = []
        error: str | None = None
        warm = stopped = False
        while True:
            w0 = waited()
            t0 = perf()
            try:
                reply = conn.call("GetJobCounts", queue=queue)
            except Exception as exc:  # noqa: BLE001 - reported by watch()
                error = f"{type(exc).__name__}: {exc}"
                break
            samples.append((t0, perf(), waited() - w0))
            if reply.get("ok") is not True:
                error = repr(reply.get("error", reply))
            if stopped:  # this call was sent after the stop: nothing is stuck behind
                break
            if not warm and len(samples) >= 3:
                pipe.send("warm")
                warm = True
            if warm and pipe.poll():
                pipe.recv()  # "stop"
                stopped = True
        if not warm:
            pipe.send("warm")  # (failed before it was: the parent must not wait)
        if not stopped:
            pipe.recv()
        pipe.send((samples, error))
    conn.close()


class Probe:
    """Another queue's client: GetJobCounts in a tight loop on its own socket, while
    :meth:`watch` is open; the worst latency it saw is how long the broker stalled it.

    It runs in a process of its own: a thread of this one would share its GIL with the
    load this process generates (decoding a PULLB of 1,000 jobs is one C call of a few
    ms, and Python switches threads every 5 ms), and count those waits as the broker's.
    """

    def __init__(self, host: str, port: int, io_timeout_s: float) -> None:
        self.queue = f"probe-{secrets.token_hex(4)}"
        ctx = multiprocessing.get_context("spawn")
        self._pipe, child = ctx.Pipe()
        self._proc = ctx.Process(target=_probe_loop, daemon=True,
                                 args=(host, port, self.queue, io_timeout_s, child))
        self._proc.start()
        self._timeout_s = io_timeout_s

    def _recv(self) -> Any:
        if not self._pipe.poll(self._timeout_s):
            raise TimeoutError("the probe process did not answer")
        return self._pipe.recv()

    @contextmanager
    def watch(self) -> Iterator[dict[str, float]]:
        """Probe while the block runs; afterwards the dict holds the probe's numbers:
        max_ms (worst latency of a call that overlapped the block), p50_ms, calls."""
        stats: dict[str, float] = {}
        self._pipe.send("start")
        self._recv()  # "warm": a few answered calls before the command
        start = perf()
        try:
            yield stats
        finally:
            end = perf()
            self._pipe.send("stop")
            samples, error = self._recv()
            seen = [(s, a, w) for s, a, w in samples if a >= start and s <= end]
            lat = sorted(a - s for s, a, _ in seen) or [0.0]
            # Less the time the probe itself waited for its core: what the broker held it.
            held = sorted(a - s - w for s, a, w in seen) or [0.0]
            # The max is one call: a scheduling hiccup of this 2-core machine shows there
            # as well as a stall of the broker; p99 and the calls over 10 ms tell them apart.
            stats.update(max_ms=ms(lat[-1]), p50_ms=ms(statistics.median(lat)),
                         p99_ms=ms(lat[min(len(lat) - 1, int(len(lat) * 0.99))]),
                         over_10ms=sum(1 for x in lat if x > 0.010), calls=len(seen),
                         held_max_ms=ms(held[-1]),
                         held_over_10ms=sum(1 for x in held if x > 0.010))
            if error:
                stats["error"] = error  # type: ignore[assignment]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._pipe.send("close")
        self._proc.join(10.0)
        if self._proc.is_alive():
            self._proc.kill()


# --------------------------------------------------------------------------- loads


class Bench:
    def __init__(self, host: str, port: int, jobs: int, time_limit_s: float,
                 io_timeout_s: float, calls: int, pid: int | None) -> None:
        self.host, self.port = host, port
        self.n = jobs
        self.time_limit_s = time_limit_s
        self.io_timeout_s = io_timeout_s
        self.calls = calls
        self.pid = pid
        self.conns: list[Conn] = []
        # The broker's slow steps (task, wall ms, CPU ms), when it was started here.
        self.slow: list[tuple[str, float, float]] | None = None
        self.main = self.connect()
        self.probe = Probe(host, port, io_timeout_s)
        self.run = Run(jobs)

    def connect(self) -> Conn:
        conn = Conn(self.host, self.port, "msgpack", self.io_timeout_s)
        self.conns.append(conn)
        return conn

    def close(self) -> None:
        self.probe.close()
        for conn in self.conns:
            conn.close()

    def queue(self, what: str) -> str:
        return f"scale-{what}-{secrets.token_hex(4)}"

    def rss(self) -> dict[str, int] | None:
        return rss_split(self.pid) if self.pid is not None else None

    # -- loads (each bounded by its count and the time limit)

    def push(self, q: str, count: int, delay_ms: int = 0) -> tuple[int, float]:
        """PUSHB in batches of 1000, 4 in flight; returns (jobs pushed, seconds)."""
        conn = self.main
        opts = {"delay": delay_ms} if delay_ms else {}
        frames: list[Frame] = []
        for start in range(0, count, BATCH):
            size = min(BATCH, count - start)
            jobs = [{"name": "scale", "data": {"i": start + k}, **opts} for k in range(size)]
            rid, frame = conn.make("PUSHB", queue=q, jobs=jobs)
            frames.append((rid, frame, size))
        done, seconds, stopped = self._pipeline(frames, "PUSHB")
        if stopped:
            self.run.errors.append(f"push to {q} hit the time limit at {done} of {count}")
        return done, seconds

    def _pipeline(self, frames: list[Frame], what: str) -> tuple[int, float, bool]:
        conn = self.main
        deadline = perf() + self.time_limit_s
        inflight: dict[str, int] = {}
        idx = done = 0
        t0 = perf()
        while idx < len(frames) or inflight:
            while idx < len(frames) and len(inflight) < WINDOW:
                rid, frame, size = frames[idx]
                idx += 1
                inflight[rid] = size
                conn.send(frame)
            for msg in conn.recv_msgs():
                size = inflight.pop(msg["reqId"], 0)
                ok(msg, what)
                done += size
            if perf() > deadline:
                # Let the ones in flight land, then stop.
                while inflight:
                    for msg in conn.recv_msgs():
                        done += inflight.pop(msg["reqId"], 0)
                return done, perf() - t0, True
        return done, perf() - t0, False

    def pull_all(self, q: str, count: int, ack: bool, conn: Conn | None = None
                 ) -> tuple[int, float, bool]:
        """PULLB 1000 (long lock) until ``count`` jobs came, each batch ACKB'd if ``ack``
        (the ACKB rides with the next PULLB). Returns (jobs, seconds, stopped by time)."""
        conn = conn or self.main
        deadline = perf() + self.time_limit_s
        got = 0
        pending_ack: str | None = None
        t0 = perf()
        stopped = False
        empty = 0
        while got < count:
            if perf() > deadline:
                stopped = True
                break
            rid, frame = conn.make("PULLB", queue=q, count=BATCH, timeout=0, owner=OWNER,
                                   lockTtl=LONG_LOCK_MS)
            conn.send(frame)
            if pending_ack is not None:
                check_acks(ok(conn.wait(pending_ack), "ACKB"))
                pending_ack = None
            reply = ok(conn.wait(rid), "PULLB")
            jobs = reply.get("jobs") or []
            if not jobs:
                empty += 1
                if empty > 3:
                    break
                continue
            got += len(jobs)
            if ack:
                pending_ack, aframe = conn.make("ACKB", ids=[j["id"] for j in jobs],
                                                tokens=reply.get("tokens"))
                conn.send(aframe)
        if pending_ack is not None:
            check_acks(ok(conn.wait(pending_ack), "ACKB"))
        return got, perf() - t0, stopped

    # -- timed single commands

    def timed(self, cmd: str, **fields: Any) -> tuple[dict[str, Any], float]:
        t0 = perf()
        reply = self.main.call(cmd, **fields)
        return ok(reply, cmd), perf() - t0

    def get_jobs(self, section: str, q: str, state: str, offsets: list[int],
                 expect: int) -> None:
        for offset in offsets:
            times = []
            for _ in range(self.calls):
                reply, secs = self.timed("GetJobs", queue=q, state=state, offset=offset,
                                         limit=PAGE)
                times.append(secs)
                if len(reply.get("jobs") or []) != min(PAGE, max(0, expect - offset)):
                    self.run.errors.append(
                        f"GetJobs {state} offset {offset}: {len(reply.get('jobs') or [])} "
                        f"jobs, expected {min(PAGE, max(0, expect - offset))}")
            self.run.add(section, f"GetJobs {state} limit {PAGE} offset {offset:,}",
                         f"median {statistics.median(times) * 1000:,.1f} ms, "
                         f"max {max(times) * 1000:,.1f} ms", calls=len(times),
                         median_ms=ms(statistics.median(times)), max_ms=ms(max(times)))

    def stall(self, section: str, label: str, cmd: str, **fields: Any) -> dict[str, Any]:
        """One heavy command with the probe watching: its time and the probe's worst."""
        first = len(self.slow) if self.slow is not None else 0
        with self.probe.watch() as seen:
            reply, secs = self.timed(cmd, **fields)
        note = f"probe error {seen['error']}" if "error" in seen else ""
        if self.slow is not None:
            time.sleep(0.2)  # the broker's log lines reach the reader thread
            note = (note + " " + slow_text(self.slow[first:])).strip()
        self.run.add(section, f"stall: {label}",
                     f"own {secs * 1000:,.1f} ms, {probe_text(seen)}",
                     note=note, own_ms=ms(secs), **probe_numbers(seen))
        return reply

    # ------------------------------------------------------------------- sections

    def section_memory(self, cycles: int) -> None:
        """RSS idle, with N waiting jobs, and after each of ``cycles`` rounds of pushing N
        jobs into one queue and draining it. The first full queue also serves the live
        GetJobs rows and the Drain stall."""
        base = self.rss()
        if base is not None:
            self.run.add("memory", "RSS idle", rss_text(base), rss=base)
        q = self.queue("cycle")
        for cycle in range(1, cycles + 1):
            pushed, secs = self.push(q, self.n)
            self.main.call("Ping")
            full = self.rss()
            if cycle == 1:
                self.run.add("memory", f"push {pushed:,} waiting (PUSHB {BATCH})",
                             f"{secs:.1f} s, {pushed / secs:,.0f} jobs/s",
                             seconds=round(secs, 3), jobs=pushed)
                if full is not None and base is not None:
                    per = {k: round((full[k] - base[k]) / max(pushed, 1)) for k in full}
                    self.run.add("memory", f"RSS with {pushed:,} waiting",
                                 f"{mb(full['VmRSS'])}, {per['VmRSS']:,} B/job "
                                 f"(anon {per.get('RssAnon', 0):,}, file "
                                 f"{per.get('RssFile', 0):,})",
                                 rss=full, bytes_per_job=per["VmRSS"],
                                 anon_bytes_per_job=per.get("RssAnon"))
                self.section_live(q, pushed)
                reply = self.stall("live", f"Drain of {pushed:,} waiting", "Drain", queue=q)
                drain_s = None
            else:
                reply, drain_s = self.timed("Drain", queue=q)
            if reply.get("count") != pushed:
                self.run.errors.append(f"Drain removed {reply.get('count')} of {pushed}")
            self.main.call("Ping")
            after = self.rss()
            if full is not None and after is not None:
                took = "" if drain_s is None else f"Drain took {drain_s * 1000:,.0f} ms"
                self.run.add("memory", f"cycle {cycle}: RSS full", rss_text(full), rss=full)
                self.run.add("memory", f"cycle {cycle}: RSS after Drain", rss_text(after),
                             note=took, rss=after,
                             drain_ms=None if drain_s is None else ms(drain_s))
        self.main.call("Obliterate", queue=q)

    def section_live_alone(self) -> None:
        q = self.queue("live")
        pushed, _ = self.push(q, self.n)
        self.section_live(q, pushed)
        self.stall("live", f"Drain of {pushed:,} waiting", "Drain", queue=q)
        self.main.call("Obliterate", queue=q)

    def section_live(self, q: str, n: int) -> None:
        self.get_jobs("live", q, "waiting", offsets(n), n)
        self.stall("live", f"GetJobs waiting offset {n // 2:,}", "GetJobs", queue=q,
                   state="waiting", offset=n // 2, limit=PAGE)

    def section_delayed(self) -> None:
        q = self.queue("delayed")
        pushed, secs = self.push(q, self.n, delay_ms=LONG_DELAY_MS)
        self.run.add("delayed", f"push {pushed:,} delayed", f"{secs:.1f} s",
                     seconds=round(secs, 3))
        self.get_jobs("delayed", q, "delayed", offsets(pushed), pushed)
        reply = self.stall("delayed", f"PromoteJobs of {pushed:,} delayed", "PromoteJobs",
                           queue=q)
        if reply.get("count") != pushed:
            self.run.errors.append(f"PromoteJobs moved {reply.get('count')} of {pushed}")
        self.main.call("Obliterate", queue=q)
        self.fall_due()

    def fall_due(self) -> None:
        """N delayed jobs that all fell due: promotion is lazy, so the first call that
        looks at the queue promotes them (a slice per step since issue 11, all in one
        step before). The probe watches from that call until none is delayed."""
        q = self.queue("due")
        pushed, _ = self.push(q, self.n, delay_ms=DUE_DELAY_MS)
        time.sleep(DUE_DELAY_MS / 1000)  # the last pushed is due now: nothing promoted yet
        first = len(self.slow) if self.slow is not None else 0
        deadline = perf() + self.time_limit_s
        with self.probe.watch() as seen:
            t0 = perf()
            while perf() < deadline:  # bounded by time
                counts = ok(self.main.call("GetJobCounts", queue=q), "GetJobCounts")
                if not counts["counts"]["delayed"]:
                    break
                # Not a loop as tight as the probe's: on two cores a third busy process
                # would show the host's preemption in the probe, not the promotion.
                time.sleep(FALL_DUE_POLL_S)
            secs = perf() - t0
        note = f"probe error {seen['error']}" if "error" in seen else ""
        if counts["counts"]["delayed"]:
            self.run.errors.append(f"{counts['counts']['delayed']} still delayed")
        if self.slow is not None:
            time.sleep(0.2)  # the broker's log lines reach the reader thread
            note = (note + " " + slow_text(self.slow[first:])).strip()
        self.run.add("delayed", f"stall: {pushed:,} delayed jobs fall due together",
                     f"all promoted in {secs * 1000:,.1f} ms, probe max "
                     f"{seen['max_ms']:,.1f} ms (p99 {seen['p99_ms']:.1f} ms, "
                     f"{seen['over_10ms']:.0f} of {seen['calls']:.0f} calls over 10 ms)",
                     note=note, own_ms=ms(secs), probe_max_ms=seen["max_ms"],
                     probe_p99_ms=seen["p99_ms"], probe_over_10ms=seen["over_10ms"],
                     probe_calls=seen["calls"])
        self.main.call("Obliterate", queue=q)

    def section_active(self, window_s: float) -> None:
        q = self.queue("active")
        pushed, _ = self.push(q, self.n)
        # No sweep may charge these jobs while we look: a stall interval far away (the
        # sweep still walks the queue every 5 s, which is what we measure).
        ok(self.main.call("SetStallConfig", queue=q,
                          config={"stallInterval": LONG_LOCK_MS, "gracePeriod": LONG_LOCK_MS}),
           "SetStallConfig")
        worker = self.connect()
        with self.probe.watch() as seen:
            got, secs, stopped = self.pull_all(q, pushed, ack=False, conn=worker)
        self.run.add("active", f"PULLB {BATCH} of {pushed:,} (no ack)",
                     f"{got:,} in {secs:.1f} s, {probe_text(seen)}",
                     note="time limit" if stopped else "", jobs=got, seconds=round(secs, 3),
                     **probe_numbers(seen))
        self.get_jobs("active", q, "active", offsets(got), got)
        with self.probe.watch() as seen:
            t_end = perf() + window_s
            while perf() < t_end:  # bounded by time; the probe does the work
                time.sleep(min(0.2, max(0.0, t_end - perf())))
        self.run.add("active", f"stall: sweep with {got:,} active, {window_s:g} s idle",
                     f"probe max {seen['max_ms']:,.1f} ms (p50 {seen['p50_ms']:.2f} ms, "
                     f"p99 {seen['p99_ms']:.1f} ms, {seen['over_10ms']:.0f} of "
                     f"{seen['calls']:.0f} calls over 10 ms)",
                     note="sweeps every 5 s" if window_s >= 5 else "window < 5 s: may miss",
                     probe_max_ms=seen["max_ms"], probe_p50_ms=seen["p50_ms"],
                     probe_calls=seen["calls"], window_s=window_s)
        # Obliterate before the worker's socket closes: closing it hands back every job.
        self.stall("active", f"Obliterate of {got:,} active", "Obliterate", queue=q)

    def section_completed(self) -> None:
        q = self.queue("completed")
        pushed, _ = self.push(q, self.n)
        with self.probe.watch() as seen:
            got, secs, stopped = self.pull_all(q, pushed, ack=True)
        self.run.add("completed", f"PULLB+ACKB {BATCH} of {pushed:,}",
                     f"{got:,} in {secs:.1f} s, {got / max(secs, 1e-9):,.0f} jobs/s, "
                     f"{probe_text(seen)}",
                     note="time limit" if stopped else "", jobs=got, seconds=round(secs, 3),
                     **probe_numbers(seen))
        far = min(500_000, got // 2)
        self.get_jobs("completed", q, "completed", [0, far], got)
        self.stall("completed", f"GetJobs completed offset {far:,}", "GetJobs", queue=q,
                   state="completed", offset=far, limit=PAGE)
        self.stall("completed", f"Obliterate of {got:,} completed", "Obliterate", queue=q)

    def section_holds(self, low: int, high: int) -> None:
        """WaitJob holds on jobs that never finish, 40 per connection."""
        q = self.queue("holds")
        pushed, _ = self.push(q, high)
        ids = self._job_ids(q, pushed)
        conns: list[Conn] = []
        # (holds before this connection's 40, seconds for its 40 holds + a marker)
        per_conn: list[tuple[int, float]] = []
        deadline = perf() + self.time_limit_s
        held = 0
        stopped = False
        while held < len(ids):
            if perf() > deadline:
                stopped = True
                break
            conn = self.connect()
            conns.append(conn)
            chunk = ids[held : held + HOLDS_PER_CONN]
            frames = [conn.make("WaitJob", id=job_id, timeout=HOLD_TIMEOUT_MS)[1]
                      for job_id in chunk]
            # Same connection, same queue: the marker is applied after the holds.
            mark, mframe = conn.make("GetJobCounts", queue=q)
            t0 = perf()
            conn.send(b"".join(frames) + mframe)
            reply = conn.wait(mark)
            per_conn.append((held, perf() - t0))
            ok(reply, "GetJobCounts")
            if conn._stash:
                self.run.errors.append(f"{len(conn._stash)} WaitJob holds answered early")
            held += len(chunk)
        base = self._rtt(conns[0], q)
        for label, lo, hi in (("first", 0, low), ("last", max(0, held - low), held)):
            mine = [secs for before, secs in per_conn if lo <= before < hi]
            per_hold = max(0.0, statistics.median(mine) - base) / HOLDS_PER_CONN
            self.run.add("holds", f"broker time per hold, {label} {hi - lo:,} of {held:,}",
                         f"{per_hold * 1e6:,.1f} us", note="time limit" if stopped else "",
                         us_per_hold=round(per_hold * 1e6, 2), connections=len(mine))
        total = sum(secs for _, secs in per_conn)
        self.run.add("holds", f"registering {held:,} holds ({len(conns)} connections)",
                     f"{total:.1f} s", seconds=round(total, 3))
        self._refused("holds", f"WaitJob refused at the limit, {held:,} holds", conns[0],
                      ids[0])
        # Close every connection but the first ``low // 40``: their holds are done.
        keep = max(1, low // HOLDS_PER_CONN)
        with self.probe.watch() as seen:
            t0 = perf()
            for conn in conns[keep:]:
                conn.close()
                self.conns.remove(conn)
            # Best effort: by the time the open connection's commands on the queue come
            # back, the broker has read the closes (EOFs) and handed them to the queue.
            self.main.call("Ping")
            self._rtt(conns[0], q)
            secs = perf() - t0
        self.run.add("holds", f"stall: closing {len(conns) - keep} connections with holds",
                     f"{secs * 1000:,.1f} ms, probe max {seen['max_ms']:,.1f} ms",
                     own_ms=ms(secs), probe_max_ms=seen["max_ms"])
        self._refused("holds", f"... after closing {len(conns) - keep} connections, "
                      f"{keep * HOLDS_PER_CONN:,} open", conns[0], ids[0])
        probe = self.connect()
        t0 = perf()
        frames = [probe.make("WaitJob", id=job_id, timeout=HOLD_TIMEOUT_MS)[1]
                  for job_id in ids[:HOLDS_PER_CONN]]
        mark, mframe = probe.make("GetJobCounts", queue=q)
        probe.send(b"".join(frames) + mframe)
        ok(probe.wait(mark), "GetJobCounts")
        per_hold = max(0.0, perf() - t0 - base) / HOLDS_PER_CONN
        self.run.add("holds", "... then broker time per new hold", f"{per_hold * 1e6:,.1f} us",
                     us_per_hold=round(per_hold * 1e6, 2))
        self.main.call("Obliterate", queue=q)

    def _refused(self, section: str, label: str, conn: Conn, job_id: str) -> None:
        """A WaitJob past the connection's 40 holds answers at once, after counting."""
        times = []
        for _ in range(max(5, self.calls)):
            t0 = perf()
            reply = ok(conn.call("WaitJob", id=job_id, timeout=HOLD_TIMEOUT_MS), "WaitJob")
            times.append(perf() - t0)
            if reply.get("completed") is not False:
                self.run.errors.append(f"refused WaitJob answered {reply!r}")
        self.run.add(section, label, f"median {statistics.median(times) * 1000:,.2f} ms",
                     median_ms=ms(statistics.median(times)), max_ms=ms(max(times)))

    def _rtt(self, conn: Conn, q: str) -> float:
        times = []
        for _ in range(5):
            t0 = perf()
            ok(conn.call("GetJobCounts", queue=q), "GetJobCounts")
            times.append(perf() - t0)
        return statistics.median(times)

    def _job_ids(self, q: str, count: int) -> list[str]:
        """Ids of the queue's waiting jobs, a page of 1000 at a time (small queues only)."""
        out: list[str] = []
        deadline = perf() + self.time_limit_s
        while len(out) < count and perf() < deadline:
            reply = ok(self.main.call("GetJobs", queue=q, state="waiting", offset=len(out),
                                      limit=BATCH), "GetJobs")
            page = [j["id"] for j in reply.get("jobs") or []]
            if not page:
                break
            out.extend(page)
        return out


def slow_text(steps: list[tuple[str, float, float]]) -> str:
    """The broker's steps of 10 ms or more, per kind of task (a queue's actor, a
    connection, ...): how many, and the most CPU one of them took."""
    if not steps:
        return "broker: no step >= 10 ms"
    kinds: dict[str, list[float]] = {}
    for task, _wall, cpu in steps:
        kind = task.split(":")[0] if task.startswith("queue:") else task.rsplit(".", 1)[-1]
        kinds.setdefault(kind, []).append(cpu)
    parts = [f"{kind} {len(cpus)} (CPU max {max(cpus):.1f}, "
             f"{sum(1 for c in cpus if c >= 10)} >= 10 ms CPU)"
             for kind, cpus in sorted(kinds.items(), key=lambda kv: -max(kv[1]))]
    passes = sum(1 for task, _wall, _cpu in steps if task == "pass")
    return (f"broker: {len(steps) - passes} steps, {passes} loop passes >= 10 ms wall: "
            + "; ".join(parts))


def offsets(n: int) -> list[int]:
    return sorted({0, n // 2, max(0, n - PAGE)})


def check_acks(reply: dict[str, Any]) -> None:
    data = reply.get("data")
    if isinstance(data, dict) and data.get("ignoredIds"):
        raise StepError(f"ACKB ignored {len(data['ignoredIds'])} jobs")


# --------------------------------------------------------------------------- driver


def parse_cpus(text: str) -> set[int]:
    try:
        cpus = {int(p) for p in text.split(",") if p.strip()}
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma list of CPU numbers: {text!r}"
                                         ) from None
    if not cpus or not cpus <= os.sched_getaffinity(0):
        raise argparse.ArgumentTypeError(
            f"CPUs {text!r}: choose from {sorted(os.sched_getaffinity(0))}")
    return cpus


def parse_sections(text: str) -> list[str]:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if parts == ["all"]:
        return list(SECTIONS)
    bad = [p for p in parts if p not in SECTIONS]
    if bad or not parts:
        raise argparse.ArgumentTypeError(f"unknown section(s) {bad}; choose from "
                                         f"all, {', '.join(SECTIONS)}")
    return parts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--jobs", type=int, default=1_000_000, help="N: jobs in the big queue")
    ap.add_argument("--target", type=parse_target, default=None,
                    help="HOST:PORT of a running broker (default: start one here)")
    ap.add_argument("--broker-pid", type=int, default=None,
                    help="with --target: the broker's pid, for the memory rows")
    ap.add_argument("--data-dir", default=None, help="for the broker started here "
                    "(default: a temporary directory, removed afterwards)")
    ap.add_argument("--fsync", default="never", choices=("never", "interval", "always"))
    ap.add_argument("--sections", type=parse_sections, default="all",
                    help="all, or a comma list of " + ", ".join(SECTIONS))
    ap.add_argument("--calls", type=int, default=3, help="calls per GetJobs measurement")
    ap.add_argument("--cycles", type=int, default=3, help="push-and-drain memory cycles")
    ap.add_argument("--holds-low", type=int, default=1000)
    ap.add_argument("--holds-high", type=int, default=40_000)
    ap.add_argument("--stall-window-s", type=float, default=11.0,
                    help="idle time watched with N active jobs (the sweep runs every 5 s)")
    ap.add_argument("--time-limit-s", type=float, default=300.0, help="cap per load step")
    ap.add_argument("--io-timeout-s", type=float, default=120.0, help="socket timeout")
    ap.add_argument("--json", metavar="PATH", help="write the rows here")
    ap.add_argument("--broker-cpus", type=parse_cpus, default=None,
                    help="pin the broker started here to these CPUs (e.g. 0)")
    ap.add_argument("--load-cpus", type=parse_cpus, default=None,
                    help="pin this process and the probe to these CPUs (e.g. 1)")
    ap.add_argument("--slow-step-ms", type=float, default=10.0,
                    help="the broker started here logs its steps this long (0: off); "
                         "the rows and each section report them")
    args = ap.parse_args(argv)
    if args.jobs < 2 * PAGE or args.calls < 1 or args.cycles < 1 or not (
            HOLDS_PER_CONN <= args.holds_low <= args.holds_high):
        ap.error(f"--jobs >= {2 * PAGE}, --calls and --cycles >= 1, "
                 f"{HOLDS_PER_CONN} <= --holds-low <= --holds-high")

    broker: LocalBroker | None = None
    tmp: tempfile.TemporaryDirectory[str] | None = None
    if args.target is None:
        data_dir = args.data_dir
        if data_dir is None:
            tmp = tempfile.TemporaryDirectory(prefix="bench-scale-")
            data_dir = os.path.join(tmp.name, "data")
        try:
            broker = LocalBroker(data_dir, args.fsync, slow_step_ms=args.slow_step_ms,
                                 cpus=args.broker_cpus)
        except Exception as exc:  # noqa: BLE001
            print(f"cannot start a broker: {exc}", file=sys.stderr)
            return 2
        host, port, pid = "127.0.0.1", broker.port, broker.pid
    else:
        (host, port), pid = args.target, args.broker_pid
    if args.load_cpus is not None:
        os.sched_setaffinity(0, args.load_cpus)  # the probe, spawned later, inherits it
    try:
        try:
            bench = Bench(host, port, args.jobs, args.time_limit_s, args.io_timeout_s,
                          args.calls, pid)
            if broker is not None and args.slow_step_ms > 0:
                bench.slow = broker.slow
        except OSError as exc:
            print(f"cannot reach {host}:{port}: {exc}", file=sys.stderr)
            return 2
        print(f"target {host}:{port}  jobs {args.jobs:,}  sections "
              f"{','.join(args.sections)}  broker pid {pid or '-'}", flush=True)
        started = time.time()
        steps: dict[str, Callable[[], None]] = {
            "memory": lambda: bench.section_memory(args.cycles),
            "live": lambda: bench.section_live_alone(),
            "delayed": bench.section_delayed,
            "active": lambda: bench.section_active(args.stall_window_s),
            "completed": bench.section_completed,
            "holds": lambda: bench.section_holds(args.holds_low, args.holds_high),
        }
        for name in args.sections:
            if name == "live" and "memory" in args.sections:
                continue  # the memory section's first full queue measured it
            print(f"== {name}", flush=True)
            first = len(bench.slow) if bench.slow is not None else 0
            try:
                steps[name]()
            except Exception as exc:  # noqa: BLE001 - one broken section must not stop the rest
                bench.run.errors.append(f"{name}: {type(exc).__name__}: {exc}")
                print(f"  {name} failed: {type(exc).__name__}: {exc}", flush=True)
            if bench.slow is not None:
                time.sleep(0.2)  # the broker's last log lines reach the reader thread
                bench.run.add(name, "broker steps >= 10 ms, whole section",
                              slow_text(bench.slow[first:]))
        bench.close()
        run = bench.run
        print()
        print(table(run.rows))
        for error in run.errors:
            print(f"error: {error}")
        if args.json:
            doc = {"target": f"{host}:{port}", "jobs": args.jobs, "sections": args.sections,
                   "started_unix": started, "seconds": round(time.time() - started, 1),
                   "python": sys.version.split()[0], "platform": platform.platform(),
                   "rows": [asdict(r) for r in run.rows], "errors": run.errors}
            Path(args.json).write_text(json.dumps(doc, indent=2, default=str))
            print(f"\nwrote {args.json}")
        return 1 if run.errors else 0
    finally:
        if broker is not None:
            broker.stop()
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    sys.exit(main())
