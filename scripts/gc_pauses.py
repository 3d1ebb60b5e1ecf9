#!/usr/bin/env python3
"""The pause of a full-collection pass (gc_passes.FullCollections) with many live jobs.

An in-process broker on the memory store, with the standalone broker's GC policy
(``tune_gc``), is given ``--jobs`` jobs (PUSHB 1000, through a real ``Session``, as
``mem_scale.py`` does). Then it times, on the CPU clock of this one thread:

- with ``--passes``, the passes that ran during the push (as ``serve`` runs them: every
  ``gc_full_interval_s``, or sooner after ``gc_full_after_young_objects``), their count
  and the longest;
- a pass after the push: without ``--passes``, it traverses every job made since the
  start (what one pass would cost after such a burst if passes came only by the clock);
- a second pass at once: the jobs are frozen now, so it looks at almost nothing;
- a pass after ``--more`` jobs more: what a pass costs for one interval's new jobs;
- for comparison, a full collection with nothing frozen (``gc.unfreeze`` first): what
  every pass would cost without the freezing.

    python scripts/gc_pauses.py [--jobs 1000000] [--more 10000] [--passes]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

import trio

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mem_scale import Driver  # noqa: E402

from trioqueue.actors.broker import Broker  # noqa: E402
from trioqueue.config import Config  # noqa: E402
from trioqueue.server.gc_passes import FullCollections  # noqa: E402
from trioqueue.server.run import tune_gc  # noqa: E402


class CpuTimed(FullCollections):
    """The passes, with the CPU time of the longest (wall time counts a shared host's
    other processes too)."""

    __slots__ = ("longest_cpu_s",)

    def __init__(self, interval_s: float, after_objects: int) -> None:
        super().__init__(interval_s, after_objects)
        self.longest_cpu_s = 0.0

    def collect(self) -> int:
        started = time.thread_time()
        found = super().collect()
        self.longest_cpu_s = max(self.longest_cpu_s, time.thread_time() - started)
        return found


def timed(passes: FullCollections) -> str:
    started = time.thread_time()
    found = passes.collect()
    cpu = time.thread_time() - started
    return (f"{passes.last_pause_s * 1000:8.1f} ms wall {cpu * 1000:8.1f} ms CPU, "
            f"{found} unreachable, {gc.get_freeze_count():,} frozen")


async def main(jobs: int, more: int, running: bool) -> None:
    config = Config(memory=True)
    tune_gc(config)
    passes = CpuTimed(config.gc_full_interval_s, config.gc_full_after_young_objects)
    async with trio.open_nursery() as nursery:
        broker = Broker(config)
        await nursery.start(broker.run)
        driver = Driver(broker)
        started = time.perf_counter()
        if running:
            nursery.start_soon(passes.run)
        await driver.push(jobs)
        print(f"{jobs:,} jobs pushed in {time.perf_counter() - started:.0f} s")
        if running:
            print(f"passes during the push: {passes.passes}, longest "
                  f"{passes.longest_pause_s * 1000:.1f} ms wall, "
                  f"{passes.longest_cpu_s * 1000:.1f} ms CPU")
        print(f"a pass now, {jobs:,} jobs made: {timed(passes)}")
        print(f"another pass at once: {timed(passes)}")
        await driver.push(more)
        print(f"a pass after {more:,} jobs more: {timed(passes)}")
        gc.unfreeze()
        started = time.thread_time()
        gc.collect()
        print(f"full collection with nothing frozen: "
              f"{(time.thread_time() - started) * 1000:8.1f} ms CPU")
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--more", type=int, default=10_000)
    parser.add_argument("--passes", action="store_true",
                        help="run the passes (every gc_full_interval_s, or sooner after "
                             "gc_full_after_young_objects) during the push")
    args = parser.parse_args()
    trio.run(main, args.jobs, args.more, args.passes)
