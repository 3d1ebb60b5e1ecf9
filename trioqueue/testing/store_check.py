"""Check that an LMDB data directory is consistent with itself.

After a crash every index must agree with the records it points at; a write that was
half applied would show here. Opens the store read-only (the broker must be stopped),
walks every sub-database once, and returns what it found wrong (empty: consistent):

- every live record sits under its own id and is in a live state, every finished one
  in a finished state, and no id is both live and finished;
- every finished record has exactly its ``finished_idx`` entry, and every entry points
  at a finished record of that queue, state and creation time;
- each ``counts`` value equals the number of index entries under its prefix;
- a stored result belongs to a completed job, a dependency row to a job that exists.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import lmdb

from ..core.job import FINISHED_STATES, LIVE_STATES
from ..storage import keys as K


def check_lmdb_store(path: str | os.PathLike[str]) -> list[str]:
    env = lmdb.open(os.fspath(path), readonly=True, lock=False, max_dbs=16, subdir=True)
    try:
        with env.begin() as txn:
            dbs = {name: env.open_db(name, txn=txn, create=False) for name in
                   (K.DB_LIVE, K.DB_FINISHED, K.DB_FINISHED_IDX, K.DB_RESULTS,
                    K.DB_COUNTS, K.DB_DEPS)}
            return _check(txn, dbs)
    finally:
        env.close()


def _items(txn: Any, db: Any) -> list[tuple[bytes, bytes]]:
    with txn.cursor(db=db) as cur:
        return [(bytes(k), bytes(v)) for k, v in cur]


def _records(txn: Any, db: Any, kind: str, states: frozenset[str],
             problems: list[str]) -> dict[bytes, dict[str, Any]]:
    """The records of one table, each checked to sit under its own id, in a state of
    that table."""
    out: dict[bytes, dict[str, Any]] = {}
    for key, raw in _items(txn, db):
        record = out[key] = K.decode_value(raw)
        if K.job_key(record.get("id", "")) != key:
            problems.append(f"{kind} record under {key!r} says id {record.get('id')!r}")
        if record.get("state") not in states:
            problems.append(f"{kind} record {key!r} in state {record.get('state')!r}")
    return out


def _check(txn: Any, dbs: dict[bytes, Any]) -> list[str]:
    problems: list[str] = []
    live = _records(txn, dbs[K.DB_LIVE], "live", LIVE_STATES, problems)
    finished = _records(txn, dbs[K.DB_FINISHED], "finished", FINISHED_STATES, problems)
    for key in sorted(live.keys() & finished.keys()):
        problems.append(f"{key!r} is both live and finished")
    expected_idx: dict[bytes, bytes] = {}
    for key, record in finished.items():
        if record.get("state") in FINISHED_STATES:
            idx_key, _ = K.record_index_keys(record, key)
            expected_idx[idx_key] = key
    found_idx = {key for key, _ in _items(txn, dbs[K.DB_FINISHED_IDX])}
    for idx_key in sorted(found_idx - set(expected_idx)):
        problems.append(f"index entry {idx_key!r} points at no finished record")
    for idx_key in sorted(set(expected_idx) - found_idx):
        problems.append(f"finished record {expected_idx[idx_key]!r} has no index entry")
    per_prefix: Counter[bytes] = Counter()
    for idx_key in found_idx:
        queue, state, _, _ = K.split_finished_idx_key(idx_key)
        per_prefix[K.finished_prefix(queue, state)] += 1
    counts = {key: K.decode_count(raw) for key, raw in _items(txn, dbs[K.DB_COUNTS])}
    for prefix in sorted(set(per_prefix) | set(counts)):
        if counts.get(prefix, 0) != per_prefix.get(prefix, 0):
            problems.append(f"count of {prefix!r} is {counts.get(prefix, 0)} but "
                            f"{per_prefix.get(prefix, 0)} jobs are indexed")
    for key, _ in _items(txn, dbs[K.DB_RESULTS]):
        owner = finished.get(key)
        if owner is None or owner.get("state") != "completed":
            problems.append(f"result stored for {key!r}, which is not a completed job")
    for key, _ in _items(txn, dbs[K.DB_DEPS]):
        parent, child = K.split_dep_key(key)
        jkey = K.job_key(parent)
        if jkey not in live and jkey not in finished:
            problems.append(f"dependency row {parent!r} <- {child!r} of a job that is gone")
    return problems
