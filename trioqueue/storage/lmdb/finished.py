"""The LMDB adapter's finished-job index reads: by position and by cursor.

``finished_idx`` keys sort by (queue, state, createdAt, id), so one queue and state is
one key range (see :mod:`..keys`). Reading a page at an offset needs the key at that
position: for every range of four blocks of keys (4,096) or more, :class:`FinishedIndex`
keeps a :class:`~..positions.Positions` (anchors and block counts, in memory), built from
the store when it opens and kept in step with each commit by the adapter
(:meth:`FinishedIndex.after_commit`). Smaller ranges are simply walked from their start:
at most a few thousand keys, skipped in C.

Every function here runs inside a read transaction the caller holds, except the anchor
reads, which open their own (they run after a commit, on committed data).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from itertools import islice
from typing import Any

import lmdb

from .. import keys as K
from ..port import FinishedCursor, FinishedPage
from ..positions import BLOCK, Positions


class Moves:
    """What one commit does to the ``finished_idx`` ranges (prefixes): the net change of
    each range's count, and, for the ranges :class:`FinishedIndex` tracks, the keys
    added and removed (the positions follow those keys; an untracked range needs only
    its count, so the write loop asks ``tracked`` before it keeps a key).
    """

    __slots__ = ("deltas", "added", "removed")

    def __init__(self) -> None:
        self.deltas: dict[bytes, int] = {}
        self.added: defaultdict[bytes, list[bytes]] = defaultdict(list)
        self.removed: defaultdict[bytes, list[bytes]] = defaultdict(list)


class FinishedIndex:
    """Positions of the large finished ranges of one LMDB environment."""

    def __init__(self, env: lmdb.Environment, idx: Any, counts: Any,
                 block: int = BLOCK) -> None:
        self._env = env
        self._idx = idx
        self._counts = counts
        self.block = block
        # A range this long gets a Positions (a shorter one is walked from its start, a
        # few thousand keys skipped in C at most), and loses it again below one block:
        # the gap keeps a range that hovers around the threshold from being rebuilt.
        self.indexed_keys = 4 * block
        self._drop_below = block
        # prefix -> Positions, for the ranges long enough to need one
        self.tracked: dict[bytes, Positions] = {}
        with env.begin() as txn, txn.cursor(db=counts) as cur:
            sizes = [(bytes(k), K.decode_count(v)) for k, v in cur]
        for prefix, n in sizes:
            if n >= self.indexed_keys:
                self._build(prefix, n)

    @property
    def idx(self) -> Any:
        return self._idx

    def count(self, txn: lmdb.Transaction[bytes], prefix: bytes) -> int:
        """The stored count of a range, in ``txn``'s snapshot."""
        raw = txn.get(prefix, db=self._counts)
        return K.decode_count(raw) if raw is not None else 0

    def _build(self, prefix: bytes, total: int) -> None:
        self.tracked[prefix] = Positions(prefix, total, self._keys_every, self.block)

    def _keys_every(self, anchor: bytes, step: int, count: int) -> list[bytes]:
        """Keys at offsets ``step, 2*step, ...`` below ``count`` from ``anchor`` on."""
        with self._env.begin() as txn, txn.cursor(db=self._idx) as cur:
            if not cur.set_range(anchor):
                return []
            return list(islice(cur.iternext(keys=True, values=False), step, count, step))

    def after_commit(self, moves: Moves, sizes: dict[bytes, int]) -> None:
        """Bring the positions in step with a commit that is now durable.

        ``moves`` are the index keys the commit added and removed (a re-finish may move
        a key between blocks and leave the count as it was), ``sizes`` the new count
        of every range whose count changed. A range that grew to :attr:`indexed_keys`
        is built now (a walk of that range, once); one that shrank below a block's
        worth is dropped.
        """
        tracked = self.tracked
        # keys were kept for tracked ranges only, and none has been dropped since
        moved = moves.added.keys() | moves.removed.keys() if moves.added or moves.removed else ()
        for prefix in moved:
            tracked[prefix].move(moves.added.get(prefix, []), moves.removed.get(prefix, []))
        for prefix, n in sizes.items():
            if prefix not in tracked:
                if n >= self.indexed_keys:
                    self._build(prefix, n)
            elif n < self._drop_below:
                del tracked[prefix]
        for prefix in moved:
            kept = tracked.get(prefix)
            if kept is not None and kept.unsettled:
                kept.settle(self._keys_every)

    def job_keys_at(self, txn: lmdb.Transaction[bytes], prefix: bytes, start: int,
                    take: int) -> list[bytes]:
        """Job keys of the ``take`` index entries from ascending position ``start``.

        ``start`` and ``take`` come from the exact count, so the skipped keys are not
        checked against the prefix (``islice`` skips them in C); a collected key outside
        the prefix still ends the walk.
        """
        positions = self.tracked.get(prefix)
        anchor, skip = (prefix, start) if positions is None else positions.locate(start)
        cut = len(prefix) + K.CREATED_LEN
        out: list[bytes] = []
        with txn.cursor(db=self._idx) as cur:
            if not cur.set_range(anchor):
                return out
            for key in islice(cur.iternext(keys=True, values=False), skip, skip + take):
                if not key.startswith(prefix):
                    break
                out.append(key[cut:])
        return out


class RangeRanks:
    """Keys by position and positions by key in ``finished_idx`` ranges, for one read
    transaction (:meth:`~..port.Storage.finished_ranks`).

    LMDB finds a key, not a rank: a key's rank is its block's start (the positions'
    Fenwick tree) plus its place among the block's keys, so each block (or a whole
    untracked range, a few thousand keys at most) is read once per call, into a sorted
    list; the probes of one call then mostly fall into blocks already read.
    """

    __slots__ = ("_index", "_txn", "_blocks")

    def __init__(self, index: FinishedIndex, txn: lmdb.Transaction[bytes]) -> None:
        self._index = index
        self._txn = txn
        self._blocks: dict[tuple[bytes, int], list[bytes]] = {}

    def _block(self, prefix: bytes, j: int) -> list[bytes]:
        keys = self._blocks.get((prefix, j))
        if keys is None:
            positions = self._index.tracked.get(prefix)
            if positions is None:
                anchor, count = prefix, self._index.count(self._txn, prefix)
            else:
                anchor, count = positions.anchors[j], positions.counts[j]
            keys = []
            with self._txn.cursor(db=self._index.idx) as cur:
                # (the count is exact in this snapshot: every key read is the range's)
                if count and cur.set_range(anchor):
                    keys = list(islice(cur.iternext(keys=True, values=False), count))
            self._blocks[(prefix, j)] = keys
        return keys

    def key_at(self, prefix: bytes, position: int) -> bytes:
        positions = self._index.tracked.get(prefix)
        j, skip = (0, position) if positions is None else positions.locate_block(position)
        return self._block(prefix, j)[skip]

    def below(self, prefix: bytes, key: bytes) -> int:
        """How many keys of the range ``prefix`` sort before ``key``."""
        positions = self._index.tracked.get(prefix)
        if positions is None:
            return bisect_left(self._block(prefix, 0), key)
        j = positions.block_of(key)
        return positions.before(j) + bisect_left(self._block(prefix, j), key)


def ids_page(txn: lmdb.Transaction[bytes], idx: Any, prefix: bytes,
             after: FinishedCursor | None, limit: int) -> FinishedPage:
    """:meth:`~trioqueue.storage.port.Storage.finished_ids_page` of one range."""
    start = prefix if after is None else K.idx_seek_key(prefix, after)
    keys = [key for key, _ in scan(txn, idx, start, prefix, limit)]
    return K.idx_page(keys, len(prefix), limit)


def scan(txn: Any, db: Any, start: bytes, prefix: bytes, limit: int | None, *,
         values: bool = False) -> list[tuple[bytes, bytes]]:
    """Keys (and values) from ``start`` on while they begin with ``prefix``, at most
    ``limit`` of them."""
    out: list[tuple[bytes, bytes]] = []
    with txn.cursor(db=db) as cur:
        ok = cur.set_range(start)
        while ok:
            key = cur.key()
            if not key.startswith(prefix):
                break
            out.append((key, cur.value() if values else b""))
            if limit is not None and len(out) >= limit:
                break
            ok = cur.next()
    return out
