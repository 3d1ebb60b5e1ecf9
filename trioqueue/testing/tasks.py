"""Count the live trio tasks of a run, to prove that nothing a test did leaked a task.

Every trio task is reachable from the run's root task through the nurseries it opened
(``Task.child_nurseries``) and the tasks those nurseries hold (``Nursery.child_tasks``).
A connection the broker served and closed must leave no task behind: tests take
:func:`count_tasks` before some abuse and wait, with a deadline, until the count comes
back to that baseline (:func:`wait_for_task_count`), reporting which task names are
left over (:func:`task_names`) when it does not.

These functions must be called from inside a trio run; they walk the tree without
yielding, so the count is one consistent snapshot.

The steps themselves are measured by :class:`LongestStep`, an instrument; a test holds
some work of the broker's to a bound of CPU time a step with :func:`measured`, or
watches a block with :func:`steps_watched`.
"""

from __future__ import annotations

import gc
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import TypeVar

import trio

__all__ = ["LongestStep", "StepCounter", "count_tasks", "iter_tasks", "measured",
           "steps_watched", "task_names", "wait_for_task_count"]

T = TypeVar("T")


class StepCounter(trio.abc.Instrument):
    """Counts the steps of the tasks named ``name`` while installed: how many slices a
    queue actor (``queue:<name>``) took for some work."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name == self.name:
            self.steps += 1


class LongestStep(trio.abc.Instrument):
    """The most CPU time one task step took while installed, and whose step it was.

    The thread's CPU time, not the wall clock: a preemption by the OS (the machine's
    other load) does not count, a step that holds the event loop does. ``skip`` is a
    task not counted (the test's own, which decodes what it receives). The step the
    instrument is installed in is not seen.
    """

    def __init__(self, skip: trio.lowlevel.Task | None = None) -> None:
        self.skip = skip
        self.worst_ms = 0.0
        self.worst_task = ""
        self._cpu: float | None = None

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._cpu = time.thread_time()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if self._cpu is None or task is self.skip:
            return
        cpu_ms = (time.thread_time() - self._cpu) * 1000
        if cpu_ms > self.worst_ms:
            self.worst_ms, self.worst_task = cpu_ms, task.name

    def check(self, what: str, bound_ms: float) -> None:
        assert self.worst_ms < bound_ms, (
            f"{what}: {self.worst_task} took {self.worst_ms:.0f} ms of CPU in one step")


async def measured(what: str, work: Callable[[], Awaitable[T]], bound_ms: float, *,
                   shown: bool = False) -> T:
    """``work()``'s result, once no step of another task than the caller's took
    ``bound_ms`` of CPU time or more while it ran (the caller's own task decodes what
    it receives: not the broker's work). ``shown`` prints the longest step (seen with
    ``pytest -s``), for numbers quoted in the docs."""
    steps = LongestStep(skip=trio.lowlevel.current_task())
    trio.lowlevel.add_instrument(steps)
    try:
        result = await work()
    finally:
        trio.lowlevel.remove_instrument(steps)
    if shown:
        print(f"\n{what}: longest step {steps.worst_ms:.1f} ms of CPU ({steps.worst_task})")
    steps.check(what, bound_ms)
    return result


@asynccontextmanager
async def steps_watched(*, skip_caller: bool = True) -> AsyncIterator[LongestStep]:
    """The longest step while the body runs, the caller's own task (which decodes what
    it receives) left out unless ``skip_caller`` is False; the test's collector held off
    meanwhile (a served broker's collections are its own passes', not the test's)."""
    steps = LongestStep(skip=trio.lowlevel.current_task() if skip_caller else None)
    gc.disable()
    trio.lowlevel.add_instrument(steps)
    try:
        yield steps
    finally:
        trio.lowlevel.remove_instrument(steps)
        gc.enable()


def iter_tasks(root: trio.lowlevel.Task | None = None) -> Iterator[trio.lowlevel.Task]:
    """Every live task under ``root`` (the run's root task by default), ``root`` excluded.

    Walks depth-first through each task's child nurseries; iterative, so a deep tree of
    nested nurseries cannot hit the recursion limit.
    """
    if root is None:
        root = trio.lowlevel.current_root_task()
    assert root is not None, "iter_tasks must be called inside a trio run"
    stack = [root]
    while stack:
        task = stack.pop()
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                yield child
                stack.append(child)


def count_tasks(root: trio.lowlevel.Task | None = None) -> int:
    """How many tasks live under ``root`` (the run's root task by default)."""
    return sum(1 for _ in iter_tasks(root))


def task_names(root: trio.lowlevel.Task | None = None) -> Counter[str]:
    """How many live tasks carry each name: what to print when a count does not add up."""
    return Counter(task.name for task in iter_tasks(root))


async def wait_for_task_count(
    target: int,
    *,
    timeout_s: float = 5.0,
    root: trio.lowlevel.Task | None = None,
    poll_s: float = 0.01,
) -> int:
    """Wait until at most ``target`` tasks live under ``root``; return the final count.

    Closing connections unwind over a few scheduler passes (a cancelled nursery, a
    shielded close), so the count is polled until it comes down, within ``timeout_s``.
    Raises ``AssertionError`` naming the extra tasks if it never does.
    """
    deadline = trio.current_time() + timeout_s
    while True:
        count = count_tasks(root)
        if count <= target:
            return count
        if trio.current_time() >= deadline:
            names = task_names(root)
            raise AssertionError(
                f"{count} live tasks, expected at most {target} after {timeout_s} s; "
                f"by name: {dict(names.most_common())}"
            )
        await trio.sleep(poll_s)
