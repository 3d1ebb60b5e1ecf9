#!/usr/bin/env python3
"""What the HTTP port costs beside TCP: the same jobs pushed, pulled and acknowledged one
request at a time over REST (httpx, one kept-alive connection) and over TCP (msgpack,
one connection), plus a bulk push, the health probe and the Prometheus scrape.

A broker is started here (``python -m trioqueue serve``, temporary LMDB store, fsync
interval). Rows (each ``--jobs`` requests, bounded by ``--max-s`` seconds a row):

    push          POST /queues/q/jobs            | TCP PUSH
    pull_ack      POST .../pull-batch + POST /jobs/{id}/ack (owner token) | PULL + ACK
    bulk_100      POST /queues/q/jobs/bulk, 100 jobs a request | PUSHB of 100
    health        GET /health
    prometheus    GET /prometheus

    python scripts/bench_http.py [--jobs 2000] [--max-s 30]

The table gives each row's requests per second and p50 / p99 latency in ms, and for
the rows both transports have, HTTP's time per request over TCP's. Run it beside
itself (a noisy machine: compare the ratio, not the absolute numbers).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import Conn  # noqa: E402
from bench_big_frames import LocalBroker  # noqa: E402

# name, transport, req/s, p50 ms, p99 ms, the broker's CPU per request (us)
Row = tuple[str, str, float, float, float, float]
BROKER_PID = 0


def cpu_s(pid: int) -> float:
    """The process's user + system CPU so far (/proc/PID/stat, clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0


def timed(count: int, max_s: float, step: Callable[[int], None]) -> tuple[list[float], float]:
    """Run ``step(i)`` up to ``count`` times (stopping after ``max_s``): each time in ms,
    and the broker's CPU seconds meanwhile."""
    times: list[float] = []
    cpu_before = cpu_s(BROKER_PID)
    deadline = time.perf_counter() + max_s
    for i in range(count):
        start = time.perf_counter()
        step(i)
        end = time.perf_counter()
        times.append((end - start) * 1000)
        if end > deadline:
            break
    return times, cpu_s(BROKER_PID) - cpu_before


def summary(name: str, transport: str, run: tuple[list[float], float]) -> Row:
    times, cpu = run
    ordered = sorted(times)
    p50 = ordered[len(ordered) // 2]
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (name, transport, len(times) / (sum(times) / 1000), p50, p99,
            cpu / len(times) * 1e6)


def http_rows(http: httpx.Client, jobs: int, max_s: float) -> list[Row]:
    def push(i: int) -> None:
        reply = http.post("/queues/h/jobs", json={"name": "n", "data": {"i": i}})
        assert reply.status_code == 200, reply.text

    def pull_ack(i: int) -> None:
        pulled = http.post("/queues/h/jobs/pull-batch", json={"count": 1, "owner": "w"})
        body = pulled.json()
        assert body["jobs"], body
        acked = http.post(f"/jobs/{body['jobs'][0]['id']}/ack",
                          json={"result": i, "token": body["tokens"][0]})
        assert acked.status_code == 200, acked.text

    batch = [{"name": "n", "data": {"i": i}} for i in range(100)]

    def bulk(i: int) -> None:
        assert http.post("/queues/hb/jobs/bulk", json={"jobs": batch}).status_code == 200

    def health(i: int) -> None:
        assert http.get("/health").status_code == 200

    def prometheus(i: int) -> None:
        assert http.get("/prometheus").status_code == 200

    return [summary("push", "http", timed(jobs, max_s, push)),
            summary("pull_ack", "http", timed(jobs, max_s, pull_ack)),
            summary("bulk_100", "http", timed(max(1, jobs // 100), max_s, bulk)),
            summary("health", "http", timed(jobs, max_s, health)),
            summary("prometheus", "http", timed(min(jobs, 500), max_s, prometheus))]


def tcp_rows(conn: Conn, jobs: int, max_s: float) -> list[Row]:
    def push(i: int) -> None:
        assert conn.call("PUSH", queue="t", name="n", data={"i": i})["ok"]

    def pull_ack(i: int) -> None:
        job = conn.call("PULL", queue="t", owner="w")
        reply = conn.call("ACK", id=job["job"]["id"], result=i, token=job["token"])
        assert reply["ok"], reply

    batch = [{"name": "n", "data": {"i": i}} for i in range(100)]

    def bulk(i: int) -> None:
        assert conn.call("PUSHB", queue="tb", jobs=batch)["ok"]

    return [summary("push", "tcp", timed(jobs, max_s, push)),
            summary("pull_ack", "tcp", timed(jobs, max_s, pull_ack)),
            summary("bulk_100", "tcp", timed(max(1, jobs // 100), max_s, bulk))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--max-s", type=float, default=30.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data:
        broker = LocalBroker(data, [])
        global BROKER_PID
        BROKER_PID = broker.pid
        try:
            found = re.search(rb" ws [^ ]+:(\d+)", broker.tail)
            assert found, broker.tail
            base = f"http://127.0.0.1:{int(found.group(1))}"
            with httpx.Client(base_url=base, timeout=10) as http:
                rows = http_rows(http, args.jobs, args.max_s)
            conn = Conn("127.0.0.1", broker.port, "msgpack", io_timeout=10)
            try:
                rows += tcp_rows(conn, args.jobs, args.max_s)
            finally:
                conn.close()
        finally:
            broker.stop()
    tcp = {name: p50 for name, transport, _, p50, _, _ in rows if transport == "tcp"}
    print(f"{'row':<12} {'transport':<9} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'broker us/req':>14} {'http/tcp p50':>13}")
    for name, transport, rate, p50, p99, cpu_us in rows:
        ratio = f"{p50 / tcp[name]:.1f}x" if transport == "http" and name in tcp else ""
        print(f"{name:<12} {transport:<9} {rate:>9.0f} {p50:>8.3f} {p99:>8.3f} "
              f"{cpu_us:>14.0f} {ratio:>13}")


if __name__ == "__main__":
    main()
