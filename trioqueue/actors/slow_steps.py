"""A log line for every step of a task that held the event loop too long.

Every queue shares the one trio thread, so a step that runs long delays every other
queue by as long; the design's bound is 10 ms (docs/architecture.md). This watch
makes such steps visible on a running broker, as asyncio's ``slow_callback_duration``
does: ``Config.log_slow_step_ms`` (``--log-slow-step-ms``) above 0 installs it.

Each line gives the step's wall time and the CPU time the trio thread spent in it.
Wall time is what other queues waited; CPU time excludes the time the OS gave the
core to another process, so on a loaded machine it tells the broker's own slow steps
(both high) from preemption (wall high, CPU low). Off by default: an instrument is
called twice per task step, which costs the hot path a few percent.

A step is not all another client waits for. trio runs every task that is runnable at
the start of a pass of its loop, then polls the sockets: a frame that arrives during a
pass is read only after the whole pass. So the watch also logs a *pass* that reaches
the threshold (``slow pass``: how many steps it ran, its wall and CPU time, its longest
step), which is what bounds another queue's latency; several short steps of long work
(a queue's slice, the writer's commit, a connection encoding the reply) can add up to a
slow pass with no slow step.
"""

from __future__ import annotations

import logging
import time

import trio

log = logging.getLogger("trioqueue.slow_steps")


class SlowSteps(trio.abc.Instrument):
    """Logs steps and passes whose wall time reaches ``threshold_ms``; counts them and
    keeps the worst step's CPU time."""

    def __init__(self, threshold_ms: float) -> None:
        self.threshold_s = threshold_ms / 1000
        self.slow = 0  # steps at or over the threshold
        self.worst_cpu_ms = 0.0
        self.slow_passes = 0  # passes of the loop at or over the threshold
        # As if a step began now: the instrument may be added in the middle of one.
        self._wall = time.perf_counter()
        self._cpu = time.thread_time()
        self._pass_wall = time.perf_counter()
        self._pass_cpu = time.thread_time()
        self._pass_steps = 0
        self._pass_longest = (0.0, "")  # wall, task name

    def after_io_wait(self, timeout: float) -> None:
        self._pass_wall = time.perf_counter()
        self._pass_cpu = time.thread_time()
        self._pass_steps = 0
        self._pass_longest = (0.0, "")

    def before_io_wait(self, timeout: float) -> None:
        wall = time.perf_counter() - self._pass_wall
        if wall < self.threshold_s:
            return
        cpu = time.thread_time() - self._pass_cpu
        self.slow_passes += 1
        longest, name = self._pass_longest
        log.warning("slow pass: %d steps held the event loop %.1f ms (%.1f ms CPU); "
                    "longest %s %.1f ms", self._pass_steps, wall * 1000, cpu * 1000,
                    name, longest * 1000)

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._wall = time.perf_counter()
        self._cpu = time.thread_time()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        wall = time.perf_counter() - self._wall
        self._pass_steps += 1
        if wall > self._pass_longest[0]:
            self._pass_longest = (wall, task.name)
        if wall < self.threshold_s:
            return
        cpu = time.thread_time() - self._cpu
        self.slow += 1
        self.worst_cpu_ms = max(self.worst_cpu_ms, cpu * 1000)
        log.warning("slow step: %s held the event loop %.1f ms (%.1f ms CPU)",
                    task.name, wall * 1000, cpu * 1000)
