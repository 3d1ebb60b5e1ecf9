"""What every connection of one broker shares: its limits, two byte budgets, one timer.

A connection alone is bounded by its own limits (a frame, its unsent replies); these
bound what all of them hold together, so that many connections cannot add up to the
broker's memory:

- :class:`ByteBudget`: bytes held by connections (incomplete frames; unsent replies),
  with one broker-wide bound. Past it, the connections holding the most are cut, one
  by one, until the total is back under the bound: the largest holder is the likeliest
  abuser, and cutting it frees the most.
- :class:`Timers`: the connections' deadlines (authentication, idleness, a partial
  frame), kept in one heap served by one task, so that a connection costs no timer
  task (about 2.7 KB each) and a read no cancel scope.
- :class:`Refusals`: connections turned away at ``max_connections``, logged at most
  once a second with their count.

:class:`Shell` bundles them with :class:`ConnectionLimits`, the numbers of
:class:`~trioqueue.config.Config` a connection enforces, and the
:class:`~trioqueue.transport.doors.Doors` (connections per address, and those not yet
authenticated); ``Server`` makes one for both listeners.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Protocol

import trio

from ..config import Config
from ..core.large_values.graveyard import Graveyard
from .doors import Doors
from .idle_spin import IdleSpin
from .read_pacing import BadFrameClock
from .sent_marks import Senders

log = logging.getLogger("trioqueue.limits")


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The limits one connection enforces (each is the Config field of its name)."""

    max_frame_bytes: int
    max_preauth_frame_bytes: int
    partial_frame_timeout_s: float
    max_write_queue_bytes: int
    overflow_notice_s: float
    auth_timeout_s: float
    idle_timeout_s: float
    max_connections: int
    ws_max_message_bytes: int
    ws_close_timeout_s: float
    large_frame_bytes: int
    max_read_step_ms: float
    bad_frame_pause_ratio: float
    bad_frame_pause_max_ms: float
    max_data_bytes: int  # a large frame's JSON bound is only measured up to it

    @classmethod
    def from_config(cls, config: Config) -> ConnectionLimits:
        return cls(**{f.name: getattr(config, f.name) for f in fields(cls)})

    def preauth_frame_bytes(self) -> int:
        """The frame cap before authentication (never above the cap after it)."""
        if not self.max_preauth_frame_bytes:
            return self.max_frame_bytes
        return min(self.max_preauth_frame_bytes, self.max_frame_bytes)


class Holder(Protocol):
    """A connection as a budget sees it: something to cut."""

    def cut(self, budget: str) -> None: ...


class ByteBudget:
    """Bytes held by many connections, bounded together (``limit_bytes``; 0: no bound).

    Each holder reports what it holds now (:meth:`set`); a report that takes the total
    over the bound cuts the largest holders until it is back under. A cut holder is
    forgotten at once (its memory is freed as its task ends), and must close.
    """

    __slots__ = ("limit_bytes", "name", "total", "_held", "cuts")

    def __init__(self, limit_bytes: int, name: str) -> None:
        self.limit_bytes = limit_bytes
        self.name = name  # the Config field, named in the log line and the notice
        self.total = 0
        self._held: dict[Holder, int] = {}
        self.cuts = 0  # holders cut so far

    def held(self, holder: Holder) -> int:
        return self._held.get(holder, 0)

    def set(self, holder: Holder, nbytes: int) -> None:
        old = self._held.pop(holder, 0)
        if nbytes > 0:
            self._held[holder] = nbytes
        self.total += nbytes - old
        if self.limit_bytes and self.total > self.limit_bytes:
            self._shed()

    def release(self, holder: Holder) -> None:
        self.total -= self._held.pop(holder, 0)

    def _shed(self) -> None:
        # A scan of the holders, only when over the bound: a heap kept in step with
        # every report would cost the hot path; a cut is rare.
        while self.total > self.limit_bytes and self._held:
            victim = max(self._held, key=self._held.__getitem__)
            held = self._held.pop(victim)
            self.total -= held
            self.cuts += 1
            log.info("cutting a connection holding %d bytes: %s (%d) reached",
                     held, self.name, self.limit_bytes)
            victim.cut(self.name)


class DecodeTurns:
    """Large frames decoded at once, all connections together, bounded by their bytes.

    A frame of many small values decodes into many times its size in Python objects
    (about 8 bytes an integer of one byte, 60 or more a small map), so frames decoded
    side by side, each in slices, add up: ``limit_bytes`` bounds their wire bytes
    together (0: no bound). A frame that does not fit waits, in arrival order, until
    the frames ahead of it are done; one larger than the bound is decoded when it is
    alone. Its connection reads nothing meanwhile (its later frames wait behind it).
    """

    __slots__ = ("limit_bytes", "total", "_line", "waits")

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self.total = 0
        self._line: deque[tuple[int, trio.Event]] = deque()
        self.waits = 0  # frames that waited for their turn so far

    def _fits(self, nbytes: int) -> bool:
        return not self.limit_bytes or not self.total or (
            self.total + nbytes <= self.limit_bytes)

    async def take(self, nbytes: int) -> None:
        """Wait for room for a frame of ``nbytes``; :meth:`give_back` it when done."""
        if not self._line and self._fits(nbytes):
            self.total += nbytes
            return
        self.waits += 1
        turn = (nbytes, trio.Event())
        self._line.append(turn)
        try:
            await turn[1].wait()
        except BaseException:
            if turn[1].is_set():  # given its turn as it was cancelled: hand it on
                self.give_back(nbytes)
            else:
                self._line.remove(turn)
                self._next()
            raise

    def give_back(self, nbytes: int) -> None:
        self.total -= nbytes
        self._next()

    def _next(self) -> None:
        while self._line and self._fits(self._line[0][0]):
            nbytes, event = self._line.popleft()
            self.total += nbytes
            event.set()


class TimerHandle:
    """A connection's place in :class:`Timers` (``Timers.handle``).

    :meth:`arm` asks for a call of the callback at ``when`` (with the time then); a
    handle already armed earlier is not armed again. The callback checks its
    connection's clocks and arms again for the next one. :meth:`cancel` when the
    connection ends: its entries are dropped from the heap soon after (see
    :class:`Timers`), and hold only this handle meanwhile, not the connection.
    """

    __slots__ = ("callback", "armed_at", "entries", "_timers")

    def __init__(self, timers: Timers, callback: Callable[[float], None]) -> None:
        self._timers = timers
        self.callback: Callable[[float], None] | None = callback
        self.armed_at = math.inf  # the earliest entry of this handle in the heap
        self.entries = 0  # its entries in the heap

    def arm(self, when: float) -> None:
        if when < self.armed_at and self.callback is not None:
            self._timers._push(self, when)

    def cancel(self) -> None:
        if self.callback is not None:
            self.callback = None
            self._timers._forget(self)


class Timers:
    """Deadlines of many connections in one heap, served by :meth:`run` (one task).

    Entries are not removed when a deadline moves: a stale one costs one call that
    finds nothing due. Entries of cancelled handles are counted, and the heap is
    rebuilt without them once they are most of it, so connections that come and go
    leave nothing behind (amortised O(1) per connection).
    """

    # Callbacks run per pass at most; the rest in the next (a flood of connections
    # that all expire together must not hold the event loop).
    MAX_PER_PASS = 500
    DEAD_SLACK = 32  # cancelled entries tolerated before a rebuild is considered

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, TimerHandle]] = []
        self._seq = itertools.count()
        self._scope: trio.CancelScope | None = None
        self._dead = 0  # entries of cancelled handles still in the heap

    def handle(self, callback: Callable[[float], None]) -> TimerHandle:
        return TimerHandle(self, callback)

    def __len__(self) -> int:
        return len(self._heap)

    def _push(self, handle: TimerHandle, when: float) -> None:
        handle.armed_at = when
        handle.entries += 1
        heapq.heappush(self._heap, (when, next(self._seq), handle))
        scope = self._scope
        if scope is not None and when < scope.deadline:
            scope.deadline = when

    def _forget(self, handle: TimerHandle) -> None:
        self._dead += handle.entries
        handle.entries = 0
        heap = self._heap
        if self._dead >= self.DEAD_SLACK and 2 * self._dead > len(heap):
            self._heap = [entry for entry in heap if entry[2].callback is not None]
            heapq.heapify(self._heap)
            self._dead = 0

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            heap = self._heap
            with trio.CancelScope(deadline=heap[0][0] if heap else math.inf) as scope:
                self._scope = scope
                await trio.sleep_forever()
            self._scope = None
            self._fire(trio.current_time())
            await trio.lowlevel.checkpoint()

    def _fire(self, now: float) -> None:
        for _ in range(self.MAX_PER_PASS):
            heap = self._heap  # a callback may rebuild it
            if not heap or heap[0][0] > now:
                return
            when, _, handle = heapq.heappop(heap)
            callback = handle.callback
            if callback is None:
                self._dead -= 1
                continue
            handle.entries -= 1
            if when >= handle.armed_at:
                handle.armed_at = math.inf  # its earliest entry: armed no more
            try:
                callback(now)
            except Exception:  # a bug in one connection's check must not end the rest
                log.exception("connection timer failed")


class Refusals:
    """Connections turned away at ``max_connections``: one log line a second at most."""

    __slots__ = ("limit", "count", "_unlogged", "_logged_at")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.count = 0
        self._unlogged = 0
        self._logged_at = -math.inf

    def note(self, transport: str) -> None:
        self.count += 1
        self._unlogged += 1
        now = trio.current_time()
        if now - self._logged_at >= 1.0:
            log.warning("refused %d %s connection(s) in the last second: max_connections "
                        "(%d) reached", self._unlogged, transport, self.limit)
            self._unlogged = 0
            self._logged_at = now


def too_many_connections(limit: int) -> str:
    return f"Too many connections (max {limit})"


class Shell:
    """The broker-wide state of the I/O shell: limits, budgets, timers, refusals.

    ``timers.run`` must be running (``Server`` starts it beside the connections) for
    the authentication, idle and partial-frame deadlines to be enforced.
    """

    def __init__(self, config: Config) -> None:
        self.limits = ConnectionLimits.from_config(config)
        self.auth_on = bool(config.auth_tokens)
        self.partial_frames = ByteBudget(config.max_partial_frame_total_bytes,
                                         "max_partial_frame_total_bytes")
        self.replies = ByteBudget(config.max_write_queue_total_bytes,
                                  "max_write_queue_total_bytes")
        # request bodies still arriving on the HTTP port (http/bodies.py)
        self.http_bodies = ByteBudget(config.http_max_body_total_bytes,
                                      "http_max_body_total_bytes")
        # connections per client address, and those not yet authenticated (doors.py)
        self.doors = Doors(config)
        self.decoding = DecodeTurns(config.max_decoding_total_bytes)
        self.timers = Timers()
        # The WebSocket and SSE connections' sent frames (shutdown waits on them).
        self.senders = Senders()
        self.refusals = Refusals(config.max_connections)
        # one clock for every connection's bad frames (read_pacing.py)
        self.bad_frames = BadFrameClock(config.bad_frame_pause_ratio,
                                        config.bad_frame_pause_max_ms / 1000)
        # poked by every TCP read; polls only where serve() runs it (standalone)
        self.spin = IdleSpin(config.idle_spin_ms / 1000)
        self.teardowns = Teardowns(TEARDOWNS_AT_ONCE)  # (read here: tests lower it)
        # where a refused large frame's values are taken apart a slice at a time (the
        # broker's, set by the server; None: freed by their last holder, at once)
        self.graveyard: Graveyard | None = None


# Connections that tear down at once: the rest wait their turn (see Teardowns).
TEARDOWNS_AT_ONCE = 32


class Teardowns:
    """At most ``TEARDOWNS_AT_ONCE`` connections end at once; the others wait in turn.

    A connection's end is a few short task steps (its read loop sees the
    EOF, its sender is cancelled, its session hands back its jobs and holds, its socket
    closes). Trio runs every task that is ready in one pass of its loop, so when a
    thousand clients go at once (a fleet restarted, a network cut) those steps all land
    in the same few passes, and another queue's client waited for them all
    (docs/benchmarks.md, "A million jobs in one queue"). In turns of 32, a
    pass holds the later steps of at most 32 ending connections; the step in which each
    read returns the EOF comes before its turn, and trio still wakes those all in one
    pass, so what that step costs is kept small: a free turn is taken without a
    checkpoint, and a connection with none joins a line (a deque) and parks on the
    scheduler itself; ``done`` hands its turn to the first in line. A
    ``trio.CapacityLimiter`` taken shielded did the same with an exception, a cancel
    scope and a parking lot per connection: more work in each EOF step, and a thousand
    of those steps land in one pass.

    A connection in line cannot be cancelled out of it (its abort is refused, as a
    shielded wait would be): a connection that ends must still hand back what it holds,
    even while the broker is being cancelled, and it waits only on other endings, none
    of which waits on a client (a TCP socket's close returns at once).
    """

    __slots__ = ("_at_once", "_free", "_holders", "_line")

    def __init__(self, at_once: int) -> None:
        self._at_once = self._free = at_once
        self._holders: set[object] = set()  # holding a turn or in line for one
        self._line: deque[trio.lowlevel.Task] = deque()

    async def turn(self, holder: object) -> None:
        """Wait for ``holder``'s turn to end (at once when it already has it)."""
        if holder in self._holders:
            return
        self._holders.add(holder)
        if self._free:  # no checkpoint when a turn is free: most ends are not in a crowd
            self._free -= 1
            return
        self._line.append(trio.lowlevel.current_task())
        await trio.lowlevel.wait_task_rescheduled(_refuse_abort)

    def done(self, holder: object) -> None:
        """``holder`` has ended: the first one in line begins (its turn passed on)."""
        if holder in self._holders:
            self._holders.discard(holder)
            if self._line:
                trio.lowlevel.reschedule(self._line.popleft())
            else:
                self._free += 1

    @property
    def ending(self) -> int:
        """How many connections hold a turn now."""
        return self._at_once - self._free


def _refuse_abort(_: Any) -> trio.lowlevel.Abort:
    return trio.lowlevel.Abort.FAILED
