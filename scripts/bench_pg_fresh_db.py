"""What a fresh PostgreSQL database per test costs (the ``pg_dsn`` fixture): CREATE
DATABASE from template0 and DROP DATABASE, on a server from trioqueue.testing.postgres,
with each copy strategy PostgreSQL 15 offers.

    python scripts/bench_pg_fresh_db.py [--rounds 40] [--fast]

Prints, per strategy, the median and 90th percentile of a create and of a drop in ms
(rounds interleave the strategies).
"""

from __future__ import annotations

import argparse
import statistics
import time

from trioqueue.testing.postgres import PostgresServer


def _ms(samples: list[float]) -> str:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return f"median {statistics.median(ordered) * 1000:6.1f} ms  p90 {p90 * 1000:6.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--fast", action="store_true", help="fsync etc. off")
    args = parser.parse_args()
    with PostgresServer(fast=args.fast) as server:
        from psycopg import connect

        with connect(server.admin_dsn, autocommit=True) as conn:
            strategies = {
                "fixture (WAL_LOG)": (server.create_database, server.drop_database),
                "FILE_COPY": (lambda name: conn.execute(
                    f"CREATE DATABASE {name} TEMPLATE template0 STRATEGY FILE_COPY"),
                    server.drop_database),
            }
            made: dict[str, list[float]] = {label: [] for label in strategies}
            dropped: dict[str, list[float]] = {label: [] for label in strategies}
            # Rounds interleave the strategies, so a machine busy for a while weighs on
            # each alike.
            for round_ in range(args.rounds):
                for label, (create, drop) in strategies.items():
                    name = f"bench_fresh_{round_}"
                    start = time.perf_counter()
                    create(name)
                    made[label].append(time.perf_counter() - start)
                    start = time.perf_counter()
                    drop(name)
                    dropped[label].append(time.perf_counter() - start)
            for label in strategies:
                print(f"{label:20} create {_ms(made[label])}   drop {_ms(dropped[label])}")

if __name__ == "__main__":
    main()
