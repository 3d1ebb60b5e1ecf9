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

With ``--stacks-after-ms T``, a timer signal (``ITIMER_REAL``) is armed at the start of
every step and fires T ms into it, then every 1 ms while the step lasts; each time, the
Python stack that is running is counted. The handler runs between two bytecodes, so a
long call into C (a commit, an encode) is counted at the Python line that made it.
``--stacks-out`` then gets, per task kind, the stacks seen inside long steps, most
often first: where the broker's slow steps spend their time, without guessing.

    python scripts/broker_steps.py --steps-out s.json --stacks-after-ms 8 \
        --stacks-out stacks.txt serve --tcp-port 6789 ...

With ``--passes-out``, every pass of trio's loop of at least ``--pass-min-ms`` (default
3) wall milliseconds is written there too: when it began, its wall and CPU time, and
per task the steps it ran in it and their CPU time. A request crosses a pass or two
before its reply is written, so these say whose work another queue's client waited on.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from types import FrameType

import trio

from trioqueue.cli import build_parser, config_from
from trioqueue.server.run import serve


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


class PassClock(trio.abc.Instrument):
    """Every pass of trio's loop (the steps run between two polls of the sockets) of at
    least ``min_s`` wall time: when it began, its wall and CPU time, and the CPU time of
    its steps per task. A client's request and reply each wait for a pass or two, so
    this says which tasks another queue's client waited for. A pass whose wall time is
    far over its CPU time was off the CPU: ``vcsw`` counts the thread's voluntary
    context switches in it (it blocked in the kernel: a write, a fault on the disk),
    ``ivcsw`` the involuntary ones (another thread or the host took the core), with
    its system time and page faults (``getrusage(RUSAGE_THREAD)``, one call a pass)."""

    def __init__(self, min_s: float) -> None:
        self.min_s = min_s
        self.passes: list[dict[str, object]] = []
        self._wall = time.perf_counter()
        self._cpu = time.thread_time()
        self._usage = resource.getrusage(resource.RUSAGE_THREAD)
        self._step_cpu = 0.0
        self._tasks: dict[str, list[float]] = {}

    def after_io_wait(self, timeout: float) -> None:
        self._wall = time.perf_counter()
        self._cpu = time.thread_time()
        self._usage = resource.getrusage(resource.RUSAGE_THREAD)
        self._tasks = {}

    def before_io_wait(self, timeout: float) -> None:
        wall = time.perf_counter() - self._wall
        if wall >= self.min_s:
            was, now = self._usage, resource.getrusage(resource.RUSAGE_THREAD)
            self.passes.append({
                "began": self._wall, "wall_ms": round(wall * 1000, 2),
                "cpu_ms": round((time.thread_time() - self._cpu) * 1000, 2),
                "sys_ms": round((now.ru_stime - was.ru_stime) * 1000, 2),
                "vcsw": now.ru_nvcsw - was.ru_nvcsw, "ivcsw": now.ru_nivcsw - was.ru_nivcsw,
                "minflt": now.ru_minflt - was.ru_minflt,
                "majflt": now.ru_majflt - was.ru_majflt,
                "tasks": {name: [int(n), round(cpu * 1000, 2)]
                          for name, (n, cpu) in self._tasks.items()}})

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._step_cpu = time.thread_time()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        row = self._tasks.setdefault(task.name.rsplit(".", 1)[-1], [0, 0.0])
        row[0] += 1
        row[1] += time.thread_time() - self._step_cpu


class StackSampler(trio.abc.Instrument):
    """Counts the stacks running ``after_s`` into a step, then every millisecond."""

    def __init__(self, after_s: float) -> None:
        self.after_s = after_s
        self.task = ""
        self._busy = False
        self.stacks: Counter[tuple[str, tuple[str, ...]]] = Counter()
        signal.signal(signal.SIGALRM, self._sample)

    def _sample(self, signum: int, frame: FrameType | None) -> None:
        # Cheap and never raising: it runs inside whatever the broker was doing (trio's
        # own code included), and must not be re-entered by the next tick.
        if self._busy:
            return
        self._busy = True
        try:
            lines: list[str] = []
            while frame is not None and len(lines) < 14:
                code = frame.f_code
                lines.append(f"{Path(code.co_filename).name}:{frame.f_lineno} {code.co_name}")
                frame = frame.f_back
            self.stacks[(self.task, tuple(reversed(lines)))] += 1
        except BaseException:  # noqa: S110 - a lost sample, never a broken broker
            pass
        finally:
            self._busy = False

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.task = task.name.rsplit(".", 1)[-1]
        signal.setitimer(signal.ITIMER_REAL, self.after_s, 0.001)

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)

    def text(self) -> str:
        by_task: dict[str, list[tuple[int, tuple[str, ...]]]] = {}
        for (task, lines), n in self.stacks.items():
            by_task.setdefault(task, []).append((n, lines))
        out = []
        for task, rows in sorted(by_task.items(), key=lambda kv: -sum(n for n, _ in kv[1])):
            out.append(f"== {task}: {sum(n for n, _ in rows)} samples")
            for n, lines in sorted(rows, reverse=True)[:12]:
                out.append(f"-- {n}")
                out.extend("   " + line for line in lines)
        return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps-out", required=True)
    parser.add_argument("--min-ms", type=float, default=2.0)
    parser.add_argument("--stacks-after-ms", type=float, default=0.0)
    parser.add_argument("--stacks-out", default=None)
    parser.add_argument("--passes-out", default=None)
    parser.add_argument("--pass-min-ms", type=float, default=3.0)
    ours, rest = parser.parse_known_args(argv)
    args = build_parser().parse_args(rest)
    config = config_from(args, os.environ)
    config.validate()
    clock = StepClock(ours.min_ms / 1000)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    instruments: list[trio.abc.Instrument] = [clock]
    sampler = None
    passes = PassClock(ours.pass_min_ms / 1000) if ours.passes_out else None
    if passes is not None:
        instruments.append(passes)
    if ours.stacks_after_ms > 0:
        sampler = StackSampler(ours.stacks_after_ms / 1000)
        instruments.append(sampler)
    try:
        trio.run(serve, config, None, instruments=instruments)
    finally:
        if sampler is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            if ours.stacks_out:
                Path(ours.stacks_out).write_text(sampler.text())
        if passes is not None:
            Path(ours.passes_out).write_text(json.dumps(passes.passes))
        Path(ours.steps_out).write_text(json.dumps([
            {"began": began, "wall_ms": round(wall * 1000, 2),
             "cpu_ms": round(cpu * 1000, 2), "task": name}
            for began, wall, cpu, name in clock.steps]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
