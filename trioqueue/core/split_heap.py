"""A min-heap that never copies more than one chunk of itself to grow.

``heapq`` keeps a heap in one Python list, and a list grows by copying itself into a
block an eighth larger. A queue's ready, delayed, lock and timeout heaps hold one entry
per job, so at a million jobs that copy is megabytes into memory never touched before:
its page faults make one long step, and every queue waits for it (measured: the slowest
slices of a PULLB at a million jobs were those that grew one of these heaps;
``bench_scale.py``). :class:`~trioqueue.core.split_dict.SplitDict` does the same for the maps.

So the entries live in chunks of at most ``CHUNK_ENTRIES``, each an ordinary heapq list.
Pushes go to the open chunk (the *tail*); a full tail is sealed and a new one opened.
A sealed chunk takes no more pushes, so its smallest entry only changes when it is
popped, and a small heap of ``(smallest entry, serial, chunk)``, one per sealed chunk,
finds the smallest overall against the tail's own head. No entry is ever stale there,
and no list is ever longer than a chunk (the small heap holds one entry per
``CHUNK_ENTRIES`` jobs). A push costs one heapq push into a list of at most a chunk, a
pop one or two heapq operations: O(log n) as before, plus a Python method call per
operation.

Entries are compared as heapq compares them (``<``), so they must be totally ordered;
equal entries may come out in any order, as with heapq.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from heapq import heapify, heappop, heappush, heapreplace
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison

T = TypeVar("T", bound="SupportsRichComparison")

# A chunk's list is 64 KB of pointers at most: growing it copies little, and a sealed
# chunk that empties frees its 8,192 entries in about half a millisecond.
CHUNK_ENTRIES = 8192


class SplitHeap(Generic[T]):
    """A min-heap of ``T``: :meth:`push`, :meth:`pop`, :meth:`first`, ``len``."""

    __slots__ = ("_tops", "_tail", "_len", "_serial", "_chunk_entries", "_swept")

    def __init__(self, items: Iterable[T] = (), *, chunk_entries: int = CHUNK_ENTRIES
                 ) -> None:
        if chunk_entries < 1:
            raise ValueError("chunk_entries must be at least 1")
        self._chunk_entries = chunk_entries
        # (smallest entry, serial, chunk) per sealed chunk; the serial breaks ties, so
        # two chunks' lists are never compared
        self._tops: list[tuple[T, int, list[T]]] = []
        self._tail: list[T] = []
        self._len = 0
        self._serial = 0
        self._swept = 0  # sweep's cursor: the serial of the last sealed chunk it filtered
        entries = list(items)
        for start in range(0, len(entries), chunk_entries):
            chunk = entries[start:start + chunk_entries]
            heapify(chunk)
            self._tail = chunk
            if len(chunk) >= chunk_entries:
                self._seal()
        self._len = len(entries)

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        return f"<SplitHeap of {self._len} entries, {len(self._tops)} sealed chunks>"

    def _seal(self) -> None:
        tail = self._tail
        self._serial += 1
        heappush(self._tops, (tail[0], self._serial, tail))
        self._tail = []

    def push(self, item: T) -> None:
        tail = self._tail
        if len(tail) >= self._chunk_entries:
            self._seal()
            tail = self._tail
        heappush(tail, item)
        self._len += 1

    def pop(self) -> T | None:
        """Remove and return the smallest entry; None when the heap is empty."""
        tail = self._tail
        tops = self._tops
        if tops:
            least, serial, chunk = tops[0]
            if not tail or least < tail[0]:  # type: ignore[operator]
                item = heappop(chunk)
                if chunk:
                    heapreplace(tops, (chunk[0], serial, chunk))
                else:
                    heappop(tops)
                self._len -= 1
                return item
        if tail:
            self._len -= 1
            return heappop(tail)
        return None

    def first(self) -> T | None:
        """The smallest entry, left in place; None when the heap is empty."""
        tail = self._tail
        tops = self._tops
        if tops:
            least = tops[0][0]
            if not tail or least < tail[0]:  # type: ignore[operator]
                return least
        return tail[0] if tail else None

    def trim(self, most: int) -> bool:
        """Drop up to ``most`` entries, whichever are cheapest to drop (for a heap whose
        entries are all stale, emptied a slice at a time); True while some are left.

        Entries go from the ends of the lists, which keeps every chunk a heap with the
        same head, so the heap stays valid between two calls."""
        tops = self._tops
        while most > 0 and self._len:
            if tops:
                chunk = tops[-1][2]  # the small heap's last entry: removing it keeps a heap
                if len(chunk) <= most:
                    del tops[-1]
                    taken = len(chunk)
                else:
                    del chunk[-most:]
                    taken = most
            else:
                taken = min(most, len(self._tail))
                del self._tail[len(self._tail) - taken:]
            most -= taken
            self._len -= taken
        return self._len > 0

    def sweep(self, keep: Callable[[T], bool]) -> int:
        """Drop the entries ``keep`` refuses from ONE list, the next in turn; returns
        how many went.

        For a heap with lazily deleted entries (a waiter answered early stays in it
        until it reaches the top): one call filters at most a chunk, so a caller can
        reclaim a large heap a bounded piece per step instead of rebuilding it whole
        in one long step. The sealed chunks are taken in the order they
        were sealed, then the tail, then round again. A sealed chunk left under a
        quarter full is merged into the tail, so chunks that sweeps thin out do not
        pile up; a chunk whose head went keeps its place in the small heap with its
        new head, so the heap stays valid between two calls.
        """
        tops = self._tops
        # the sealed chunk next in turn: the lowest serial above the last one swept
        turn = min(((top[1], i) for i, top in enumerate(tops) if top[1] > self._swept),
                   default=None)
        if turn is None:  # every sealed chunk swept since the last round: the tail's turn
            self._swept = 0
            tail = self._tail
            kept = [e for e in tail if keep(e)]
            dropped = len(tail) - len(kept)
            if dropped:
                heapify(kept)
                self._tail = kept
                self._len -= dropped
            return dropped
        serial, at = turn
        chunk = tops[at][2]
        self._swept = serial
        kept = [e for e in chunk if keep(e)]
        dropped = len(chunk) - len(kept)
        self._len -= dropped
        if len(kept) * 4 < self._chunk_entries:
            tops[at] = tops[-1]  # out of the small heap, its entries into the tail
            tops.pop()
            heapify(tops)
            self._len -= len(kept)
            for entry in kept:
                self.push(entry)
        elif dropped:
            heapify(kept)
            chunk[:] = kept
            tops[at] = (chunk[0], serial, chunk)
            heapify(tops)
        return dropped

    def chunk_lengths(self) -> list[int]:
        """The length of every list the heap holds (the tail's first): what a growth can
        copy. For tests and diagnostics."""
        return [len(self._tail)] + [len(chunk) for _, _, chunk in self._tops]
