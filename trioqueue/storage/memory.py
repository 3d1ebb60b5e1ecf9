"""The in-memory store: dicts holding exactly the bytes the LMDB adapter would store.

Used by tests and ``--memory``. Operations are checked by :mod:`.ops` like any store's;
keys and values then come from LMDB's layout (:mod:`.keys`), so the ordering, the key
limits (``ValueError`` on overlong keys) and copy semantics are those of
:mod:`.lmdb.store`: a stored record never aliases the caller's dict, and every read
decodes a fresh copy.

:meth:`MemoryStorage.apply` is atomic: operations are validated and encoded first, then
applied while an undo log is kept; if anything fails (including the simulated
``max_bytes`` limit) the log is played back and nothing of the call remains.

Finished jobs of one queue and state are a sorted list of index keys, so a page at any
offset is a slice, O(page); inserting into the middle of a list moves the keys after it
(a memmove), but a finish lands at the end (createdAt grows).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from ..core.large_values.graveyard import Graveyard
from ..core.writes import Writes
from . import encoding as E
from . import keys as K
from .kept_data import (
    PACKED_MIN_BYTES,
    KeptData,
    Row,
    put_data_back,
    read_result,
    read_row,
    with_data,
)
from .kept_outcomes import joined_outcome, kept_stub
from .keyed_reads import KeyedFinishedReads
from .lmdb.ahead import AHEAD_PIECE_BYTES
from .ops import validate_writes
from .port import FinishedCursor, FinishedPage, Recovered, Space, Storage, StorageFullError
from .positions import page_window
from .value_pieces import PackedRecords

_MISSING: Any = object()


class MemoryStorage(Storage):
    """A :class:`~trioqueue.storage.port.Storage` in dicts.

    ``max_bytes`` simulates a full store: when applying a call would make the total
    size (every key plus every value, counts as 8 bytes, index entries as their key)
    exceed it, :class:`~trioqueue.storage.port.StorageFullError` is raised and nothing
    is applied.
    """

    def __init__(self, *, max_bytes: int | None = None) -> None:
        self._max_bytes = max_bytes
        self._live: dict[bytes, bytes] = {}
        self._finished: dict[bytes, bytes] = {}
        self._results: dict[bytes, bytes] = {}
        self._queue_meta: dict[bytes, bytes] = {}
        self._broker: dict[bytes, bytes] = {}  # the broker's registries (keys.broker_key)
        self._counts: dict[bytes, bytes] = {}
        # finished prefix (queue + NUL + state byte) -> sorted finished_idx keys
        self._idx: dict[bytes, list[bytes]] = {}
        # deps prefix (one parent) -> {deps key: value}: the LMDB rows grouped by parent,
        # so deleting a parent drops one dict instead of scanning every row
        self._deps: dict[bytes, dict[bytes, bytes]] = {}
        self._data: dict[bytes, bytes] = {}  # large data kept apart (kept_data.py)
        self._ahead: dict[bytes, Any] = {}  # pieces written ahead (lmdb/ahead.py)
        self._claims: dict[bytes, bytes] = {}
        self._progress_claims: dict[bytes, bytes] = {}  # (kept_progress.py)
        self._outcome_claims: dict[bytes, bytes] = {}  # deps key -> (kept_outcomes.py)
        self._kept = KeptData(self.drop_ahead_pieces)
        self._reads = MemoryReads({
            K.DB_LIVE: self._live, K.DB_FINISHED: self._finished, K.DB_RESULTS: self._results,
            K.DB_QUEUE_META: self._queue_meta, K.DB_BROKER: self._broker,
            K.DB_COUNTS: self._counts, K.DB_FINISHED_IDX: self._idx, K.DB_DEPS: self._deps,
            K.DB_DATA: self._data, K.DB_AHEAD: self._ahead,
            K.DB_OUTCOME_CLAIMS: self._outcome_claims}, self._kept)
        self._listings = KeyedFinishedReads(self._reads)
        self._bytes = 0
        self._live_bytes = 0  # of _bytes: the live records (keys and values)
        self._closed = False

    @property
    def size_bytes(self) -> int:
        """Total stored bytes, as counted against ``max_bytes``."""
        return self._bytes

    @property
    def max_bytes(self) -> int | None:
        return self._max_bytes

    def used_bytes(self) -> int:
        return self._bytes

    def space(self) -> Space:
        return Space(self._bytes, self._live_bytes, len(self._live))

    # --- writes ---------------------------------------------------------------------

    def apply(self, batches: Sequence[Writes]) -> None:
        self._check_open()
        # ValueError on bad input, before any change
        undo: list[Callable[[], None]] = []
        try:
            ops = E.encode_ops(validate_writes(batches), self._kept)
            for op in ops:
                self._apply_one(op, undo)
            limit = self._max_bytes
            if limit is not None and self._bytes > limit:
                raise StorageFullError(
                    f"memory store would hold {self._bytes} bytes, over max_bytes={limit}"
                )
        except BaseException:
            for action in reversed(undo):
                action()
            if self._kept.staging:
                self._kept.discard()
            raise
        if self._kept.staging:  # (commonly not: small records only)
            self._kept.settle()

    def _apply_one(self, op: tuple[Any, ...], undo: list[Callable[[], None]]) -> None:
        kind = op[0]
        if kind == E.OP_PUTS:
            live = self._live
            for key, value in op[1]:
                self._set(live, key, value, undo)
        elif kind == E.OP_FINISH:
            _, jkey, value, idx_key, ckey, result = op
            self._set(self._live, jkey, _MISSING, undo)
            old = self._set(self._finished, jkey, value, undo)
            if old is not _MISSING:
                self._unindex(jkey, old, undo)
                if result is None:
                    self._set(self._results, jkey, _MISSING, undo)
            self._index_add(ckey, idx_key, undo)
            self._count_add(ckey, 1, undo)
            if result is not None:
                self._set(self._results, jkey, result, undo)
        elif kind == E.OP_DELETE:
            _, jkey, dep_prefix = op
            self._set(self._live, jkey, _MISSING, undo)
            old = self._set(self._finished, jkey, _MISSING, undo)
            if old is not _MISSING:
                self._unindex(jkey, old, undo)
                self._set(self._results, jkey, _MISSING, undo)
            if dep_prefix is not None:
                self._drop_deps(dep_prefix, undo)
            if self._data:
                self._set(self._data, jkey, _MISSING, undo)
            if self._claims:
                self._drop_claim(jkey, undo)
            if self._progress_claims:
                self._drop_claim(jkey, undo, self._progress_claims)
        else:
            self._apply_other(op, undo)

    def _apply_other(self, op: tuple[Any, ...], undo: list[Callable[[], None]]) -> None:
        """OP_DEP, OP_DATA, OP_CLAIM, OP_BROKER or OP_META."""
        kind = op[0]
        if kind == E.OP_DEP:
            self._put_dep(op[1], op[2], undo)
            claims = self._outcome_claims
            old = claims.get(op[1]) if claims else None
            if old is not None and (len(op) == 3 or K.decode_claim(old)[0] != op[3]):
                self._drop_claim(op[1], undo, claims)
            if len(op) > 3:  # (its result written ahead: kept_outcomes.py)
                self._set(claims, op[1], K.encode_claim(op[3], op[4]), undo)
        elif kind == E.OP_DATA:
            if self._claims:
                self._drop_claim(op[1], undo)  # new data: the old rows go
            self._set(self._data, op[1], op[2], undo)
        elif kind == E.OP_CLAIM:
            _, jkey, row_key, pieces = op
            old = self._claims.get(jkey)
            if old is not None and K.decode_claim(old)[0] != row_key:
                self._drop_claim(jkey, undo)
            self._set(self._claims, jkey, K.encode_claim(row_key, pieces), undo)
        elif kind == E.OP_PROGRESS:
            _, jkey, row_key, pieces = op
            old = self._progress_claims.get(jkey)
            if old is not None and (not row_key or K.decode_claim(old)[0] != row_key):
                self._drop_claim(jkey, undo, self._progress_claims)
            if row_key:
                self._set(self._progress_claims, jkey, K.encode_claim(row_key, pieces),
                          undo)
        elif kind == E.OP_BROKER:
            self._set(self._broker, op[1], _MISSING if op[2] is None else op[2], undo)
        else:  # E.OP_META
            self._set(self._queue_meta, op[1], op[2], undo)

    def _set(
        self, table: dict[bytes, bytes], key: bytes, value: Any, undo: list[Callable[[], None]]
    ) -> Any:
        """Put ``value`` (or delete when it is ``_MISSING``); return the old value."""
        old = table.get(key, _MISSING)
        if old is _MISSING and value is _MISSING:
            return old
        if value is _MISSING:
            del table[key]
        else:
            table[key] = value
        delta = _size(key, value) - _size(key, old)
        self._bytes += delta
        live = table is self._live
        if live:
            self._live_bytes += delta

        def restore() -> None:
            if old is _MISSING:
                table.pop(key, None)
            else:
                table[key] = old
            self._bytes -= delta
            if live:
                self._live_bytes -= delta

        undo.append(restore)
        return old

    def _put_dep(self, key: bytes, value: bytes, undo: list[Callable[[], None]]) -> None:
        prefix = K.dep_key_prefix(key)
        group = self._deps.get(prefix)
        if group is None:
            group = self._deps[prefix] = {}
            new_group = group

            def forget() -> None:
                # runs after the row's own undo: drop the group if that left it empty
                if not new_group and self._deps.get(prefix) is new_group:
                    del self._deps[prefix]

            undo.append(forget)
        self._set(group, key, value, undo)

    def _drop_deps(self, prefix: bytes, undo: list[Callable[[], None]]) -> None:
        """Delete every row of one parent (undoable as a whole)."""
        group = self._deps.pop(prefix, None)
        if group is None:
            return
        if self._outcome_claims:
            for key in group:
                self._drop_claim(key, undo, self._outcome_claims)
        size = sum(_size(k, v) for k, v in group.items())
        self._bytes -= size

        def restore() -> None:
            # the group object comes back as it was when popped; undos recorded before
            # the pop (rows this same call put) then run on it and revert those rows
            self._deps[prefix] = group
            self._bytes += size

        undo.append(restore)

    def _unindex(self, jkey: bytes, old_value: bytes, undo: list[Callable[[], None]]) -> None:
        old_idx, old_ckey = K.record_index_keys(K.decode_value(old_value), jkey)
        self._index_remove(old_ckey, old_idx, undo)
        self._count_add(old_ckey, -1, undo)

    def _index_add(self, prefix: bytes, key: bytes, undo: list[Callable[[], None]]) -> None:
        entries = self._idx.setdefault(prefix, [])
        i = bisect_left(entries, key)
        if i < len(entries) and entries[i] == key:
            return
        entries.insert(i, key)
        self._bytes += len(key)

        def restore() -> None:
            entries.remove(key)
            self._bytes -= len(key)

        undo.append(restore)

    def _index_remove(self, prefix: bytes, key: bytes, undo: list[Callable[[], None]]) -> None:
        entries = self._idx.get(prefix)
        if not entries:
            return
        i = bisect_left(entries, key)
        if i == len(entries) or entries[i] != key:
            return
        del entries[i]
        self._bytes -= len(key)

        def restore() -> None:
            insort(entries, key)
            self._bytes += len(key)

        undo.append(restore)

    def _count_add(self, ckey: bytes, delta: int, undo: list[Callable[[], None]]) -> None:
        raw = self._counts.get(ckey)
        n = (K.decode_count(raw) if raw is not None else 0) + delta
        self._set(self._counts, ckey, K.encode_count(n) if n > 0 else _MISSING, undo)

    def sync(self) -> None:
        self._check_open()

    # --- reads (MemoryReads; listings: keyed_reads.KeyedFinishedReads) ---------------

    def load(self) -> Recovered:
        self._check_open()
        return self._reads.load()

    def get_finished(self, job_id: str) -> dict[str, Any] | None:
        self._check_open()
        return self._reads.finished(job_id, None)

    def get_finished_packed(self, job_id: str) -> dict[str, Any] | None:
        self._check_open()
        return self._reads.finished(job_id, PACKED_MIN_BYTES)

    def queues_of_finished(self, job_ids: Sequence[str]) -> dict[str, str]:
        self._check_open()
        return self._reads.queues_of_finished(job_ids)

    def get_result(self, job_id: str) -> tuple[bool, Any]:
        self._check_open()
        return self._reads.result(job_id, None)

    def get_result_packed(self, job_id: str) -> tuple[bool, Any]:
        self._check_open()
        return self._reads.result(job_id, PACKED_MIN_BYTES)

    def count_finished(self, queue: str, state: str) -> int:
        self._check_open()
        return self._listings.count_finished(queue, state)

    def list_finished(
        self, queue: str, state: str, *, asc: bool, offset: int, limit: int
    ) -> list[dict[str, Any]]:
        self._check_open()
        return self._listings.list_finished(queue, state, asc=asc, offset=offset,
                                            limit=limit)

    def list_finished_packed(
        self, queue: str, state: str, *, asc: bool, offset: int, limit: int
    ) -> list[dict[str, Any]] | PackedRecords:
        self._check_open()
        return self._listings.list_finished_packed(queue, state, asc=asc, offset=offset,
                                                   limit=limit)

    def finished_ranks(
        self, queue: str, state: str, positions: Sequence[int], others: Sequence[str]
    ) -> list[tuple[int, str, tuple[int, ...]]]:
        self._check_open()
        return self._listings.finished_ranks(queue, state, positions, others)

    def finished_ids_page(
        self, queue: str, state: str, *, after: FinishedCursor | None, limit: int
    ) -> FinishedPage:
        self._check_open()
        return self._reads.finished_ids_page(queue, state, after=after, limit=limit)

    def dep_outcomes(self, parent_id: str) -> dict[str, dict[str, Any]]:
        self._check_open()
        return self._reads.dep_outcomes(parent_id, None)

    def dep_outcomes_packed(self, parent_id: str) -> dict[str, Any]:
        self._check_open()
        return self._reads.dep_outcomes(parent_id, PACKED_MIN_BYTES)

    # --- writes ahead (see lmdb/ahead.py) ------------------------------------------

    ahead_piece_bytes = AHEAD_PIECE_BYTES

    def write_ahead(self, row_key: bytes, index: int, piece: Row) -> None:
        key = K.ahead_piece_key(row_key, index)
        size = len(key) + len(piece)
        limit = self._max_bytes
        if limit is not None and self._bytes + size > limit:
            raise StorageFullError("no room to write a job's data ahead")
        self._ahead[key] = bytes(piece)
        self._bytes += size

    def drop_ahead_pieces(self, row_key: bytes, pieces: int) -> None:
        self._delete_pieces(row_key, pieces, [])

    def _delete_pieces(self, row_key: bytes, pieces: int, undo: list[Callable[[], None]]
                       ) -> None:
        for index in range(pieces):
            self._set(self._ahead, K.ahead_piece_key(row_key, index), _MISSING, undo)

    # --- rows written or encoded ahead of their records (kept_data.KeptData) ------------

    keeps_values_ahead = True

    def expect_ahead(self, text: Any, row_key: bytes, pieces: int) -> None:
        self._kept.expect_ahead(text, row_key, pieces)

    def expect_encoded(self, data: Any, row: bytes) -> None:
        self._kept.expect_encoded(data, row)

    def release_ahead(self, text: Any) -> None:
        self._kept.release_ahead(text)

    def expect_result(self, result: Any, row: bytes) -> None:
        self._kept.expect_result(result, row)

    def release_result(self, result: Any) -> None:
        self._kept.release_result(result)

    def expect_progress(self, text: str, row_key: bytes, pieces: int) -> None:
        self._kept.expect_progress(text, row_key, pieces)

    def release_progress(self, text: str) -> None:
        self._kept.release_progress(text)

    def keep_encoded(self, data: Any, encoded: bytes) -> None:
        self._kept.keep_encoded(data, encoded)

    def drop_encoded(self, data: Any) -> None:
        self._kept.drop_encoded(data)

    def encoded_of(self, data: Any) -> bytes | None:
        return self._kept.encoded_of(data)

    def expect_outcome(self, result: Any, row_key: bytes, pieces: int) -> None:
        self._kept.expect_outcome(result, row_key, pieces)

    def release_outcome(self, result: Any) -> None:
        self._kept.release_outcome(result)

    def set_graveyard(self, graveyard: Graveyard) -> None:
        self._kept.set_graveyard(graveyard)

    def let_go(self, value: Any) -> None:
        self._kept.let_go(value)

    def _drop_claim(self, jkey: bytes, undo: list[Callable[[], None]],
                    claims: dict[bytes, bytes] | None = None) -> None:
        old = self._set(self._claims if claims is None else claims, jkey, _MISSING, undo)
        if old is not _MISSING:
            self._delete_pieces(*K.decode_claim(old), undo)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("storage is closed")

    # --- lifecycle ------------------------------------------------------------------

    def close(self) -> None:
        self._closed = True



class MemoryReads:
    """The reads of a :class:`MemoryStorage`, given its tables (by keys.py's database
    names: the dicts its writes change in place) and its kept data. The store checks
    that it is open before it asks; it is also the
    :class:`~.keyed_reads.FinishedRanges` of the store's listings."""

    __slots__ = ("_live", "_finished", "_results", "_queue_meta", "_broker", "_counts",
                 "_idx", "_deps", "_data", "_ahead", "_outcome_claims", "_kept")

    def __init__(self, tables: Mapping[bytes, Any], kept: KeptData) -> None:
        self._live: dict[bytes, bytes] = tables[K.DB_LIVE]
        self._finished: dict[bytes, bytes] = tables[K.DB_FINISHED]
        self._results: dict[bytes, bytes] = tables[K.DB_RESULTS]
        self._queue_meta: dict[bytes, bytes] = tables[K.DB_QUEUE_META]
        self._broker: dict[bytes, bytes] = tables[K.DB_BROKER]
        self._counts: dict[bytes, bytes] = tables[K.DB_COUNTS]
        self._idx: dict[bytes, list[bytes]] = tables[K.DB_FINISHED_IDX]
        self._deps: dict[bytes, dict[bytes, bytes]] = tables[K.DB_DEPS]
        self._data: dict[bytes, bytes] = tables[K.DB_DATA]
        self._ahead: dict[bytes, Any] = tables[K.DB_AHEAD]
        self._outcome_claims: dict[bytes, bytes] = tables[K.DB_OUTCOME_CLAIMS]
        self._kept = kept

    def load(self) -> Recovered:
        loads = K.decode_value
        live_jobs = [loads(self._live[k]) for k in sorted(self._live)]
        put_data_back(live_jobs, self.data_at, loads, self._kept)
        return Recovered(
            live_jobs=live_jobs,
            queue_meta={
                K.decode_queue_key(k): loads(self._queue_meta[k]) for k in sorted(self._queue_meta)
            },
            finished_counts={
                K.decode_count_key(k): K.decode_count(self._counts[k]) for k in sorted(self._counts)
            },
            broker_records=K.decode_broker_rows(
                (k, self._broker[k]) for k in sorted(self._broker)),
        )

    def finished(self, job_id: str, packed_min: int | None) -> dict[str, Any] | None:
        jkey = K.lookup_job_key(job_id)
        raw = None if jkey is None else self._finished.get(jkey)
        if raw is None or jkey is None:
            return None
        return with_data(K.decode_value(raw), partial(self.data_at, jkey), K.decode_value,
                         packed_min)

    def queues_of_finished(self, job_ids: Sequence[str]) -> dict[str, str]:
        """Job id -> queue, from the records alone (data kept apart is not read)."""
        found = {}
        for job_id in job_ids:
            jkey = K.lookup_job_key(job_id)
            raw = None if jkey is None else self._finished.get(jkey)
            if raw is not None:
                found[job_id] = K.decode_value(raw)["queue"]
        return found

    def data_at(self, jkey: bytes, kept: Any) -> bytes | None:
        if type(kept) is not list:
            return self._data.get(jkey)
        parts: list[bytes] = []
        for index in range(kept[2]):
            part = self._ahead.get(K.ahead_piece_key(kept[1], index))
            if part is None:
                return None
            parts.append(part)
        return b"".join(parts)

    def result(self, job_id: str, packed_min: int | None) -> tuple[bool, Any]:
        jkey = K.lookup_job_key(job_id)
        return read_result(None if jkey is None else self._results.get(jkey), packed_min)

    def count_at(self, prefix: bytes) -> int:
        raw = self._counts.get(prefix)
        return K.decode_count(raw) if raw is not None else 0

    def window_at(
        self, prefix: bytes, *, asc: bool, offset: int, limit: int
    ) -> list[bytes | None]:
        entries = self._idx.get(prefix, [])
        start, take = page_window(len(entries), asc=asc, offset=offset, limit=limit)
        window = entries[start : start + take]
        if not asc:
            window.reverse()
        cut = len(prefix) + K.CREATED_LEN
        return [self._finished.get(key[cut:]) for key in window]

    def ranks_at(
        self, prefix: bytes, positions: Sequence[int], others: Sequence[bytes]
    ) -> list[tuple[bytes, tuple[int, ...]]]:
        entries = self._idx.get(prefix, [])
        ranges = [self._idx.get(other, []) for other in others]
        cut = len(prefix)
        out = []
        for position in positions:
            key = entries[position]
            out.append((key, tuple(bisect_left(keys, other + key[cut:])
                                   for other, keys in zip(others, ranges, strict=True))))
        return out

    def finished_ids_page(
        self, queue: str, state: str, *, after: FinishedCursor | None, limit: int
    ) -> FinishedPage:
        prefix = K.lookup_page_prefix(queue, state, limit)
        entries = None if prefix is None else self._idx.get(prefix)
        if prefix is None or not entries:  # no such range, or an empty one
            return FinishedPage([], None)
        start = 0 if after is None else bisect_left(entries, K.idx_seek_key(prefix, after))
        return K.idx_page(entries[start : start + limit], len(prefix), limit)

    def dep_outcomes(self, parent_id: str, packed_min: int | None) -> dict[str, Any]:
        prefix = K.lookup_dep_prefix(parent_id)
        group = None if prefix is None else self._deps.get(prefix)
        if not group:
            return {}
        return {K.dep_child_id(k): read_row(self._outcome_at(k, group[k]), packed_min)
                for k in sorted(group)}

    def _outcome_at(self, key: bytes, raw: bytes) -> bytes:
        """An outcome row whole (see lmdb.reads.LmdbReads._outcome_at)."""
        stub = kept_stub(raw) if self._outcome_claims else None
        if stub is None:
            return raw
        claim = self._outcome_claims.get(key)

        def pieces() -> list[bytes] | None:
            if claim is None:
                return None
            row_key, count = K.decode_claim(claim)
            parts = [self._ahead.get(K.ahead_piece_key(row_key, i)) for i in range(count)]
            return None if None in parts else parts  # type: ignore[return-value]

        return joined_outcome(stub, pieces, K.dep_child_id(key))


def _size(key: bytes, value: Any) -> int:
    return 0 if value is _MISSING else len(key) + len(value)
