#!/usr/bin/env python3
"""How long one big frame holds everyone else (issue 12, item 2).

A broker (started here: ``python -m trioqueue serve`` on a temporary LMDB store, auth on
with one token, or an already running one with ``--target HOST:PORT``) gets one big frame
from one client while a probe connection runs round trips back to back (``--probe ping``:
Ping; ``--probe job``: PUSH + PULL + ACK on a queue of its own) and records each one's
latency. Scenarios (``--scenarios``, comma-separated):

    push_40mb        PUSH whose data is one 40 MB string (over the 10 MB data limit:
                     the broker must refuse it, after reading and checking it)
    push_8_5mb       PUSH whose data is one 8.5 MB string (accepted and stored)
    pushb_40mb       PUSHB of 4,000 jobs of 10 KB data each (about 40 MB)
    preauth_40mb     the 40 MB PUSH sent before Auth (refused from its header)
    bad_40mb         a 40 MB frame that is not valid msgpack (a truncated string)

Per scenario and run: the probe's calls that overlapped the big frame (from its first
byte sent to its reply), their p50, p99 and max latency, the calls over 10 ms, the big
frame's send time and its reply time (from the last byte sent), and with
``--broker-steps`` the broker's longest task step meanwhile, in CPU time
(``broker_steps.py``: what the host's scheduling cannot inflate). A baseline row gives the
probe alone. Every loop is bounded by its count and ``--time-limit-s``; the broker
started here is stopped by its pid.

    python scripts/bench_big_frames.py [--scenarios all] [--repeat 3] [--probe ping|job]
        [--target HOST:PORT --auth-token TOKEN] [--json out.json] [--time-limit-s 60]
        [--broker-arg=--memory ...] [--scale 1.0] [--broker-steps]

Exit status 0 when every scenario got the reply it expects, 1 otherwise, 2 when the
broker cannot be reached or started.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import msgpack

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import Conn, parse_target  # noqa: E402

perf = time.perf_counter
TOKEN = "bench-big-frames"
SCENARIOS = ("push_40mb", "push_8_5mb", "pushb_40mb", "preauth_40mb", "bad_40mb")
MB = 1_000_000
READY_PREFIX = b"trioqueue ready: tcp "


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


# --------------------------------------------------------------------------- the broker


class LocalBroker:
    """``python -m trioqueue serve`` on free loopback ports; stopped by its pid.

    With ``steps_out``, ``scripts/broker_steps.py`` serves instead and writes the
    broker's long task steps there when it stops (:meth:`steps`). The package is the
    one of the current directory, as for ``-m``.
    """

    def __init__(self, data_dir: str, extra: list[str], timeout_s: float = 30.0,
                 steps_out: str | None = None) -> None:
        serve = ["serve", "--host", "127.0.0.1", "--tcp-port", "0", "--ws-port", "0",
                 "--data-dir", data_dir, *extra]
        if steps_out is None:
            args = [sys.executable, "-m", "trioqueue", *serve]
        else:
            args = [sys.executable, str(Path(__file__).resolve().parent / "broker_steps.py"),
                    "--steps-out", steps_out, *serve]
        self.steps_out = steps_out
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [os.getcwd(), *filter(None, [os.environ.get("PYTHONPATH")])]))
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     env=env)
        self.pid = self.proc.pid
        self.port = 0
        self.tail = b""
        found = threading.Event()
        self._reader = threading.Thread(target=self._read, args=(found,), daemon=True)
        self._reader.start()
        if not found.wait(timeout_s) or not self.port:
            self.stop()
            raise RuntimeError(f"broker not ready in {timeout_s:g}s:\n{self.tail.decode()}")

    def _read(self, found: threading.Event) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:  # to the end, so the broker never blocks on stderr
            self.tail = (self.tail + line)[-8192:]
            if not self.port and READY_PREFIX in line:
                hostport = line.split(READY_PREFIX, 1)[1].split()[0]
                self.port = int(hostport.rsplit(b":", 1)[1])
                found.set()
        found.set()

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM, then SIGKILL if it does not exit in time (this process only)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout_s)
        self._reader.join(5.0)

    def steps(self) -> list[dict[str, Any]]:
        """The long steps ``broker_steps.py`` recorded (after :meth:`stop`)."""
        if self.steps_out is None or not Path(self.steps_out).exists():
            return []
        steps: list[dict[str, Any]] = json.loads(Path(self.steps_out).read_text())
        return steps


# --------------------------------------------------------------------------- the probe


class Probe:
    """A healthy client on its own socket: round trips back to back while active.

    ``kind`` "ping" sends Ping; "job" sends PUSH, PULL (timeout 0) and ACK on a queue of
    its own, and one such cycle is one sample. Samples are (sent, answered) pairs.
    """

    def __init__(self, connect: Callable[[], Conn], kind: str, max_calls: int = 2_000_000
                 ) -> None:
        self.conn = connect()
        self.kind = kind
        self.queue = f"probe-{secrets.token_hex(4)}"
        self.max_calls = max_calls
        self.samples: list[tuple[float, float]] = []
        self.errors: list[str] = []
        self._active = threading.Event()
        self._closing = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def one(self) -> None:
        conn = self.conn
        if self.kind == "ping":
            reply = conn.call("Ping")
            if reply.get("ok") is not True:
                self.errors.append(repr(reply))
            return
        pushed = conn.call("PUSH", queue=self.queue, data={"n": 1})
        pulled = conn.call("PULL", queue=self.queue, timeout=0, owner="probe")
        job = pulled.get("job")
        if pushed.get("ok") is not True or not isinstance(job, dict):
            self.errors.append(f"{pushed!r} {pulled!r}")
            return
        acked = conn.call("ACK", id=job["id"], token=pulled.get("token"))
        if acked.get("ok") is not True:
            self.errors.append(repr(acked))

    def _loop(self) -> None:
        while not self._closing.is_set():
            if not self._active.is_set():
                self._idle.set()
                self._active.wait(0.05)
                continue
            self._idle.clear()
            if len(self.samples) >= self.max_calls or len(self.errors) > 100:
                self._active.clear()
                continue
            t0 = perf()
            try:
                self.one()
            except (OSError, ConnectionError) as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}")
                self._active.clear()
                continue
            self.samples.append((t0, perf()))

    def start(self, warm_calls: int = 20, timeout_s: float = 10.0) -> None:
        self.samples = []
        self._active.set()
        deadline = perf() + timeout_s
        while len(self.samples) < warm_calls and perf() < deadline and not self.errors:
            time.sleep(0.001)

    def stop(self, after: float, timeout_s: float = 30.0) -> None:
        """Stop once a call sent after ``after`` has been answered (or the timeout)."""
        deadline = perf() + timeout_s
        while (perf() < deadline and not self.errors
               and not any(s >= after for s, _ in self.samples[-3:])):
            time.sleep(0.001)
        self._active.clear()
        self._idle.wait(timeout_s)

    def window(self, start: float, end: float) -> list[float]:
        """Latencies of the calls that overlapped [start, end]."""
        return sorted(a - s for s, a in self.samples if a >= start and s <= end)

    def close(self) -> None:
        self._closing.set()
        self._active.clear()
        self._thread.join(10.0)
        self.conn.close()


def steps_in(steps: list[dict[str, Any]], start: float, end: float) -> float | None:
    """The longest broker step (CPU ms, see broker_steps.py) begun in [start, end]."""
    inside = [s["cpu_ms"] for s in steps if start <= s["began"] <= end]
    return max(inside) if inside else None


def latency_stats(lat: list[float]) -> dict[str, float]:
    if not lat:
        return {"calls": 0, "p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0, "over_10ms": 0}
    return {"calls": len(lat), "p50_ms": ms(statistics.median(lat)),
            "p99_ms": ms(lat[min(len(lat) - 1, int(len(lat) * 0.99))]),
            "max_ms": ms(lat[-1]), "over_10ms": sum(1 for x in lat if x > 0.010)}


# --------------------------------------------------------------------------- big frames


def big_payload(scenario: str, scale: float = 1.0) -> tuple[bytes, bool, str]:
    """(frame, authenticate first, what the reply must say) for a scenario; ``scale``
    shrinks the sizes (the smoke test runs at 1%: the replies are then "ok")."""
    big = int(40 * MB * scale)
    if scenario in ("push_40mb", "preauth_40mb"):
        msg: dict[str, Any] = {"cmd": "PUSH", "reqId": "big", "queue": "big-frames",
                               "data": "x" * big}
        expect = "Frame too large before authentication" if scenario == "preauth_40mb" \
            else "Job data too large" if big > 10 * 1024 * 1024 else "ok"
    elif scenario == "push_8_5mb":
        msg = {"cmd": "PUSH", "reqId": "big", "queue": "big-frames",
               "data": "x" * int(8_500_000 * scale), "removeOnComplete": True}
        expect = "ok"
    elif scenario == "pushb_40mb":
        job = {"name": "j", "data": "y" * 10_000}
        msg = {"cmd": "PUSHB", "reqId": "big", "queue": "big-frames-b",
               "jobs": [job] * max(1, int(4000 * scale))}
        expect = "ok"
    elif scenario == "bad_40mb":
        # A msgpack str32 header announcing more bytes than the frame holds.
        body = msgpack.packb({"cmd": "PUSH", "reqId": "big", "queue": "big-frames"})
        payload = body[:-1] + b"\x81\xa4data\xdb" + (big + MB).to_bytes(4, "big") \
            + b"x" * big
        return len(payload).to_bytes(4, "big") + payload, True, "Invalid command format"
    else:
        raise ValueError(f"unknown scenario {scenario!r}")
    payload = msgpack.packb(msg, use_bin_type=True)
    return len(payload).to_bytes(4, "big") + payload, scenario != "preauth_40mb", expect


@dataclass
class Row:
    scenario: str
    run: int
    frame_mb: float
    send_ms: float
    reply_ms: float
    reply: str
    ok: bool
    calls: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    over_10ms: int
    # the broker's longest task step (CPU ms) while the frame was in, with --broker-steps
    step_ms: float | None = None
    started: float = 0.0
    answered: float = 0.0


def read_reply(sock: socket.socket, timeout_s: float) -> dict[str, Any] | None:
    """The first reply frame on ``sock`` (None if the broker closed without one)."""
    sock.settimeout(timeout_s)
    buf = b""
    while True:
        if len(buf) >= 4:
            size = int.from_bytes(buf[:4], "big")
            if len(buf) >= 4 + size:
                reply: dict[str, Any] = msgpack.unpackb(buf[4: 4 + size], raw=False,
                                                        strict_map_key=False)
                return reply
        try:
            chunk = sock.recv(1 << 20)
        except (ConnectionResetError, TimeoutError):
            return None
        if not chunk:
            return None
        buf += chunk


def attack(host: str, port: int, token: str | None, frame: bytes, auth: bool,
           timeout_s: float) -> tuple[float, float, float, dict[str, Any] | None]:
    """Send one big frame; (started, sent, answered, reply)."""
    conn = Conn(host, port, "msgpack", timeout_s)
    try:
        if auth and token:
            conn.call("Auth", token=token)
        sock = conn.sock
        t0 = perf()
        try:
            sock.sendall(frame)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused from its header: the reply is already waiting
        t1 = perf()
        reply = read_reply(sock, timeout_s)
        return t0, t1, perf(), reply
    finally:
        conn.close()


def reply_ok(reply: dict[str, Any] | None, expect: str) -> bool:
    if reply is None:
        return False
    if expect == "ok":
        return reply.get("ok") is True
    return reply.get("ok") is False and expect in str(reply.get("error", ""))


def run_scenario(args: argparse.Namespace, host: str, port: int, probe: Probe,
                 scenario: str, run: int) -> Row:
    frame, auth, expect = big_payload(scenario, args.scale)
    probe.start()
    t0, t1, t2, reply = attack(host, port, args.auth_token, frame, auth, args.time_limit_s)
    probe.stop(after=t2)
    stats = latency_stats(probe.window(t0, t2))
    text = "none" if reply is None else ("ok" if reply.get("ok") else
                                         str(reply.get("error", reply))[:48])
    return Row(scenario, run, round(len(frame) / MB, 1), ms(t1 - t0), ms(t2 - t1), text,
               reply_ok(reply, expect), **stats, started=t0, answered=t2)  # type: ignore[arg-type]


def baseline(probe: Probe, seconds: float) -> Row:
    probe.start()
    t0 = perf()
    time.sleep(seconds)
    t1 = perf()
    probe.stop(after=t1)
    stats = latency_stats(probe.window(t0, t1))
    return Row("baseline", 1, 0.0, 0.0, 0.0, "-", True, **stats,  # type: ignore[arg-type]
               started=t0, answered=t1)


def table(rows: list[Row]) -> str:
    head = (f"{'scenario':<14}{'run':>4}{'MB':>6}{'send ms':>9}{'reply ms':>10}  "
            f"{'reply':<30}{'calls':>7}{'p50':>8}{'p99':>8}{'max':>9}{'>10ms':>6}"
            f"{'step':>8}")
    lines = [head, "-" * len(head)]
    for r in rows:
        flag = "" if r.ok else "  UNEXPECTED"
        step = "-" if r.step_ms is None else r.step_ms
        lines.append(f"{r.scenario:<14}{r.run:>4}{r.frame_mb:>6}{r.send_ms:>9}"
                     f"{r.reply_ms:>10}  {r.reply[:30]:<30}{r.calls:>7}{r.p50_ms:>8}"
                     f"{r.p99_ms:>8}{r.max_ms:>9}{r.over_10ms:>6}{step:>8}{flag}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", help="HOST:PORT of a running broker (default: start one)")
    parser.add_argument("--auth-token", default=None,
                        help="with --target: the broker's token (default: the one set here)")
    parser.add_argument("--scenarios", default="all")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--probe", choices=("ping", "job"), default="ping")
    parser.add_argument("--baseline-s", type=float, default=1.0)
    parser.add_argument("--scale", type=float, default=1.0,
                        help="sizes times this (a smoke test runs 0.01)")
    parser.add_argument("--time-limit-s", type=float, default=60.0)
    parser.add_argument("--broker-arg", action="append", default=[],
                        help="an extra flag for the broker started here (repeatable)")
    parser.add_argument("--broker-steps", action="store_true",
                        help="serve with scripts/broker_steps.py: a column with the "
                             "broker's longest task step (CPU ms) in each row")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    args.scenarios = list(SCENARIOS) if args.scenarios == "all" else args.scenarios.split(",")
    for name in args.scenarios:
        if name not in SCENARIOS:
            parser.error(f"unknown scenario {name!r} (choose from {', '.join(SCENARIOS)})")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    broker: LocalBroker | None = None
    tmp = tempfile.TemporaryDirectory(prefix="bench-big-frames-")
    try:
        if args.target:
            host, port = parse_target(args.target)
        else:
            args.auth_token = TOKEN
            try:
                broker = LocalBroker(
                    str(Path(tmp.name) / "data"), ["--auth-tokens", TOKEN, *args.broker_arg],
                    steps_out=str(Path(tmp.name) / "steps.json") if args.broker_steps
                    else None)
            except RuntimeError as exc:
                print(exc, file=sys.stderr)
                return 2
            host, port = "127.0.0.1", broker.port

        def connect() -> Conn:
            conn = Conn(host, port, "msgpack", args.time_limit_s)
            if args.auth_token:
                conn.call("Auth", token=args.auth_token)
            return conn

        try:
            probe = Probe(connect, args.probe)
        except OSError as exc:
            print(f"cannot reach the broker: {exc}", file=sys.stderr)
            return 2
        rows = [baseline(probe, args.baseline_s)]
        try:
            for run in range(1, args.repeat + 1):
                for scenario in args.scenarios:
                    rows.append(run_scenario(args, host, port, probe, scenario, run))
                    print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
        finally:
            probe.close()
        if broker is not None and args.broker_steps:
            broker.stop()
            steps = broker.steps()
            for row in rows:
                row.step_ms = steps_in(steps, row.started, row.answered)
        print(f"probe: {args.probe}; broker: {'started here' if broker else args.target}"
              f" {' '.join(args.broker_arg)}; latencies in ms")
        print(table(rows))
        if probe.errors:
            print(f"probe errors: {probe.errors[:3]}")
        if args.json:
            Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=1))
        return 0 if all(r.ok for r in rows) and not probe.errors else 1
    finally:
        if broker is not None:
            broker.stop()
        tmp.cleanup()


if __name__ == "__main__":
    sys.exit(main())
