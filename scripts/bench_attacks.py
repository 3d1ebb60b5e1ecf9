#!/usr/bin/env python3
"""A healthy client's latency alone, then while each attack of issue 12 runs.

A broker is started here (``python -m trioqueue serve``, temporary LMDB store, auth on
with one token, default limits; or ``--target HOST:PORT --auth-token T``). The healthy
client does PUSH, PULL (timeout 0) and ACK round trips on its own queue, on one socket,
for ``--window-s`` or ``--max-calls``; each call's latency is one sample. It runs alone
(the baseline), then once per attack while the attack runs in a process of its own
(``--attacker NAME``, so that it does not share this process's GIL), stopped by its pid
afterwards. Attacks (``--attacks``, comma-separated):

    big_auth       an authenticated client sends PUSH frames of 40 MB (data over the
                   10 MB limit) back to back
    big_auth_8mb   the same with 8.5 MB of data, accepted and stored (then deleted)
    big_preauth    clients send the 40 MB PUSH frame before Auth, reconnecting each time
    half_sent      200 connections send half of a 16 KiB frame before Auth and stop, and
                   16 authenticated ones 20 MB of a 60 MB frame (over the 256 MiB budget)
    no_read        8 authenticated clients ask for 200 KB replies and never read them
    idle_flood     2,000 connections (half authenticated) that send nothing more
    malformed      4 clients send malformed frames as fast as they can, reading replies

Printed: baseline p99, p99 under each attack, the bound 2 x baseline p99 + 2 ms, pass or
fail, max and calls, the broker's resident memory after the attack, what the attacker
did, and with ``--broker-steps`` the broker's longest task step in the window, in CPU
time (``broker_steps.py``: what the host's scheduling cannot inflate). Every loop is
bounded by a count and ``--time-limit-s``.

    python scripts/bench_attacks.py [--attacks all] [--repeat 1] [--window-s 4]
        [--json out.json] [--broker-steps] [--broker-arg=FLAG ...]
        [--target HOST:PORT --auth-token T --broker-pid PID]

Exit status 0 when every attack passed, 1 when one failed, 2 when the broker cannot be
started or reached.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import Conn, parse_target  # noqa: E402
from bench_attackers import ATTACKS, run_attacker  # noqa: E402
from bench_big_frames import TOKEN, LocalBroker, steps_in  # noqa: E402

perf = time.perf_counter


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def healthy_run(host: str, port: int, token: str | None, window_s: float, max_calls: int,
                io_timeout_s: float) -> tuple[list[float], list[str]]:
    """PUSH, PULL, ACK on a queue of its own until the window ends; latencies (s)."""
    conn = Conn(host, port, "msgpack", io_timeout_s)
    errors: list[str] = []
    lat: list[float] = []
    try:
        if token:
            conn.call("Auth", token=token)
        queue = f"healthy-{secrets.token_hex(4)}"
        end = perf() + window_s
        while perf() < end and len(lat) < max_calls and len(errors) < 20:
            t0 = perf()
            pushed = conn.call("PUSH", queue=queue, data={"n": len(lat)})
            t1 = perf()
            pulled = conn.call("PULL", queue=queue, timeout=0, owner="healthy")
            t2 = perf()
            job = pulled.get("job")
            if pushed.get("ok") is not True or not isinstance(job, dict):
                errors.append(f"{pushed!r} {pulled!r}"[:200])
                continue
            acked = conn.call("ACK", id=job["id"], token=pulled.get("token"))
            t3 = perf()
            if acked.get("ok") is not True:
                errors.append(repr(acked)[:200])
            lat += [t1 - t0, t2 - t1, t3 - t2]
    except (OSError, ConnectionError) as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        conn.close()
    return lat, errors


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def rss_mb(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


@dataclass
class Row:
    attack: str
    run: int
    calls: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    bound_ms: float
    passed: bool
    rss_mb: float | None
    attacker: str
    errors: int
    # the broker's longest task step (CPU ms) in the window, with --broker-steps
    step_ms: float | None = None
    started: float = 0.0
    ended: float = 0.0


class Attacker:
    """``bench_attacks.py --attacker NAME`` as a process of its own."""

    def __init__(self, name: str, host: str, port: int, token: str, limit_s: float) -> None:
        script = Path(__file__).resolve()
        self.proc = subprocess.Popen(
            [sys.executable, str(script), "--attacker", name, "--target", f"{host}:{port}",
             "--auth-token", token, "--time-limit-s", str(limit_s)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def wait_ready(self, timeout_s: float) -> bool:
        """The attacker prints one line when its attack is under way."""
        assert self.proc.stdout is not None
        os.set_blocking(self.proc.stdout.fileno(), True)
        deadline = perf() + timeout_s
        while perf() < deadline and self.proc.poll() is None:
            line = self.proc.stdout.readline()
            if line.strip() == "ready":
                return True
        return False

    def stop(self, timeout_s: float = 15.0) -> str:
        """SIGTERM (it prints what it did), SIGKILL if it does not exit; by pid."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            out, _ = self.proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate(timeout=timeout_s)
        lines = [line for line in (out or "").splitlines() if line.startswith("{")]
        return lines[-1] if lines else "{}"


def measure(args: argparse.Namespace, host: str, port: int, pid: int | None, name: str,
            run: int, bound_ms: float | None) -> tuple[Row, list[float]]:
    attacker = None
    info = "-"
    if name != "baseline":
        attacker = Attacker(name, host, port, args.auth_token, args.time_limit_s)
        if not attacker.wait_ready(args.time_limit_s):
            info = "attacker not ready; " + attacker.stop()
            return Row(name, run, 0, 0, 0, 0, bound_ms or 0, False, rss_mb(pid), info, 1), []
    started = perf()
    try:
        lat, errors = healthy_run(host, port, args.auth_token, args.window_s,
                                  args.max_calls, args.time_limit_s)
    finally:
        ended = perf()
        if attacker is not None:
            info = attacker.stop()
    p99 = ms(pct(lat, 0.99))
    bound = bound_ms if bound_ms is not None else 2 * p99 + 2
    row = Row(name, run, len(lat), ms(pct(lat, 0.5)), p99, ms(max(lat, default=0)),
              round(bound, 2), bool(lat) and not errors and p99 <= bound, rss_mb(pid),
              info, len(errors), started=started, ended=ended)
    return row, lat


def table(rows: list[Row]) -> str:
    head = (f"{'attack':<14}{'run':>4}{'calls':>7}{'p50':>8}{'p99':>8}{'bound':>8}"
            f"{'max':>9}  {'result':<6}{'rss MB':>8}{'step':>8}  attacker")
    lines = [head, "-" * 108]
    for r in rows:
        result = "-" if r.attack == "baseline" else ("pass" if r.passed else "FAIL")
        step = "-" if r.step_ms is None else r.step_ms
        lines.append(f"{r.attack:<14}{r.run:>4}{r.calls:>7}{r.p50_ms:>8}{r.p99_ms:>8}"
                     f"{r.bound_ms:>8}{r.max_ms:>9}  {result:<6}{r.rss_mb or '-':>8}"
                     f"{step:>8}  {r.attacker[:80]}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attacks", default="all")
    parser.add_argument("--attacker", help=argparse.SUPPRESS)  # run one attack (child)
    parser.add_argument("--target")
    parser.add_argument("--auth-token")
    parser.add_argument("--broker-pid", type=int)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--window-s", type=float, default=4.0)
    parser.add_argument("--max-calls", type=int, default=60_000)
    parser.add_argument("--time-limit-s", type=float, default=60.0)
    parser.add_argument("--broker-steps", action="store_true",
                        help="serve with scripts/broker_steps.py: a column with the "
                             "broker's longest task step (CPU ms) in each window")
    parser.add_argument("--broker-arg", action="append", default=[],
                        help="a flag for the broker started here (repeatable), e.g. "
                             "--broker-arg=--heap-keep-bytes --broker-arg=0")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    names = list(ATTACKS) if args.attacks == "all" else args.attacks.split(",")
    for name in names:
        if name not in ATTACKS:
            parser.error(f"unknown attack {name!r} (choose from {', '.join(ATTACKS)})")
    args.attacks = names
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.attacker:
        host, port = parse_target(args.target)
        return run_attacker(args.attacker, host, port, args.auth_token, args.time_limit_s)
    broker = None
    tmp = tempfile.TemporaryDirectory(prefix="bench-attacks-")
    try:
        if args.target:
            host, port = parse_target(args.target)
            pid = args.broker_pid
        else:
            args.auth_token = TOKEN
            try:
                # Every attacker connects from 127.0.0.1: the per-address cap would turn
                # the idle flood's 2,000 connections away before they reach the broker.
                broker = LocalBroker(
                    str(Path(tmp.name) / "data"), ["--auth-tokens", TOKEN,
                                                   "--max-connections-per-address", "0",
                                                   *args.broker_arg],
                    steps_out=str(Path(tmp.name) / "steps.json") if args.broker_steps
                    else None)
            except RuntimeError as exc:
                print(exc, file=sys.stderr)
                return 2
            host, port, pid = "127.0.0.1", broker.port, broker.pid
        rows: list[Row] = []
        for run in range(1, args.repeat + 1):
            base, _ = measure(args, host, port, pid, "baseline", run, None)
            rows.append(base)
            print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
            if not base.calls:
                print("the healthy client got no answer", file=sys.stderr)
                return 2
            bound = 2 * base.p99_ms + 2
            for name in args.attacks:
                row, _ = measure(args, host, port, pid, name, run, bound)
                rows.append(row)
                print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
        if broker is not None and args.broker_steps:
            broker.stop()
            steps = broker.steps()
            for row in rows:
                row.step_ms = steps_in(steps, row.started, row.ended)
        print(f"healthy: PUSH, PULL, ACK round trips, {args.window_s:g} s per row; bound = "
              "2 x the run's baseline p99 + 2 ms; latencies in ms")
        print(table(rows))
        if args.json:
            Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=1))
        attacks = [r for r in rows if r.attack != "baseline"]
        return 0 if all(r.passed for r in attacks) else 1
    finally:
        if broker is not None:
            broker.stop()
        tmp.cleanup()


if __name__ == "__main__":
    sys.exit(main())
