"""A healthy client's latency next to an abuse, and the rule it must keep.

A hostile client may cost the broker work, but not the service of everyone else. The
hostile-client tests run :class:`Healthy` (PUSH, PULL, ACK round trips over the real
wire) before and during an abuse and hold it to :func:`within_latency_budget`: the
median and the p99 during at most twice those before plus 2 ms. Cycles during which
the OS preempted the measuring thread (:func:`preemptions`) are left out of both sets:
they measure the machine's other load, not the broker.
"""

from __future__ import annotations

import math
import resource
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from .wire import RawClient


def quantile(samples: list[float], q: float) -> float:
    """The ``q`` quantile of ``samples`` (nearest rank, no interpolation)."""
    ordered = sorted(samples)
    rank = max(0, math.ceil(q * len(ordered)) - 1)
    return ordered[rank]




_RUSAGE_THREAD: int | None = getattr(resource, "RUSAGE_THREAD", None)  # Linux only


def preemptions() -> int:
    """How many times the OS has taken the CPU from this thread while it could run.

    Broker, abusers and healthy client share this one thread, so a cycle with a
    preemption in it measured the machine's other load, not the broker.
    """
    if _RUSAGE_THREAD is None:
        return 0
    return int(resource.getrusage(_RUSAGE_THREAD).ru_nivcsw)


class Healthy:
    """A well-behaved client doing PUSH, PULL, ACK round trips next to the abuse.

    ``run`` loops until ``stop`` is set; every cycle must succeed within ``deadline_s``.
    ``latencies`` keeps each cycle's duration (three round trips) in seconds.
    ``sample`` is a cycle for latency measurements: its duration, or None when the OS
    preempted the process during it (see ``preemptions``).
    """

    def __init__(self, client: RawClient, queue: str = "healthy",
                 deadline_s: float = 5.0) -> None:
        self.client = client
        self.queue = queue
        self.deadline_s = deadline_s
        self.latencies: list[float] = []
        self.stop = trio.Event()

    async def cycle(self) -> float:
        client = self.client
        started = time.perf_counter()
        with trio.fail_after(self.deadline_s):
            pushed = await client.ok("PUSH", queue=self.queue, name="n", data={"x": 1})
            pulled = await client.ok("PULL", queue=self.queue)
            assert pulled["job"]["id"] == pushed["id"], pulled
            await client.ok("ACK", id=pushed["id"], result=1)
        elapsed = time.perf_counter() - started
        self.latencies.append(elapsed)
        return elapsed

    async def measure(self, samples: int) -> list[float]:
        return [await self.cycle() for _ in range(samples)]

    async def sample(self) -> float | None:
        before = preemptions()
        elapsed = await self.cycle()
        return elapsed if preemptions() == before else None

    async def measure_clean(self, samples: int) -> list[float]:
        """``samples`` cycles the OS did not interrupt (at most 5x as many tried)."""
        clean: list[float] = []
        for _ in range(5 * samples):
            if (elapsed := await self.sample()) is not None:
                clean.append(elapsed)
                if len(clean) == samples:
                    break
        return clean

    async def run(self) -> None:
        while True:  # at least one cycle, however short the block
            await self.cycle()
            if self.stop.is_set():
                return

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Healthy]:
        """Cycle in the background for the duration of the block (at least once)."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.run)
            try:
                yield self
            finally:
                self.stop.set()
        assert self.latencies, "the healthy client never completed a cycle"




def latency_report(baseline: list[float], during: list[float]) -> str:
    def ms(samples: list[float], q: float) -> str:
        return f"{quantile(samples, q) * 1000:.2f}"

    return (f"baseline p50 {ms(baseline, 0.5)} p99 {ms(baseline, 0.99)} ms "
            f"({len(baseline)} cycles); during p50 {ms(during, 0.5)} p99 {ms(during, 0.99)} "
            f"ms ({len(during)} cycles)")


def within_latency_budget(baseline: list[float], during: list[float]) -> bool:
    """The rule: p99 during <= 2 * p99 before + 2 ms, and the same for the medians."""
    slack = 0.002
    return all(quantile(during, q) <= 2 * quantile(baseline, q) + slack for q in (0.5, 0.99))


