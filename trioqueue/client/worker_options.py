"""The checks of a Worker's options, and what its limits ask of the broker.

``limiter`` and ``group_concurrency`` are not enforced in the worker: a limit kept by
each worker would let two workers run twice the jobs. They become the queue's own limit
at the broker (``RateLimit``, at most ``max`` jobs in any ``duration``, set when the
worker starts) and the per-group default every pull of the worker sends (``PULLB``'s
``group`` field), so they bind every consumer of the queue together.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .lease import MAX_BATCH_SIZE

MAX_POLL_TIMEOUT_MS = 60_000   # PULLB's ``timeout`` limit


def check_concurrency(value: Any, name: str = "concurrency") -> int:
    """A count of at least 1 (concurrency, a limiter's max and duration)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer of at least 1")
    return value


def check_worker_options(*, batch_size: Any, lock_duration_ms: float,
                         heartbeat_interval_s: float, poll_timeout_ms: float,
                         ack_batch_delay_ms: float) -> None:
    if not isinstance(batch_size, int) or not 1 <= batch_size <= MAX_BATCH_SIZE:
        raise ValueError(f"batch_size must be an integer from 1 to {MAX_BATCH_SIZE}")
    if not (math.isfinite(lock_duration_ms) and lock_duration_ms > 0):
        raise ValueError("lock_duration_ms must be a positive number")
    if not (math.isfinite(heartbeat_interval_s) and heartbeat_interval_s > 0):
        raise ValueError("heartbeat_interval_s must be a positive number")
    if heartbeat_interval_s * 1000 >= lock_duration_ms:
        # Every job running longer than its lock would be taken back and run again.
        raise ValueError("heartbeat_interval_s must be shorter than lock_duration_ms")
    if not 0 <= poll_timeout_ms <= MAX_POLL_TIMEOUT_MS:
        raise ValueError(f"poll_timeout_ms must be from 0 to {MAX_POLL_TIMEOUT_MS}")
    if not (math.isfinite(ack_batch_delay_ms) and ack_batch_delay_ms >= 0):
        raise ValueError("ack_batch_delay_ms must be a number of at least 0")


def rate_limit_fields(limiter: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """BullMQ's ``limiter={"max": n, "duration": ms}`` as the fields of the queue's
    ``RateLimit``: at most ``max`` jobs leased per ``duration`` ms by all the queue's
    consumers together, in any window of ``duration`` ms from the first."""
    if limiter is None:
        return None
    unknown = set(limiter) - {"max", "duration"}
    if unknown:
        raise ValueError(f"limiter takes max and duration, not {sorted(unknown)}")
    return {"limit": check_concurrency(limiter.get("max"), "limiter max"),
            "duration": check_concurrency(limiter.get("duration"), "limiter duration")}


def group_field(group_concurrency: int | None,
                group_limiter: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """``PULLB``'s ``group``: the per-group concurrency (and rate) the queue's groups
    get unless a group has its own (``SetGroupConcurrency``, ``SetGroupRateLimit``)."""
    group: dict[str, Any] = {}
    if group_concurrency is not None:
        check_concurrency(group_concurrency, "group_concurrency")
        group["concurrency"] = group_concurrency
    if group_limiter is not None:
        fields = rate_limit_fields(group_limiter)
        assert fields is not None
        group["limit"] = {"max": fields["limit"], "duration": fields["duration"]}
    return group or None
