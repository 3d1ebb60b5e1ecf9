"""Retry delays, as bunqueue computes them (so retries land when its users expect)."""

from __future__ import annotations

import random
from typing import Any

MAX_BACKOFF_MS = 3_600_000
_MAX_EXPONENT = 1023


def backoff_delay_ms(
    base_ms: float,
    config: dict[str, Any] | None,
    attempts: int,
    rng: random.Random | None = None,
) -> int:
    """Delay before the next try; ``attempts`` already counts the failure just charged.

    Fixed backoff jitters +-20 %; anything else is exponential ``base * 2^attempts``
    with +-50 % jitter. Jitter spreads retries of a burst of failures so they do not
    come back as a burst. The result is capped (``maxDelay`` or one hour).
    """
    r = rng or random
    cap = MAX_BACKOFF_MS
    if config is not None:
        base_ms = config.get("delay", base_ms)
        if config.get("maxDelay") is not None:
            cap = config["maxDelay"]
    if base_ms <= 0:
        return 0
    if config is not None and config.get("type") == "fixed":
        delay = base_ms * r.uniform(0.8, 1.2)
    else:
        exponent = min(max(attempts, 0), _MAX_EXPONENT)
        delay = base_ms * (2.0**exponent) * r.uniform(0.5, 1.5)
    return int(min(delay, cap))


def reconnect_delay_s(attempt: int, first_s: float, max_s: float) -> float:
    """Delay before reconnect attempt ``attempt`` (0-based): doubling from ``first_s``,
    capped at ``max_s``, with 0-30% jitter so that the many clients (or brokers) of a
    peer that came back do not all retry in step. The client's reconnects and the
    brokers' peer links share it."""
    base = min(first_s * 2 ** min(attempt, _MAX_EXPONENT), max_s)
    return float(base * (1 + random.random() * 0.3))
