"""The LMDB file's high-water mark without asking LMDB at every admission.

Admission asks the store for a cheap upper bound of its used bytes once per batch of
commands (``LmdbStorage.space_bound``): the file's high-water mark, from
``env.info()``. That call builds a dict of six fields, interning each key: about 9,000
instructions, 2.6% of the broker's whole cost of a one-at-a-time PUSH (callgrind). So
the mark is measured once, and each commit after it adds what it can have grown the
file by at most; the mark is measured again once that slack passes ``remeasure_bytes``
(or after a commit whose growth is not bounded here). The sum stays an upper bound:
refusals come from it no later than before, and near a full store the callers take the
exact figure anyway.

A commit of puts alone grows the file by at most the pages it writes: for each put, a
copy of its B-tree path and a split per level (``2 * DEPTH_PAGES``) and the overflow
pages of its value; per commit, the main database's records of the trees it changed
and the freelist's own update (``COMMIT_PAGES``), and the freelist's list of the pages
it freed (8 bytes a page). Deletes and finishes can touch many leaves (a range of
dependency records), so after them the mark is measured again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

from .. import encoding as E

# A B-tree of depth 8 with 4 KiB pages holds far more records than a map can.
DEPTH_PAGES = 8
COMMIT_PAGES = 4 * DEPTH_PAGES
REMEASURE_MAX_BYTES = 16 << 20
_value_of = itemgetter(1)  # of a (key, value) put


class HighWaterMark:
    """An upper bound of the file's high-water mark, measured now and then."""

    __slots__ = ("_measure", "_psize", "_mark", "_slack", "remeasure_bytes")

    def __init__(self, measure: Callable[[], int], psize: int, max_bytes: int) -> None:
        self._measure = measure  # the mark from LMDB itself, in bytes
        self._psize = psize
        self._mark: int | None = None
        self._slack = 0
        # A small store is measured at every admission, as before: its slack would
        # soon be a large part of it.
        self.remeasure_bytes = min(REMEASURE_MAX_BYTES, max_bytes // 64)

    def bound(self) -> int:
        if self._mark is None or self._slack > self.remeasure_bytes:
            self._mark = self._measure()
            self._slack = 0
        return self._mark + self._slack

    def committed(self, ops: Sequence[tuple[Any, ...]]) -> None:
        """``ops`` (encoded, :func:`~trioqueue.storage.encoding.encode_ops`) were committed."""
        if self._mark is None:
            return
        psize = self._psize
        pages = COMMIT_PAGES
        for op in ops:
            if op[0] != E.OP_PUTS:
                self._mark = None  # growth not bounded here: measure again
                return
            puts = op[1]
            # Per put: its path and splits, and its value's overflow pages, whose sum
            # of len // psize is at most the sum of the lengths // psize (an upper
            # bound still), summed at C speed rather than a loop turn per put.
            pages += (len(puts) * (2 * DEPTH_PAGES + 1)
                      + sum(map(len, map(_value_of, puts))) // psize)
        pages += pages * 8 // psize + 1
        self._slack += pages * psize

    def forget(self) -> None:
        """Measure again at the next bound (after writes not seen by :meth:`committed`)."""
        self._mark = None
