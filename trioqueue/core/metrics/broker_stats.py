"""The broker-wide numbers behind ``Stats``, ``Metrics``, ``Prometheus``,
``StorageStatus`` and the dashboard: what the queues do not keep themselves.

The per-queue tallies are the queues' own (:mod:`..queue.tallies`, summed here over the
queues: O(queues) per read, never O(jobs)). What is broker-wide lives in one
:class:`BrokerStats` the router holds: open connections per transport, the push and pull
rate over a sliding window, the push/pull/ack latency histograms, and the storage's
health. All of it is plain state with ``now`` passed in; the I/O shell feeds it.
"""

from __future__ import annotations

import uuid
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from ... import __version__
from ..broker_events import broker_event
from ..queue import lifecycle

if TYPE_CHECKING:
    from ..queue import QueueState

TRANSPORTS = ("tcp", "websocket", "sse")
# Seconds: bunqueue's buckets for the push/pull/ack histograms (+Inf is implied).
DURATION_BUCKETS_S = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                      1.0, 2.5, 5.0, 10.0)
TIMED_KINDS = ("push", "pull", "ack")
# The push and pull rates are averaged over this long (samples every RATE_SAMPLE_MS).
RATE_WINDOW_MS = 5_000
RATE_SAMPLE_MS = 1_000
# The throughput history: a point every 10 s for an hour.
HISTORY_STEP_MS = 10_000
HISTORY_POINTS = 360
MIB = 1024 * 1024


class ConnectionCounts:
    """Open connections per transport (``tcp``, ``websocket``, ``sse``): each transport
    calls :meth:`open` when it accepts one and :meth:`close` when it is gone.

    A TCP or WebSocket connection is also told to the dashboard (``client:connected``,
    ``client:disconnected``) through ``announce``, set by the broker, which drops events
    nobody listens to: the id a connection is told by is made only when someone listens
    as it opens.
    """

    __slots__ = ("open_by_kind", "announce", "listening", "now_ms")

    def __init__(self) -> None:
        self.open_by_kind = dict.fromkeys(TRANSPORTS, 0)
        self.announce: Callable[[list[dict[str, Any]]], None] | None = None
        self.listening: Callable[[], bool] = lambda: False
        self.now_ms: Callable[[], int] = lambda: 0

    def open(self, kind: str) -> str | None:
        """Count a new connection; its client id when the dashboard is told (give it
        back to :meth:`close`), else None."""
        self.open_by_kind[kind] = self.open_by_kind.get(kind, 0) + 1
        if self.announce is None or kind == "sse" or not self.listening():
            return None  # (an SSE stream is a listener, not a client: bunqueue tells TCP)
        client_id = str(uuid.uuid4())
        self.announce([broker_event("client:connected", self.now_ms(), clientId=client_id,
                                    transport=kind)])
        return client_id

    def close(self, kind: str, client_id: str | None = None) -> None:
        self.open_by_kind[kind] = self.open_by_kind.get(kind, 0) - 1
        if client_id is not None and self.announce is not None:
            self.announce([broker_event("client:disconnected", self.now_ms(),
                                        clientId=client_id, transport=kind)])

    @property
    def total(self) -> int:
        return sum(self.open_by_kind.values())


class RateWindow:
    """Jobs pushed and pulled per second over the last :data:`RATE_WINDOW_MS`, from
    samples of the lifetime totals (the broker samples every :data:`RATE_SAMPLE_MS`;
    a read samples too, so the rate is current to the read)."""

    __slots__ = ("samples",)

    def __init__(self) -> None:
        self.samples: deque[tuple[int, int, int]] = deque()

    def sample(self, now: int, pushed: int, pulled: int) -> None:
        samples = self.samples
        if samples and samples[-1][0] >= now:
            samples[-1] = (samples[-1][0], pushed, pulled)
        else:
            samples.append((now, pushed, pulled))
        while len(samples) > 2 and samples[1][0] <= now - RATE_WINDOW_MS:
            samples.popleft()

    def rates(self) -> tuple[float, float]:
        """(pushed, pulled) per second between the oldest and newest sample."""
        if len(self.samples) < 2:
            return 0.0, 0.0
        t0, pushed0, pulled0 = self.samples[0]
        t1, pushed1, pulled1 = self.samples[-1]
        seconds = (t1 - t0) / 1000
        return (round((pushed1 - pushed0) / seconds, 2),
                round((pulled1 - pulled0) / seconds, 2))


class ThroughputHistory:
    """The lifetime totals (pushed, completed, failed) once per :data:`HISTORY_STEP_MS`
    for the last :data:`HISTORY_POINTS` steps (an hour): the dashboard's throughput
    chart starts with the last hour, not empty. A step keeps its latest sample (and
    that sample's time, so rates between points are exact); the broker's sampler fills
    it (actors/broker.py), so it costs no job anything."""

    __slots__ = ("points",)

    def __init__(self) -> None:
        # (step, sampled at, pushed, completed, failed)
        self.points: deque[tuple[int, int, int, int, int]] = deque(maxlen=HISTORY_POINTS)

    def sample(self, now: int, pushed: int, completed: int, failed: int) -> None:
        step = now - now % HISTORY_STEP_MS
        points = self.points
        if points and points[-1][0] >= step:
            points[-1] = (points[-1][0], now, pushed, completed, failed)
        else:
            points.append((step, now, pushed, completed, failed))

    def as_list(self) -> list[dict[str, float]]:
        return [{"t": float(at), "pushed": p, "completed": c, "failed": f}
                for _, at, p, c, f in self.points]


class Histogram:
    """A Prometheus histogram in seconds over :data:`DURATION_BUCKETS_S`: a count per
    bucket (not cumulative; the exposition adds them up), the sum, the count."""

    __slots__ = ("counts", "sum_s", "count")

    def __init__(self) -> None:
        self.counts = [0] * (len(DURATION_BUCKETS_S) + 1)  # the last: over 10 s
        self.sum_s = 0.0
        self.count = 0

    def observe(self, seconds: float, times: int = 1) -> None:
        self.counts[bisect_left(DURATION_BUCKETS_S, seconds)] += times
        self.sum_s += seconds * times
        self.count += times

    def cumulative(self) -> list[tuple[str, int]]:
        """(``le`` label, observations at or under it), +Inf last."""
        out = []
        total = 0
        for bound, n in zip((*map(_le, DURATION_BUCKETS_S), "+Inf"), self.counts,
                            strict=True):
            total += n
            out.append((bound, total))
        return out


def _le(bound: float) -> str:
    return repr(bound)


class StorageHealth:
    """Whether the store still takes what it should, for ``StorageStatus`` and the HTTP
    layer's ``/health`` and ``/ready`` (503 while :attr:`degraded`).

    Set by the broker (actors/broker.py): ``disk_full`` when a measure of the store
    finds no room for one more small job below the admission limit (a refused push
    measures it, and so does every ``StorageStatus``), cleared by the next measure that
    finds room; ``failed`` when a commit or an fsync failed (the writer then stops the
    broker: nothing is acknowledged after it). ``error`` is a short text without paths
    or the store's own message, which may name files.
    """

    __slots__ = ("disk_full", "failed", "since", "error")

    def __init__(self) -> None:
        self.disk_full = False
        self.failed = False
        self.since: int | None = None  # epoch ms: since when it is degraded
        self.error: str | None = None

    @property
    def degraded(self) -> bool:
        return self.disk_full or self.failed

    def note_room(self, full: bool, now: int) -> None:
        if full == self.disk_full:
            return
        self.disk_full = full
        if full:
            self.since = self.since if self.failed else now
            self.error = self.error or "storage full: new jobs are refused"
        elif not self.failed:
            self.since = None
            self.error = None

    def note_failure(self, what: str, now: int) -> None:
        if not self.failed:  # (it outranks a full store's text)
            self.failed = True
            self.since = now if self.since is None else self.since
            self.error = f"storage {what} failed"


class StorageUsage(NamedTuple):
    """What ``StorageStatus`` adds to bunqueue's three fields (None: not known)."""

    engine: str  # "lmdb", "memory" or "postgresql"
    path: str | None  # the LMDB directory, absolute; PostgreSQL: its URL, no password
    used_bytes: int
    max_bytes: int | None  # the store's limit
    map_bytes: int | None  # LMDB's current map (it grows up to max_bytes)
    disk_free_bytes: int | None  # free space of the data directory's file system


def _no_usage() -> StorageUsage:
    return StorageUsage("memory", None, 0, None, None, None)


class ProcessNumbers(NamedTuple):
    rss_bytes: int
    peak_rss_bytes: int
    cpu_seconds: float
    start_time_s: float  # epoch seconds


_NO_PROCESS = ProcessNumbers(0, 0, 0.0, 0.0)


@dataclass
class BrokerStats:
    """The broker-wide numbers (see the module's docstring); the router holds one."""

    started_ms: int = 0
    connections: ConnectionCounts = field(default_factory=ConnectionCounts)
    rates: RateWindow = field(default_factory=RateWindow)
    history: ThroughputHistory = field(default_factory=ThroughputHistory)
    timings: dict[str, Histogram] = field(
        default_factory=lambda: {kind: Histogram() for kind in TIMED_KINDS})
    storage_health: StorageHealth = field(default_factory=StorageHealth)
    # Measures the store (the broker sets it; may commit what is pending first).
    storage_usage: Callable[[int], StorageUsage] = field(default=lambda now: _no_usage())
    # Reads this process's memory and CPU (the broker sets it: the reading is I/O,
    # trioqueue/process_numbers.py).
    process: Callable[[], ProcessNumbers] = field(default=lambda: _NO_PROCESS)
    metrics_max_queues: int = 100
    version: str = __version__


@dataclass(slots=True)
class QueueTotals:
    """The queues' counts and tallies summed (one pass over the queues)."""

    waiting: int = 0
    prioritized: int = 0
    delayed: int = 0
    active: int = 0
    dlq: int = 0
    completed: int = 0
    pushed: int = 0
    pulled: int = 0
    completed_total: int = 0
    failed_total: int = 0
    ran_ms: int = 0


def queue_totals(states: Iterable[tuple[str, QueueState]], now: int,
                 stored: Callable[[str, str], int]) -> QueueTotals:
    """Every queue's live counts (O(1) each) and lifetime tallies, summed. ``completed``
    is the completed jobs stored now (``stored(queue, state)``: the store's count);
    ``completed_total`` those completed since the broker started."""
    t = QueueTotals()
    for name, q in states:
        lifecycle.promote_due(q, now)
        c = q.c
        t.waiting += c.waiting
        t.prioritized += c.prioritized
        t.delayed += c.delayed
        t.active += c.active
        t.dlq += len(q.dlq.marks)
        t.completed += stored(name, "completed")
        t.pushed += c.pushed
        t.pulled += c.pulled
        t.completed_total += c.completed
        t.failed_total += c.failed
        t.ran_ms += c.ran_ms
    return t




def mib(n: int) -> float:
    return round(n / MIB, 2)
