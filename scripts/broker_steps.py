#!/usr/bin/env python3
"""``trioqueue serve`` with a trio Instrument that records the broker's long task steps.

A step is what one task runs between two checkpoints, during which no other task runs:
its length is how long the broker held everyone else. It is measured in the thread's
CPU time (``time.thread_time``), which the host's scheduling does not inflate, beside
the wall time. Every step of at least ``--min-ms`` CPU milliseconds is kept, with when
it began (``time.perf_counter``: CLOCK_MONOTONIC, the clock the bench scripts read, so
they can tell which of their rows a step fell in), and written as JSON to
``--steps-out`` when the broker stops.

    python scripts/broker_steps.py --steps-out steps.json [--min-ms 2] serve [serve flags]

The bench scripts start it with ``--broker-steps``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

import trio

from trioqueue.cli import build_parser, config_from
from trioqueue.server import serve


class StepClock(trio.abc.Instrument):
    def __init__(self, min_s: float) -> None:
        self.min_s = min_s
        self.started = 0.0
        self.cpu = time.thread_time()
        self.steps: list[tuple[float, float, float, str]] = []  # began, wall, cpu, task

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.started = time.perf_counter()
        self.cpu = time.thread_time()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        cpu = time.thread_time() - self.cpu
        if cpu >= self.min_s:
            self.steps.append((self.started, time.perf_counter() - self.started, cpu,
                               task.name.rsplit(".", 1)[-1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps-out", required=True)
    parser.add_argument("--min-ms", type=float, default=2.0)
    ours, rest = parser.parse_known_args(argv)
    args = build_parser().parse_args(rest)
    config = config_from(args, os.environ)
    config.validate()
    clock = StepClock(ours.min_ms / 1000)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        trio.run(serve, config, None, instruments=[clock])
    finally:
        Path(ours.steps_out).write_text(json.dumps([
            {"began": began, "wall_ms": round(wall * 1000, 2),
             "cpu_ms": round(cpu * 1000, 2), "task": name}
            for began, wall, cpu, name in clock.steps]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
