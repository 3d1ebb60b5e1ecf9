#!/usr/bin/env python3
"""Whether the dashboard stays usable at scale: the REST calls its pages make, timed
against a broker holding ``--queues`` queues and ``--jobs`` jobs in one queue.

A broker is started here (``python -m trioqueue serve``, temporary LMDB store, fsync
never). It is filled over TCP (PUSHB of 1,000), then each call below is made
``--repeat`` times over one kept-alive HTTP connection; the table gives its median and
worst time and the size of its answer:

    overview          GET /dashboard, GET /stats                  (the overview)
    queues page       GET /dashboard/queues?limit=50&offset=...   (the last page)
    row counts        GET /queues/<q>/counts                      (one per table row)
    first page        GET /queues/big/jobs/list?state=waiting&limit=50&offset=0
    deepest page      ... &offset=<jobs - 50>                      (the last page)
    job by id         GET /jobs/<id>

    python scripts/bench_dashboard.py [--jobs 1000000] [--queues 1000] [--repeat 5]

Every loop is bounded by a count; the broker is stopped by its pid.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import Conn  # noqa: E402
from bench_big_frames import LocalBroker  # noqa: E402

BATCH = 1000


def fill(conn: Conn, jobs: int, queues: int) -> str:
    """``jobs`` jobs in queue ``big`` and one in each of ``queues - 1`` others; the id of
    the last job pushed to ``big``."""
    last = ""
    for start in range(0, jobs, BATCH):
        batch = [{"name": "n", "data": {"i": i}} for i in range(start, min(jobs, start + BATCH))]
        reply = conn.call("PUSHB", queue="big", jobs=batch)
        assert reply.get("ok"), reply
        last = reply["ids"][-1]
    for n in range(queues - 1):
        assert conn.call("PUSH", queue=f"q{n:05d}", name="n", data={})["ok"]
    return last


def timed(http: httpx.Client, path: str, repeat: int) -> tuple[float, float, int]:
    """(median ms, worst ms, bytes) of ``repeat`` GETs of ``path``."""
    times: list[float] = []
    size = 0
    for _ in range(repeat):
        start = time.perf_counter()
        response = http.get(path)
        times.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, (path, response.status_code, response.text[:200])
        size = len(response.content)
    return statistics.median(times), max(times), size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--queues", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data:
        broker = LocalBroker(data, ["--fsync", "never"], timeout_s=60)
        try:
            found = re.search(rb" ws [^ ]+:(\d+)", broker.tail)
            assert found, broker.tail
            conn = Conn("127.0.0.1", broker.port, "msgpack", io_timeout=120)
            started = time.perf_counter()
            try:
                last = fill(conn, args.jobs, args.queues)
            finally:
                conn.close()
            fill_s = time.perf_counter() - started
            deepest = max(0, args.jobs - 50)
            last_queues = max(0, args.queues - 50)
            calls: list[tuple[str, Callable[[], str]]] = [
                ("overview", lambda: "/dashboard"),
                ("overview stats", lambda: "/stats"),
                ("queues page", lambda: f"/dashboard/queues?limit=50&offset={last_queues}"),
                ("row counts", lambda: "/queues/big/counts"),
                ("first page", lambda: "/queues/big/jobs/list?state=waiting&limit=50&offset=0"),
                ("deepest page", lambda: "/queues/big/jobs/list?state=waiting&limit=50"
                                         f"&offset={deepest}"),
                ("job by id", lambda: f"/jobs/{last}"),
            ]
            with httpx.Client(base_url=f"http://127.0.0.1:{int(found.group(1))}",
                              timeout=120) as http:
                rows = [(name, *timed(http, path(), args.repeat)) for name, path in calls]
        finally:
            broker.stop()
    print(f"filled {args.jobs:,} jobs in one queue and {args.queues:,} queues in "
          f"{fill_s:.1f} s")
    print(f"{'call':<16} {'median ms':>10} {'worst ms':>10} {'bytes':>10}")
    for name, median, worst, size in rows:
        print(f"{name:<16} {median:>10.2f} {worst:>10.2f} {size:>10,}")


if __name__ == "__main__":
    main()
