"""The clock port: the one place the broker reads wall-clock time.

Job timestamps (createdAt, runAt, ...) are epoch milliseconds, so the broker needs wall
time; but tests drive time with trio's MockClock, which moves only trio's own clock.
A :class:`Clock` therefore answers ``now_ms`` and converts between wall milliseconds and
the scheduler's seconds, and every timer is set through it. The core never reads a clock:
it is handed ``now`` by the caller.
"""

from __future__ import annotations

import abc


class Clock(abc.ABC):
    @abc.abstractmethod
    def now_ms(self) -> int:
        """Wall-clock time in epoch milliseconds."""

    @abc.abstractmethod
    def deadline_for(self, wall_ms: float) -> float:
        """The scheduler time (seconds, as trio counts them) at which ``wall_ms`` is reached."""


class FixedClock(Clock):
    """A clock that moves only when told: for sans-IO tests of the core."""

    def __init__(self, start_ms: int = 1_764_000_000_000) -> None:
        self.ms = start_ms

    def now_ms(self) -> int:
        return self.ms

    def deadline_for(self, wall_ms: float) -> float:
        return (wall_ms - self.ms) / 1000.0

    def advance(self, ms: int) -> None:
        self.ms += ms
