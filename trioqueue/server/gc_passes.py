"""Collections of every generation for the standalone broker, each a short pause.

``server.tune_gc`` runs only the collector's young generation: a collection of an
older one traverses every live job. Alone, that left cyclic garbage which had outlived
one young collection (an actor's crash traceback, a library's cycle) in memory until
a restart. :class:`FullCollections` therefore collects every generation each
``gc_full_interval_s``, then freezes what survived (``gc.freeze``, as ``serve`` does
with what recovery loaded): a frozen object is never traversed again, so the next
pass looks only at what was made since this one, and its pause is the size of those
new objects, not of every live job. A pass also comes sooner once the young
collections have moved ``gc_full_after_young_objects`` on (a burst of new jobs).
A pass is short even with a million jobs live, where one pass after the million with
none between, or a full collection with nothing frozen, holds the loop for every job
(``scripts/gc_pauses.py --passes`` measures it).

The price of freezing: a cycle that becomes garbage while one of its objects was
already alive at an earlier pass is not freed (that object is no longer looked at,
and it holds the rest). The broker's own paths make no cycles at all
(``tests/test_server_gc.py``); the cycles of a crash or a library are of new objects
(an exception, its traceback, their frames), which the next pass frees.
"""

from __future__ import annotations

import gc
import logging
from time import perf_counter

import trio

log = logging.getLogger("trioqueue")

# A pass at least this long is logged (at info): the pause it held the event loop.
LOGGED_PAUSE_S = 0.05


class FullCollections:
    """A collection of every generation, then its survivors frozen: every ``interval_s``,
    or sooner once the young collections have moved about ``after_objects`` on since
    the last pass (their count times the young threshold, an upper bound), so that a
    burst of new jobs makes several short passes rather than one long one. ``run`` is
    started by ``serve`` beside the broker; ``collect`` is one pass."""

    __slots__ = ("interval_s", "after_objects", "passes", "freed", "last_pause_s",
                 "longest_pause_s", "_asked", "_sleep", "_closed")

    def __init__(self, interval_s: float, after_objects: int = 0) -> None:
        self.interval_s = interval_s  # 0: never
        self.after_objects = after_objects  # 0: by the interval alone
        self.passes = 0
        self.freed = 0  # unreachable objects found, over every pass
        self.last_pause_s = 0.0
        self.longest_pause_s = 0.0
        self._asked = False  # a young collection asked for a pass that has not run yet
        self._sleep: trio.CancelScope | None = None
        self._closed = False

    def close(self) -> None:
        """Make :meth:`run` return (the server is stopping)."""
        self._closed = True
        self._wake()

    async def run(self) -> None:
        """A pass every ``interval_s`` (or when the young collections ask) until
        :meth:`close`."""
        if self.interval_s <= 0:
            return
        token = trio.lowlevel.current_trio_token()

        def after_young(phase: str, info: dict[str, int]) -> None:
            # Called by the collector, in whichever thread allocated (a store's worker
            # thread too): only a look at two counters, then a thread-safe wake-up.
            if (phase == "stop" and info["generation"] == 0 and not self._asked
                    and gc.get_count()[1] * gc.get_threshold()[0] >= self.after_objects):
                self._asked = True
                try:
                    token.run_sync_soon(self._wake)
                except trio.RunFinishedError:
                    pass

        if self.after_objects > 0:
            gc.callbacks.append(after_young)
        try:
            while not self._closed:
                with trio.CancelScope(deadline=trio.current_time() + self.interval_s) as sleep:
                    self._sleep = sleep
                    await trio.sleep_forever()
                self._sleep = None
                if not self._closed:
                    self.collect()
        finally:
            if after_young in gc.callbacks:
                gc.callbacks.remove(after_young)

    def _wake(self) -> None:
        if self._sleep is not None:
            self._sleep.cancel()

    def collect(self) -> int:
        """One pass (it holds the event loop); returns the unreachable objects found."""
        started = perf_counter()
        found = gc.collect()
        gc.freeze()
        pause = perf_counter() - started
        self._asked = False
        self.passes += 1
        self.freed += found
        self.last_pause_s = pause
        self.longest_pause_s = max(self.longest_pause_s, pause)
        if pause >= LOGGED_PAUSE_S:
            log.info("full garbage collection: %d unreachable objects, %.0f ms",
                     found, pause * 1000)
        return found
