"""The finished-job reads that the key-value adapters (LMDB, in-memory) share.

Both keep finished jobs under :mod:`~trioqueue.storage.keys`' prefixes, with a count
per queue and state beside them, so finding the prefix and decoding the records are the
same; each adapter supplies only how it reads a count and a window of records under a
prefix (a :class:`FinishedRanges`). A store with another layout (PostgreSQL) implements
the :class:`~trioqueue.storage.port.Storage` methods itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any, Final, Protocol

from . import keys as K
from .kept_data import data_back, put_data_back
from .value_pieces import PackedRecords

#: A listing's page of records at least this long (their bytes) is left undecoded for
#: the caller (:meth:`KeyedFinishedReads.list_finished_packed`): below it, decoding
#: the page takes well under a millisecond.
PACKED_PAGE_MIN_BYTES: Final = 16 * 1024


class FinishedRanges(Protocol):
    """How one adapter reads a count and a window of records under a finished prefix."""

    def count_at(self, prefix: bytes) -> int:
        """The stored count of the finished prefix ``prefix`` (0 when none)."""

    def window_at(
        self, prefix: bytes, *, asc: bool, offset: int, limit: int
    ) -> list[bytes | None]:
        """The encoded records of a page under ``prefix``, in the page's order (None
        for an index entry whose record is gone), read in one snapshot."""

    def ranks_at(
        self, prefix: bytes, positions: Sequence[int], others: Sequence[bytes]
    ) -> list[tuple[bytes, tuple[int, ...]]]:
        """The index keys at ``positions`` (ascending) of the range ``prefix`` and, for
        each, how many keys of each range of ``others`` sort before the same
        (createdAt, job key) suffix; read in one snapshot."""

    def data_at(self, jkey: bytes, kept: Any) -> bytes | None:
        """The data row of a job whose data was kept apart where its record's
        KEPT_FIELD value ``kept`` says (kept_data.py)."""


class KeyedFinishedReads:
    """``count_finished``, ``list_finished`` and ``finished_ranks`` over keys.py's
    finished prefixes, given the adapter's :class:`FinishedRanges`. The store checks
    that it is open before it asks."""

    __slots__ = ("_ranges",)

    def __init__(self, ranges: FinishedRanges) -> None:
        self._ranges = ranges

    def count_finished(self, queue: str, state: str) -> int:
        prefix = K.lookup_prefix(queue, state)
        return 0 if prefix is None else self._ranges.count_at(prefix)

    def list_finished(
        self, queue: str, state: str, *, asc: bool, offset: int, limit: int
    ) -> list[dict[str, Any]]:
        prefix = K.lookup_prefix(queue, state)
        if prefix is None:
            return []
        ranges = self._ranges
        values = ranges.window_at(prefix, asc=asc, offset=offset, limit=limit)
        loads = K.decode_value  # after the adapter's read ended: it stays short
        records = [loads(value) for value in values if value is not None]
        put_data_back(records, ranges.data_at, loads)  # (a read of its own: kept_data.py)
        return records

    def list_finished_packed(
        self, queue: str, state: str, *, asc: bool, offset: int, limit: int
    ) -> list[dict[str, Any]] | PackedRecords:
        prefix = K.lookup_prefix(queue, state)
        if prefix is None:
            return []
        ranges = self._ranges
        values = [value for value in ranges.window_at(prefix, asc=asc, offset=offset,
                                                      limit=limit) if value is not None]
        loads = K.decode_value
        if sum(map(len, values)) >= PACKED_PAGE_MIN_BYTES:
            return PackedRecords(values, partial(data_back, ranges.data_at, loads))
        records = [loads(value) for value in values]
        put_data_back(records, ranges.data_at, loads, packed_min=0)
        return records

    def finished_ranks(
        self, queue: str, state: str, positions: Sequence[int], others: Sequence[str]
    ) -> list[tuple[int, str, tuple[int, ...]]]:
        prefix = K.lookup_prefix(queue, state)
        other_prefixes = [K.lookup_prefix(queue, other) for other in others]
        if prefix is None or not positions:
            return []
        # (the queue name is storable, so every other prefix is too: same length)
        found = self._ranges.ranks_at(prefix, positions, [p for p in other_prefixes if p])
        cut = len(prefix)
        return [(K.decode_created(key[cut : cut + K.CREATED_LEN]), K.idx_job_id(key, cut),
                 before) for key, before in found]
