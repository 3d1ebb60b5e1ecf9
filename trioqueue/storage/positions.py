"""Finding the n-th key of an ordered key range without walking the n keys before it.

A store that keeps finished jobs in a sorted key range (LMDB's ``finished_idx``) can
seek to a key but not to a position: "the 500,000th completed job" would be a walk of
500,000 keys (slow in py-lmdb, even with the skipping done in C). :class:`Positions`
remembers one *anchor* key every :data:`BLOCK` keys or so and how many keys each block
holds, so a position becomes a seek to the block's anchor plus a walk of less than two
blocks. Memory: one anchor per ~1,000 keys (about 100 bytes each), so 1M finished jobs
cost about 100 KB, not the keys themselves.

Block counts sit in a Fenwick tree, so a write moves a count in O(log blocks) and a
position is found in O(log blocks). A finish adds its key at the end of the range
(createdAt grows), which touches one node. Blocks split when a key range grows past
two blocks (reading the new anchors from the store, in a walk of that block) and merge
with a neighbour when both together fit in one; those structural changes rebuild the
tree, O(blocks), once per about a block of writes.

The anchors hold no job: block 0's anchor is the range's prefix (below every key in
it), and the other anchors may be keys deleted since; block ``i`` is every key ``k``
with ``anchors[i] <= k < anchors[i + 1]``. Nothing here is persisted: the adapter builds
it from the store when it opens and keeps it in step with each commit.

:func:`page_window` and :func:`check_page_limit` are the paging arithmetic both
adapters share.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable

BLOCK = 1024  # keys per block when built; a walk inside a block is at most twice this

# (anchor, step, count) -> the keys at offsets step, 2*step, ... below count, counting
# from the first key at or after anchor
KeysEvery = Callable[[bytes, int, int], list[bytes]]


def page_window(total: int, *, asc: bool, offset: int, limit: int) -> tuple[int, int]:
    """``(start, take)``: a page as ascending positions in a range of ``total`` keys.

    The page ``offset, limit`` in ascending order is positions ``[offset, offset +
    take)``; in descending order it is the same number of keys counted from the other
    end, which ascending is ``[total - offset - take, total - offset)`` (read forward,
    then reversed). A negative offset counts as 0; ``take`` is 0 past the end.
    """
    offset = max(offset, 0)
    if limit <= 0 or offset >= total:
        return 0, 0
    take = min(limit, total - offset)
    return (offset if asc else total - offset - take), take


def check_page_limit(limit: int) -> None:
    """A page of finished ids needs a positive limit: with 0 an empty page would come
    back that is never the last one, and a caller's loop would never end."""
    if limit < 1:
        raise ValueError(f"a page of finished ids needs a positive limit, not {limit!r}")


class Positions:
    """Per-block key counts of one sorted key range (see the module docstring)."""

    __slots__ = ("anchors", "counts", "block", "_tree", "_top", "_split", "_shrunk")

    def __init__(self, prefix: bytes, total: int, keys_every: KeysEvery,
                 block: int = BLOCK) -> None:
        """Build from the store: one walk of the range's ``total`` keys."""
        if block < 2:
            raise ValueError("a block holds at least 2 keys")
        self.block = block
        anchors = [prefix, *keys_every(prefix, block, total)] if total else [prefix]
        self.anchors = anchors
        full = len(anchors) - 1
        self.counts = [block] * full + [total - block * full]
        self._split: set[int] = set()
        self._shrunk: set[int] = set()
        self._rebuild()

    # --- the Fenwick tree over self.counts (1-based) ---------------------------------

    def _rebuild(self) -> None:
        counts = self.counts
        size = len(counts)
        tree = [0, *counts]
        for i in range(1, size + 1):
            parent = i + (i & -i)
            if parent <= size:
                tree[parent] += tree[i]
        self._tree = tree
        top = 1
        while top * 2 <= size:
            top *= 2
        self._top = top

    @property
    def total(self) -> int:
        return sum(self.counts)

    # --- writes ---------------------------------------------------------------------

    def _tree_add(self, block: int, delta: int) -> None:
        tree = self._tree
        size = len(tree) - 1
        i = block + 1
        while i <= size:
            tree[i] += delta
            i += i & -i

    def move(self, added: list[bytes], removed: list[bytes]) -> None:
        """Keys a commit inserted into and deleted from the range.

        One call per commit and range: this runs for every job that finishes or is
        deleted, so the tree moves once per block touched, not once per key. A finish
        usually lands in the last block (createdAt grows), so keys at or past the last
        anchor are counted without a search.
        """
        anchors = self.anchors
        last = len(anchors) - 1
        tail_anchor = anchors[last]
        tail = 0
        deltas: dict[int, int] = {}
        for key in added:
            if key >= tail_anchor:
                tail += 1
            else:
                j = bisect_right(anchors, key) - 1
                deltas[j] = deltas.get(j, 0) + 1
        for key in removed:
            if key >= tail_anchor:
                tail -= 1
            else:
                j = bisect_right(anchors, key) - 1
                deltas[j] = deltas.get(j, 0) - 1
        if tail:
            deltas[last] = tail
        counts = self.counts
        limit = 2 * self.block
        for j, delta in deltas.items():
            if not delta:
                continue
            counts[j] += delta
            self._tree_add(j, delta)
            if delta < 0:
                self._shrunk.add(j)
            elif counts[j] > limit:
                self._split.add(j)

    @property
    def unsettled(self) -> bool:
        """Whether :meth:`settle` has blocks to split or merge."""
        return bool(self._split or self._shrunk)

    def settle(self, keys_every: KeysEvery) -> None:
        """Split the blocks that grew past two blocks, merge small neighbours.

        Called after the writes of a commit were recorded, with a reader of the
        committed range; a split walks the block once to find its new anchors.
        """
        block = self.block
        anchors, counts = self.anchors, self.counts
        changed = False
        # Highest block first, so the indexes still to visit are not shifted.
        for j in sorted(self._split | self._shrunk, reverse=True):
            if j >= len(counts):
                continue
            if counts[j] > 2 * block:
                # cuts a block apart, the last piece at least a block long: the walk
                # stops a block short of the end of the block it splits
                cuts = keys_every(anchors[j], block, counts[j] - block + 1)
                anchors[j + 1 : j + 1] = cuts
                counts[j : j + 1] = [block] * len(cuts) + [counts[j] - block * len(cuts)]
                changed = True
            elif j + 1 < len(counts) and counts[j] + counts[j + 1] <= block:
                del anchors[j + 1]  # block j takes its successor's keys
                counts[j : j + 2] = [counts[j] + counts[j + 1]]
                changed = True
            elif j > 0 and counts[j - 1] + counts[j] <= block:
                del anchors[j]
                counts[j - 1 : j + 1] = [counts[j - 1] + counts[j]]
                changed = True
        self._split.clear()
        self._shrunk.clear()
        if changed:
            self._rebuild()

    # --- reads ----------------------------------------------------------------------

    def locate(self, position: int) -> tuple[bytes, int]:
        """``(anchor, skip)``: the ``position``-th key (0-based) of the range is the
        ``skip``-th key from the first key at or after ``anchor``.

        ``position`` must be below :attr:`total`; ``skip`` is below the block's count.
        """
        j, rest = self.locate_block(position)
        return self.anchors[j], rest

    def block_of(self, key: bytes) -> int:
        """The block a key of the range falls in (held or not)."""
        return max(bisect_right(self.anchors, key) - 1, 0)

    def before(self, block: int) -> int:
        """Keys in the blocks before ``block``: O(log blocks)."""
        tree = self._tree
        n = 0
        i = block
        while i > 0:
            n += tree[i]
            i -= i & -i
        return n

    def locate_block(self, position: int) -> tuple[int, int]:
        """``(block, skip)``: the ``position``-th key is the ``skip``-th of that block."""
        tree = self._tree
        size = len(tree) - 1
        j = 0  # blocks [0, j) lie wholly before position
        rest = position
        step = self._top
        while step:
            nxt = j + step
            if nxt <= size and tree[nxt] <= rest:
                j = nxt
                rest -= tree[nxt]
            step >>= 1
        return j, rest
