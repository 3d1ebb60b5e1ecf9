#!/usr/bin/env python3
"""Whether reads of finished jobs stay fast on PostgreSQL at a million jobs.

Finished jobs live in PostgreSQL and are read when asked for (GetJobs of completed or
failed jobs, counts, a job by id); live jobs are in the broker's memory and cost the
same as on LMDB. This fills ``--jobs`` completed jobs of queue ``big`` straight through
the store (``PgStorage.apply``, 1,000 a batch: the rows a broker would write), runs
``VACUUM ANALYZE`` as autovacuum would, starts ``trioqueue serve --storage`` on it (the
time to ready is the restart's), then times over TCP, ``--repeat`` times each:

    counts            GetJobCounts big
    page 0            GetJobs completed, 50 from offset 0 (ascending, then descending)
    page middle       ... from offset jobs/2
    page last         ... from offset jobs-50
    job by id         GetJob (a finished job: the router looks up its queue off-thread)
    state by id       GetState

    python scripts/bench_pg_finished.py [--jobs 1000000] [--repeat 5] [--dsn URL]

Without ``--dsn`` a throwaway PostgreSQL server is started from the installed binaries
(trioqueue.testing.postgres) and removed at the end; every loop is bounded by a count
and the broker is stopped by its pid.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import Conn  # noqa: E402
from bench_big_frames import LocalBroker  # noqa: E402

from trioqueue.core.job import JobRecord  # noqa: E402
from trioqueue.core.writes import Writes  # noqa: E402

BATCH = 1000


def fill(dsn: str, jobs: int) -> list[str]:
    """``jobs`` completed jobs of queue ``big`` with a result each; their ids in order."""
    from trioqueue.storage.pg.store import PgStorage

    store = PgStorage(dsn)
    ids: list[str] = []
    started = time.perf_counter()
    try:
        for start in range(0, jobs, BATCH):
            writes = Writes()
            for i in range(start, min(jobs, start + BATCH)):
                job_id = f"job-{i:09d}"
                record = JobRecord(id=job_id, queue="big", state="completed",
                                   created_at=1_700_000_000_000 + i,
                                   data={"i": i, "to": f"user{i}@example.com"}).to_record()
                writes.finish_job(record, True, {"sent": True})
                ids.append(job_id)
            store.apply([writes])
    finally:
        store.close()
    rate = jobs / (time.perf_counter() - started)
    print(f"filled {jobs:,} completed jobs in batches of {BATCH} ({rate:,.0f} jobs/s)")
    return ids


def vacuum(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE tq_finished")


def timed(call: Callable[[], Any], repeat: int) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), max(times)


def measure(port: int, ids: list[str], repeat: int) -> list[tuple[str, float, float]]:
    conn = Conn("127.0.0.1", port, "msgpack", 30.0)
    jobs = len(ids)

    def page(offset: int, asc: bool) -> Callable[[], Any]:
        def call() -> None:
            reply = conn.call("GetJobs", queue="big", state="completed", offset=offset,
                              limit=50, asc=asc)
            assert reply.get("ok") and len(reply["jobs"]) == min(50, jobs - offset), reply
        return call

    def counts() -> None:
        reply = conn.call("GetJobCounts", queue="big")
        assert reply["counts"]["completed"] == jobs, reply

    middle = ids[jobs // 2]
    rows = [("counts", counts)]
    for name, offset in (("page 0", 0), ("page middle", jobs // 2),
                         ("page last", max(0, jobs - 50))):
        rows.append((f"{name} asc", page(offset, True)))
        rows.append((f"{name} desc", page(offset, False)))
    rows.append(("job by id", lambda: conn.call("GetJob", id=middle)["job"]["id"]))
    rows.append(("state by id", lambda: conn.call("GetState", id=middle)["state"]))
    return [(name, *timed(call, repeat)) for name, call in rows]


def run(dsn: str, jobs: int, repeat: int) -> None:
    ids = fill(dsn, jobs)
    vacuum(dsn)
    with tempfile.TemporaryDirectory() as unused:
        started = time.perf_counter()
        broker = LocalBroker(unused, ["--storage", dsn], timeout_s=600)
        ready_s = time.perf_counter() - started
        try:
            rows = measure(broker.port, ids, repeat)
        finally:
            broker.stop()
    print(f"\nbroker ready on {jobs:,} finished jobs in {ready_s:.2f} s\n")
    print(f"{'call':<18} {'median ms':>10} {'worst ms':>9}")
    print(f"{'-' * 18} {'-' * 10} {'-' * 9}")
    for name, median, worst in rows:
        print(f"{name:<18} {median:>10.2f} {worst:>9.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dsn", help="an empty database (default: a throwaway server)")
    args = parser.parse_args()
    if args.jobs < 1 or args.repeat < 1:
        parser.error("--jobs and --repeat must be positive")
    if args.dsn:
        run(args.dsn, args.jobs, args.repeat)
        return
    from trioqueue.testing.postgres import PostgresServer

    with PostgresServer() as server:
        dsn = server.create_database("bench_finished")
        run(dsn, args.jobs, args.repeat)


if __name__ == "__main__":
    main()
