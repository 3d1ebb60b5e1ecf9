"""``finished_ranks``: the job at a position of one finished state's (createdAt, id)
order, and how many jobs of the other finished state come before it; what GetJobs'
search over finished and live jobs together asks the store (core/queue/listing.py).

Each store is checked against the brute-force order (memory, LMDB with its default
blocks and with blocks of two keys, so positions split and merge blocks all the time,
and PostgreSQL); LMDB is also shown to read a few blocks per probe, not the range.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

import pytest

from trioqueue.storage.lmdb import finished as lmdb_finished
from trioqueue.storage.lmdb.store import LmdbStorage
from trioqueue.storage.port import Storage

from .stores import MIB
from .test_storage import apply, delete, finish, paged, rec

__all__ = ["paged"]  # (the fixture, imported for its use here)

STATES = ("completed", "failed")


def _order(jobs: dict[str, tuple[str, int]], state: str) -> list[tuple[int, str]]:
    return sorted((created, job_id) for job_id, (s, created) in jobs.items() if s == state)


def _ranks_match(store: Storage, jobs: dict[str, tuple[str, int]]) -> None:
    for state in STATES:
        other = STATES[1 - STATES.index(state)]
        mine, theirs = _order(jobs, state), _order(jobs, other)
        assert store.count_finished("q", state) == len(mine)
        positions = list(range(len(mine)))
        want = [(created, job_id, (bisect_left(theirs, (created, job_id)),))
                for created, job_id in mine]
        assert store.finished_ranks("q", state, positions, (other,)) == want
        alone = store.finished_ranks("q", state, positions[1::3], ())
        assert alone == [(c, i, ()) for c, i, _ in want[1::3]]
        assert store.finished_ranks("q", state, [], (other,)) == []


def test_ranks_at_every_position_after_inserts_deletes_and_moves(paged: Storage) -> None:
    # interleaved states, createdAt ties (ids order them), negative times, neighbours
    jobs = {f"j{i:02d}": (STATES[(i * 5) % 3 == 0], (i * 7) % 11 - 3) for i in range(40)}
    apply(paged, *(finish(rec(j, state=s, created=c)) for j, (s, c) in jobs.items()))
    apply(paged, finish(rec("elsewhere", queue="q2", state="failed", created=0)),
          finish(rec("prefix", queue="q-", state="completed", created=0)),
          ("put_job", rec("live", created=0)))
    _ranks_match(paged, jobs)
    doomed = sorted(jobs)[3:30:4]
    apply(paged, *(delete(j) for j in doomed))
    for j in doomed:
        del jobs[j]
    _ranks_match(paged, jobs)
    # a re-finish moves a job to the other state, and later in the order
    jobs["j05"] = ("failed", 40)
    jobs["j06"] = ("completed", -9)
    apply(paged, finish(rec("j05", state="failed", created=40)),
          finish(rec("j06", state="completed", created=-9)))
    _ranks_match(paged, jobs)


def test_ranks_of_an_unknown_queue_and_bad_state(paged: Storage) -> None:
    apply(paged, finish(rec("a", state="completed", created=1)))
    assert paged.finished_ranks("x" * 600, "failed", [0], ("completed",)) == []
    with pytest.raises(ValueError):
        paged.finished_ranks("q", "active", [0], ())
    with pytest.raises(ValueError):
        paged.finished_ranks("q", "completed", [0], ("waiting",))


def test_lmdb_ranks_read_a_few_blocks_per_probe(tmp_path: Any,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Probes near each other in 20,000 completed and 20,000 failed jobs (as a search's
    later rounds ask) read a block or two of each range, not the ranges; probes spread
    over the range read one block each."""
    store = LmdbStorage(tmp_path / "db", map_size_bytes=64 * MIB)
    n = 20_000
    apply(store, *(finish(rec(f"c{i:05d}", state="completed", created=2 * i))
                   for i in range(n)))
    apply(store, *(finish(rec(f"f{i:05d}", state="failed", created=2 * i + 1))
                   for i in range(n)))
    read: list[int] = []
    real_block = lmdb_finished.RangeRanks._block

    def block(self: Any, prefix: bytes, j: int) -> list[bytes]:
        fresh = (prefix, j) not in self._blocks
        keys = real_block(self, prefix, j)
        if fresh:
            read.append(len(keys))
        return keys

    monkeypatch.setattr(lmdb_finished.RangeRanks, "_block", block)
    near = list(range(12_000, 12_064))
    got = store.finished_ranks("q", "completed", near, ("failed",))
    assert got == [(2 * i, f"c{i:05d}", (i,)) for i in near]
    assert len(read) <= 4 and sum(read) <= 4 * 2 * 1024, read
    read.clear()
    spread = list(range(0, n, n // 16))
    got = store.finished_ranks("q", "failed", spread, ("completed",))
    assert got == [(2 * i + 1, f"f{i:05d}", (i + 1,)) for i in spread]
    assert len(read) <= 2 * len(spread) and sum(read) <= 2 * len(spread) * 2 * 1024
    store.close()
