"""The push/pull/ack latency histograms (``bunqueue_{push,pull,ack}_duration_seconds``),
measured in the broker on a sample of the batches.

What is measured: for one batch in :data:`TIMED_EVERY_BATCHES` that the router receives
from a session, the time from the batch reaching :meth:`Router.dispatch` until each of
its PUSH/PUSHB, PULL/PULLB and ACK/ACKB commands' reply is handed to the session to
send (after its writes are committed). A parked PULL counts its wait. The clock is read
once when the batch arrives and once per timed reply; batches not sampled pay one
integer decrement, so the histograms add nothing per job on the hot path. Their
``_count`` is therefore the number of sampled commands, not of all commands (the job
counters, ``bunqueue_jobs_*_total``, count every job).
"""

from __future__ import annotations

import time
from typing import Any

from ..core.commands.registry import Command
from ..core.metrics.broker_stats import Histogram
from .request import OnReply, Request

TIMED_EVERY_BATCHES = 16
_KIND = {"PUSH": "push", "PUSHB": "push", "PULL": "pull", "PULLB": "pull",
         "ACK": "ack", "ACKB": "ack"}


class BatchTimer:
    """The router counts ``countdown`` down once per batch (inline: no call) and hands
    the batch to :meth:`time` when it reaches 0."""

    __slots__ = ("countdown", "_timings")

    def __init__(self, timings: dict[str, Histogram]) -> None:
        self._timings = timings
        self.countdown = 1  # the first batch is timed

    def time(self, routed: list[tuple[Command, Request]]) -> None:
        """Time this batch's push, pull and ack commands (see the module)."""
        self.countdown = TIMED_EVERY_BATCHES
        start = time.perf_counter()
        for _, request in routed:
            kind = _KIND.get(request.cmd)
            if kind is not None:
                request.replier = OnReply(request.replier, _Observe(self._timings[kind],
                                                                    start))


class _Observe:
    __slots__ = ("_hist", "_start")

    def __init__(self, hist: Histogram, start: float) -> None:
        self._hist = hist
        self._start = start

    def __call__(self, reply: dict[str, Any]) -> None:
        self._hist.observe(time.perf_counter() - self._start)
