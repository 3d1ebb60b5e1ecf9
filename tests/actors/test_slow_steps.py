"""The slow-step log: a step that holds the event loop past the threshold is logged
with its task's name, wall time and CPU time; quick steps are not. A pass of the loop
whose steps together reach it is logged as a slow pass."""

from __future__ import annotations

import logging
import time

import pytest
import trio

from trioqueue.actors.slow_steps import SlowSteps
from trioqueue.cli import build_parser, config_from
from trioqueue.config import Config


async def _watched(caplog: pytest.LogCaptureFixture, busy_s: dict[str, float]
                   ) -> tuple[SlowSteps, list[str]]:
    """Run one task per name, each busy for its CPU seconds in one step (0: a bare
    checkpoint), all runnable together, under a watch of 20 ms; its log lines."""
    watch = SlowSteps(threshold_ms=20)
    trio.lowlevel.add_instrument(watch)
    try:
        async def busy(seconds: float) -> None:
            if not seconds:
                await trio.lowlevel.checkpoint()
            end = time.thread_time() + seconds
            while time.thread_time() < end:
                pass

        with caplog.at_level(logging.WARNING, logger="trioqueue.slow_steps"):
            async with trio.open_nursery() as nursery:
                for name, seconds in busy_s.items():
                    nursery.start_soon(busy, seconds, name=name)
    finally:
        trio.lowlevel.remove_instrument(watch)
    return watch, [r.getMessage() for r in caplog.records]


async def test_a_step_over_the_threshold_is_logged_with_its_cpu_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    watch, logged = await _watched(caplog, {"quick-task": 0, "busy-task": 0.03})
    lines = [line for line in logged if line.startswith("slow step: ")]
    assert watch.slow == len(lines) >= 1
    assert any("busy-task held the event loop" in line for line in lines), lines
    assert not any("quick-task" in line for line in lines)
    assert watch.worst_cpu_ms >= 30


async def test_short_steps_that_add_up_in_one_pass_are_logged_as_a_slow_pass(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Twelve steps of 2 ms of CPU each, runnable together: no step reaches 20 ms, but
    # the pass that runs them holds every socket for at least 24 ms. (2 ms leaves room
    # for a busy machine, where a step of 6 ms of CPU took up to 28 ms of wall time.)
    watch, lines = await _watched(caplog, {f"part-{i}": 0.002 for i in range(12)})
    assert watch.slow == 0, lines
    passes = [line for line in lines if line.startswith("slow pass: ")]
    assert watch.slow_passes == len(passes) >= 1, lines
    steps = int(passes[0].split()[2])
    assert steps >= 4 and "longest part-" in passes[0], passes


def test_the_flag_and_variable() -> None:
    args = build_parser().parse_args(["serve", "--log-slow-step-ms", "10"])
    assert config_from(args, {}).log_slow_step_ms == 10
    args = build_parser().parse_args(["serve"])
    assert config_from(args, {"TRIOQUEUE_LOG_SLOW_STEP_MS": "2.5"}).log_slow_step_ms == 2.5
    assert Config().log_slow_step_ms == 0
    with pytest.raises(SystemExit):
        config_from(build_parser().parse_args(["serve", "--log-slow-step-ms", "x"]), {})
    with pytest.raises(ValueError):
        Config(log_slow_step_ms=-1).validate()
