"""A dict that never resizes more than a few thousand entries at once.

A Python dict grows by copying itself whole into a table three times as large: at
hundreds of thousands of entries that one insert is a long step (random writes into a
new index of tens of MB), and a queue's every other command, on every queue, waits for
it. Deletes never shrink a dict either, so a queue with steady churn resizes again each
time the deleted slots run out. The broker keeps a few maps with one entry per live job
(a queue's jobs and locks, the router's index); those are :class:`SplitDict`.

It is extendible hashing over plain dicts: a directory of ``2**depth`` slots, indexed by
the low bits of the key's hash, points at buckets; a bucket that passes
``BUCKET_MAX_ENTRIES`` splits in two by the next bit of the hash, which costs one pass
over that bucket alone (and, when the bucket already used every bit of the directory, a
doubling of the directory: a list of pointers, one per ``BUCKET_MAX_ENTRIES / 2`` keys
or so). So an insert costs at most one bucket's copy, whatever the size of the map, and
a lookup one more index than a dict's. Buckets never merge: like a dict, the map keeps
its size after deletes until :meth:`compact`.

The hot paths are in C (``_split_dict.c``, built with the package when a compiler is
there): written in Python, each lookup would cost about 1,300 instructions more than a
dict's, some 12% of a broker's work per pushed job. :class:`PySplitDict` is the same
algorithm in Python, used where the C form could not be built, and by the tests that
hold both to a dict's answers.

Iteration goes bucket by bucket, so it is not in insertion order; nothing that iterates
these maps relies on an order.
"""

from __future__ import annotations

import sys
from collections.abc import ItemsView, Iterator, MutableMapping, ValuesView
from typing import TYPE_CHECKING, Any, TypeVar

from . import native

K = TypeVar("K")
V = TypeVar("V")

# A bucket's split, or its own dict resize, is a pass over at most this many entries:
# about 1 ms on this machine kind.
BUCKET_MAX_ENTRIES = 8192
# Past this directory depth buckets only grow (a hash function that put more than
# BUCKET_MAX_ENTRIES keys on the same 22 low bits is not one Python has for str or int).
MAX_DEPTH = 22


class PySplitDict:
    """The algorithm in Python, with the C form's interface (see the module docstring)."""

    __slots__ = ("_dir", "_depths", "_limits", "_mask", "_buckets", "bucket_max_entries",
                 "_salt")
    _dir: list[dict[Any, Any]]
    _depths: list[int]
    _limits: list[int]
    _salt: int
    _mask: int
    _buckets: list[dict[Any, Any]]
    bucket_max_entries: int

    def __new__(cls, items: Any = (), *,
                bucket_max_entries: int = BUCKET_MAX_ENTRIES) -> PySplitDict:
        if bucket_max_entries < 1:
            raise ValueError("bucket_max_entries must be at least 1")
        self = super().__new__(cls)
        self.bucket_max_entries = bucket_max_entries
        self._salt = id(self) >> 4
        self.clear()
        return self

    def _limit(self, low: int, depth: int) -> int:
        """The size past which the bucket of hash bits ``low`` splits (see the C form's
        bucket_limit: spread between half of bucket_max_entries and all of it, so that
        the buckets of one depth do not all split at once)."""
        x = (((low ^ self._salt) + depth) * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 29
        half = self.bucket_max_entries // 2
        return self.bucket_max_entries - half + x % (half + 1)

    def clear(self) -> None:
        first: dict[Any, Any] = {}
        self._dir = [first]  # slot (hash & mask) -> bucket
        self._depths = [0]  # slot -> the number of hash bits its bucket uses
        self._mask = 0
        self._limits = [self._limit(0, 0)]  # slot -> the size past which it splits
        self._buckets = [first]  # each bucket once

    def get(self, key: Any, default: Any = None) -> Any:
        return self._dir[hash(key) & self._mask].get(key, default)

    def __getitem__(self, key: Any) -> Any:
        return self._dir[hash(key) & self._mask][key]

    def __contains__(self, key: object) -> bool:
        return key in self._dir[hash(key) & self._mask]

    def __setitem__(self, key: Any, value: Any) -> None:
        h = hash(key)
        bucket = self._dir[h & self._mask]
        bucket[key] = value
        while len(bucket) > self._limits[h & self._mask] and self._split(h & self._mask):
            # (all of it may have gone to one side: then that side splits again)
            bucket = self._dir[h & self._mask]

    def __delitem__(self, key: Any) -> None:
        del self._dir[hash(key) & self._mask][key]

    def pop(self, key: Any, *default: Any) -> Any:
        return self._dir[hash(key) & self._mask].pop(key, *default)

    def __len__(self) -> int:
        return sum(map(len, self._buckets))

    def _split(self, slot: int) -> bool:
        """Split the bucket of ``slot`` by its next hash bit; False past MAX_DEPTH."""
        depth = self._depths[slot]
        if depth >= MAX_DEPTH:
            return False
        if (1 << depth) > self._mask:  # the bucket uses every bit: double the directory
            self._dir += self._dir
            self._depths += self._depths
            self._limits += self._limits
            self._mask = len(self._dir) - 1
        old = self._dir[slot]
        bit = 1 << depth
        low: dict[Any, Any] = {}
        high: dict[Any, Any] = {}
        for key, value in old.items():
            (high if hash(key) & bit else low)[key] = value
        # Every slot that pointed at the old bucket shares its low ``depth`` bits.
        low_bits = slot & (bit - 1)
        limits = (self._limit(low_bits, depth + 1), self._limit(low_bits | bit, depth + 1))
        for i in range(low_bits, len(self._dir), bit):
            self._dir[i] = high if i & bit else low
            self._depths[i] = depth + 1
            self._limits[i] = limits[1] if i & bit else limits[0]
        buckets = self._buckets
        buckets[buckets.index(old)] = low
        buckets.append(high)
        return True

    def _replace_buckets(self, fresh: list[dict[Any, Any]]) -> None:
        """Put ``fresh`` (one dict per bucket, in order) in place of the buckets."""
        if len(fresh) != len(self._buckets):
            raise ValueError("one new bucket per bucket")
        by_id = {id(old): new for old, new in zip(self._buckets, fresh, strict=True)}
        self._dir = [by_id[id(bucket)] for bucket in self._dir]
        self._buckets = list(fresh)


_c = native.extension("trioqueue.core._split_dict")
SplitDictBase = _c.SplitDictBase if _c is not None else None

_Base: Any = SplitDictBase if SplitDictBase is not None else PySplitDict
IMPLEMENTATION = "C" if SplitDictBase is not None else "Python"


def _mapping_on(base: Any) -> Any:
    """The mapping class on top of ``base`` (the C or the Python form): what is not hot,
    in Python, and the rest of :class:`MutableMapping`'s interface."""

    class Split(base, MutableMapping):  # type: ignore[misc,valid-type,type-arg]
        __slots__ = ()

        def __init__(self, items: Any = (), *,
                     bucket_max_entries: int = BUCKET_MAX_ENTRIES) -> None:
            for key, value in dict(items).items():
                self[key] = value

        def __iter__(self) -> Iterator[Any]:
            for bucket in self._buckets:
                yield from bucket

        def values(self) -> ValuesView[Any]:
            return _Values(self)

        def items(self) -> ItemsView[Any, Any]:
            return _Items(self)

        def setdefault(self, key: Any, default: Any = None) -> Any:
            value = self.get(key, _MISSING)
            if value is _MISSING:
                self[key] = value = default
            return value

        def compact(self) -> None:
            """Copy each bucket that deletes left mostly empty (a dict keeps its table
            after deletes): after a Drain of a million jobs that is tens of MB. A pass
            over the live entries of those buckets, and over the directory."""
            self._replace_buckets([
                dict(bucket) if sys.getsizeof(bucket) > 128 * len(bucket) + 4096
                else bucket for bucket in self._buckets])

        def bucket_sizes(self) -> list[int]:
            """The number of entries of each bucket (what one split may have to copy)."""
            return [len(bucket) for bucket in self._buckets]

        def __sizeof__(self) -> int:
            # the object, its directory (a pointer and a depth per slot) and buckets
            return (object.__sizeof__(self) + 9 * (self._mask + 1)
                    + sys.getsizeof(self._buckets) + sum(map(sys.getsizeof, self._buckets)))

        def __repr__(self) -> str:
            return f"SplitDict({dict(self.items())!r})"

    return Split


if TYPE_CHECKING:
    class SplitDict(MutableMapping[K, V]):
        """The type checker's view of the class made below."""

        def __init__(self, items: Any = (), *,
                     bucket_max_entries: int = BUCKET_MAX_ENTRIES) -> None: ...
        def __getitem__(self, key: K) -> V: ...
        def __setitem__(self, key: K, value: V) -> None: ...
        def __delitem__(self, key: K) -> None: ...
        def __iter__(self) -> Iterator[K]: ...
        def __len__(self) -> int: ...
        def compact(self) -> None: ...
        def bucket_sizes(self) -> list[int]:
            return []
else:
    # A mutable mapping with bounded resizes (see the module docstring), on the C form
    # when it is built.
    SplitDict = _mapping_on(_Base)
    SplitDict.__name__ = SplitDict.__qualname__ = "SplitDict"
PySplitDictMapping: Any = _mapping_on(PySplitDict)  # the Python form, for its tests


class _Values(ValuesView[V]):
    """The values bucket by bucket (the mixin's would look every key up again)."""

    __slots__ = ()

    def __iter__(self) -> Iterator[V]:
        for bucket in self._mapping._buckets:  # type: ignore[attr-defined]
            yield from bucket.values()


class _Items(ItemsView[K, V]):
    __slots__ = ()

    def __iter__(self) -> Iterator[tuple[K, V]]:
        for bucket in self._mapping._buckets:  # type: ignore[attr-defined]
            yield from bucket.items()


_MISSING: Any = object()
