"""The reads of the LMDB store (:mod:`.store`): recovery's load, finished jobs by
id and by page, results and dependency outcomes.

Each read is one short read transaction; values are copied out and decoded after it
ends where that is possible, so no reader holds a snapshot that keeps freed pages from
reuse. Large job data kept apart from its record (:mod:`..kept_data`) is put back here.
"""

from __future__ import annotations

import gc
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import lmdb

from .. import keys as K
from ..kept_data import (
    KeptData,
    put_data_back,
    read_result,
    read_row,
    with_data,
)
from ..kept_outcomes import joined_outcome, kept_stub
from ..port import FinishedCursor, FinishedPage, Recovered
from ..positions import page_window
from .ahead import AheadRows
from .finished import FinishedIndex, RangeRanks, ids_page, scan


class LmdbReads:
    """The reads of one LMDB store, given its environment, named databases, finished
    position index, kept data and ahead rows when the store opens. The store checks
    that it is open before it asks; it is also the :class:`~..keyed_reads.FinishedRanges`
    of the store's listings."""

    __slots__ = ("_env", "_live", "_finished", "_results", "_queue_meta", "_broker",
                 "_counts", "_deps", "_outcome_claims", "_data", "_idx", "_index", "_kept",
                 "_rows")

    def __init__(self, env: lmdb.Environment, dbs: Mapping[bytes, Any], index: FinishedIndex,
                 kept: KeptData, rows: AheadRows) -> None:
        self._env = env
        self._live = dbs[K.DB_LIVE]
        self._finished = dbs[K.DB_FINISHED]
        self._results = dbs[K.DB_RESULTS]
        self._queue_meta = dbs[K.DB_QUEUE_META]
        self._broker = dbs[K.DB_BROKER]
        self._counts = dbs[K.DB_COUNTS]
        self._deps = dbs[K.DB_DEPS]
        self._outcome_claims = dbs[K.DB_OUTCOME_CLAIMS]
        self._data = dbs[K.DB_DATA]
        self._idx = dbs[K.DB_FINISHED_IDX]
        self._index = index
        self._kept = kept
        self._rows = rows

    def load(self) -> Recovered:
        out = Recovered()
        loads = K.decode_value
        # Decoding 100k records makes millions of objects that all survive: the cyclic
        # GC would rescan them again and again (3x the decode time). None is garbage.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            with self._env.begin() as txn:
                with txn.cursor(db=self._live) as cur:
                    out.live_jobs = [loads(v) for v in cur.iternext(keys=False, values=True)]
                put_data_back(out.live_jobs, partial(self._kept_row, txn), loads, self._kept)
                with txn.cursor(db=self._queue_meta) as cur:
                    for k, v in cur:
                        out.queue_meta[K.decode_queue_key(k)] = loads(v)
                with txn.cursor(db=self._counts) as cur:
                    for k, v in cur:
                        out.finished_counts[K.decode_count_key(k)] = K.decode_count(v)
                with txn.cursor(db=self._broker) as cur:
                    out.broker_records = K.decode_broker_rows(cur)
        finally:
            if gc_was_enabled:
                gc.enable()
        return out

    def finished(self, job_id: str, packed_min: int | None) -> dict[str, Any] | None:
        jkey = K.lookup_job_key(job_id)
        if jkey is None:
            return None
        with self._env.begin() as txn:
            raw = txn.get(jkey, db=self._finished)
            if raw is None:
                return None
            return with_data(K.decode_value(raw), partial(self._kept_row, txn, jkey),
                             K.decode_value, packed_min)

    def queues_of_finished(self, job_ids: Sequence[str]) -> dict[str, str]:
        """Job id -> queue, from the records alone (data kept apart is not read)."""
        found = {}
        with self._env.begin() as txn:
            for job_id in job_ids:
                jkey = K.lookup_job_key(job_id)
                raw = None if jkey is None else txn.get(jkey, db=self._finished)
                if raw is not None:
                    found[job_id] = K.decode_value(raw)["queue"]
        return found

    def _kept_row(self, txn: lmdb.Transaction[bytes], jkey: bytes, kept: Any
                  ) -> bytes | None:
        """A kept record's data row: under its key in ``data``, or its pieces written
        ahead, joined (kept_data.py)."""
        if type(kept) is list:
            return self._rows.text(txn, kept[1], kept[2])
        return txn.get(jkey, db=self._data)

    def _outcome_at(self, txn: lmdb.Transaction[bytes], key: bytes, raw: bytes) -> bytes:
        """An outcome row whole: its result's pieces joined to it when they were
        written ahead (kept_outcomes.py)."""
        stub = kept_stub(raw)
        if stub is None:
            return raw
        claim = txn.get(key, db=self._outcome_claims)
        return joined_outcome(
            stub, lambda: None if claim is None else self._rows.parts(
                txn, *K.decode_claim(claim)), K.dep_child_id(key))

    def data_at(self, jkey: bytes, kept: Any) -> bytes | None:
        with self._env.begin() as txn:
            return self._kept_row(txn, jkey, kept)

    def result(self, job_id: str, packed_min: int | None) -> tuple[bool, Any]:
        jkey = K.lookup_job_key(job_id)
        if jkey is None:
            return False, None
        with self._env.begin() as txn:
            raw = txn.get(jkey, db=self._results)
        return read_result(raw, packed_min)

    def count_at(self, prefix: bytes) -> int:
        with self._env.begin() as txn:
            raw = txn.get(prefix, db=self._counts)
        return K.decode_count(raw) if raw is not None else 0

    def window_at(
        self, prefix: bytes, *, asc: bool, offset: int, limit: int
    ) -> list[bytes | None]:
        with self._env.begin() as txn:
            raw = txn.get(prefix, db=self._counts)
            total = K.decode_count(raw) if raw is not None else 0
            start, take = page_window(total, asc=asc, offset=offset, limit=limit)
            if not take:
                return []
            keys = self._index.job_keys_at(txn, prefix, start, take)
            if not asc:
                keys.reverse()
            finished = self._finished
            return [txn.get(jkey, db=finished) for jkey in keys]

    def ranks_at(
        self, prefix: bytes, positions: Sequence[int], others: Sequence[bytes]
    ) -> list[tuple[bytes, tuple[int, ...]]]:
        cut = len(prefix)
        out = []
        with self._env.begin() as txn:
            ranks = RangeRanks(self._index, txn)
            for position in positions:
                key = ranks.key_at(prefix, position)
                out.append((key, tuple(ranks.below(other, other + key[cut:])
                                       for other in others)))
        return out

    def finished_ids_page(
        self, queue: str, state: str, *, after: FinishedCursor | None, limit: int
    ) -> FinishedPage:
        prefix = K.lookup_page_prefix(queue, state, limit)
        if prefix is None:
            return FinishedPage([], None)
        with self._env.begin() as txn:
            return ids_page(txn, self._idx, prefix, after, limit)

    def dep_outcomes(self, parent_id: str, packed_min: int | None) -> dict[str, Any]:
        prefix = K.lookup_dep_prefix(parent_id)
        if prefix is None:
            return {}
        with self._env.begin() as txn:
            rows = scan(txn, self._deps, prefix, prefix, None, values=True)
            if rows and txn.stat(self._outcome_claims)["entries"]:
                rows = [(key, self._outcome_at(txn, key, value)) for key, value in rows]
        # decoded after the read transaction ends, so it stays short
        return {K.dep_child_id(k): read_row(v, packed_min) for k, v in rows}
