"""Large values let go of, taken apart a slice at a time instead of freed in one call.

When the last reference to a list of a million small maps goes, CPython frees the list
and every member it alone held in that one call: a job's data of many small values,
dropped when the job finished, held the event loop for tens of milliseconds (freeing
is as costly as making). The store hands such data here when it lets go of it (a
finished or deleted job whose data it kept apart); a task of the broker then calls
:meth:`Graveyard.dismantle` a slice at a time, with the loop given back between two:
a container is emptied from its end a run of members at a time, and a member that
holds many values (counted by :func:`~.value_count.weight`, however its containers
nest) is emptied the same way after it.

Only what nothing else refers to is taken apart: a value still held elsewhere (a reply
not sent yet, a schedule's template shared by its jobs) waits here until it is not,
and is let go of (freed by its last holder, as before) when it stays held for
:data:`HELD_TRIES` tries (the broker's task waits longer between tries the longer
they fail, up to a second). The reference count says so: this is CPython's rule, and
taking apart a value someone still reads would change what they read.

A value buried again while it waits here (its second holder let go of it too) is not
buried twice: each entry would count as a holder of the other, and neither would ever
be found alone.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Callable
from itertools import islice
from typing import Any, Final

from .value_count import RUN_MAX_VALUES, run_values

__all__ = ["Graveyard"]

#: Work aimed at per run, in seconds; runs scale to it from the pace of the last.
RUN_S: Final = 0.0002
FIRST_RUN: Final = 64
MAX_RUN: Final = 1 << 14
#: Tries before a value still held elsewhere is let go of (its holder frees it).
HELD_TRIES: Final = 100
#: References to a value held only by the caller of sys.getrefcount: its local name
#: and the call's argument.
_ALONE: Final = 2
_CONTAINERS: Final = frozenset({list, dict})


class Graveyard:
    """Values to take apart (see the module); ``wake`` is called when one is buried
    (the broker's task that dismantles them waits for it)."""

    __slots__ = ("_graves", "_buried", "_work", "_run", "wake", "freed")

    def __init__(self) -> None:
        # (value, tries so far): buried, not yet found alone
        self._graves: deque[tuple[Any, int]] = deque()
        # id() of each value in _graves (they are held there, so their ids stand)
        self._buried: set[int] = set()
        # containers being taken apart, found alone: the last is worked on first
        self._work: list[Any] = []
        self._run = FIRST_RUN
        self.wake: Callable[[], None] | None = None
        self.freed = 0  # containers taken apart (for tests and numbers)

    def bury(self, value: Any) -> None:
        """Take ``value`` apart later, if it is a container (anything else is left
        to be freed as usual)."""
        if type(value) in _CONTAINERS and id(value) not in self._buried:
            self._buried.add(id(value))
            self._graves.append((value, 0))
            if self.wake is not None:
                self.wake()

    @property
    def pending(self) -> bool:
        return bool(self._graves or self._work)

    def dismantle(self, over: Callable[[], bool]) -> bool:
        """Take apart what is here until ``over()`` says the slice is over or nothing
        is left that can be; True when values wait that are held elsewhere only (the
        caller tries again a little later), False when the work is done or the slice
        is over (call again: ``pending`` says whether anything is left)."""
        work = self._work
        while True:
            if work:
                self._take_apart_run(work)
            elif not self._open_a_grave():
                return bool(self._graves)
            if over():
                return False

    def _open_a_grave(self) -> bool:
        """Move one buried value that is held nowhere else to the work; False when
        every one left is held elsewhere (each counted a try)."""
        graves = self._graves
        for _ in range(len(graves)):
            value, tries = graves.popleft()
            if sys.getrefcount(value) <= _ALONE:
                self._buried.discard(id(value))
                self._work.append(value)
                return True
            if tries + 1 < HELD_TRIES:
                graves.append((value, tries + 1))
            else:  # let go of: its last holder frees it (or buries it again)
                self._buried.discard(id(value))
            del value
        return False

    def _take_apart_run(self, work: list[Any]) -> None:
        """One run of members taken off the last container of ``work``: as many as
        take about :data:`RUN_S` to free, at most as hold :data:`RUN_MAX_VALUES` values
        (a run found to hold more is left for a shorter one; a member holding more
        alone is opened, if nothing else holds it)."""
        value = work[-1]
        run = self._run
        started = time.perf_counter()
        # (a map's last values: those popitem takes, last in first out)
        tail = value[-run:] if type(value) is list else list(
            islice(reversed(value.values()), run))
        count = len(tail)
        held = run_values(tail) if count else 0
        if held > RUN_MAX_VALUES and count > 1:
            self._run = max(1, count * RUN_MAX_VALUES // held // 2)
            return  # (nothing taken: a shorter run next time)
        if type(value) is list:
            del value[-count:]
        else:
            popitem = value.popitem
            for _ in range(count):
                popitem()
        if not value:
            work.pop()
            self.freed += 1
        del value
        if held > RUN_MAX_VALUES:
            member = tail[0]
            if type(member) in _CONTAINERS and sys.getrefcount(member) <= _ALONE + 1:
                work.append(member)  # (+1: the tail)
            del member
        del tail  # the rest freed here: small members, or held elsewhere too
        spent = time.perf_counter() - started
        self._run = max(1, min(MAX_RUN, int(count * RUN_S / spent) if spent > 0
                               else run * 2)) if count else run
