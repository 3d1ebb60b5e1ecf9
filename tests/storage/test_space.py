"""What a store says about its space (docs/durability.md, "Full storage"): ``space``,
``space_bound`` and ``finish_bytes``, the figures the broker admits new jobs by.

The promise checked here is the one admission rests on: once jobs are stored, pulling
them (their records grow) and finishing every one with a result and error within the
allowance never takes the store past ``used + finish_bytes(live)`` as measured before,
whatever the order the jobs finish in.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trioqueue.core.job import JobRecord
from trioqueue.core.writes import Writes
from trioqueue.storage import keys as K
from trioqueue.storage.lmdb.store import MIN_LIVE_NODE_BYTES, LmdbStorage
from trioqueue.storage.memory import MemoryStorage
from trioqueue.storage.port import Space, Storage
from trioqueue.testing.small_disk import CannotMount, small_tmpfs

from .stores import MIB, store_fixture

ALLOWANCE = 1024
T0 = 1_764_000_000_000
PAGE = 4096


store = store_fixture(64 * MIB)


def job(n: int, size: int) -> dict[str, Any]:
    # ids as the broker makes them: time-ordered, so pushes append to the B-tree
    return JobRecord(id=f"01a2{n:08x}-7000-8000-{n:012x}", queue="q", state="queued",
                     created_at=T0 + n, data={"pad": "d" * size}).to_record()


def commit(store: Storage, records: list[dict[str, Any]], finish: bool = False) -> None:
    w = Writes()
    for r in records:
        if finish:
            w.finish_job(r, True, {"summary": "r" * 700})
        else:
            w.put_job(r)
    store.apply([w])


def pulled(r: dict[str, Any]) -> dict[str, Any]:
    """The record as a pull and a failed attempt rewrite it: lock and timing fields,
    timeline entries, an error and a stack (within the allowance with the result)."""
    return {**r, "state": "active", "startedAt": T0 + 5, "attempts": 1,
            "lockToken": "01a23206-1d39-7116-b848-ad9e45f6c1dc",
            "timeline": [{"state": "waiting", "timestamp": T0},
                         {"state": "active", "timestamp": T0 + 5}]}


@pytest.mark.parametrize("order", ["fifo", "reverse", "shuffled"])
@pytest.mark.parametrize("size", [200, 1000, 1900, 5000])
def test_pulling_and_finishing_every_live_job_stays_within_finish_bytes(
    store: Storage, order: str, size: int
) -> None:
    jobs = [job(n, size) for n in range(240)]
    for start in range(0, len(jobs), 20):  # PUSHB-like batches
        commit(store, jobs[start:start + 20])
    before = store.space()
    assert before.live_jobs == len(jobs)
    assert 0 < before.live_bytes <= before.used_bytes
    ceiling = before.used_bytes + store.finish_bytes(
        before.live_bytes, before.live_jobs, ALLOWANCE)
    rng = random.Random(size)
    work = [pulled(r) for r in jobs]
    if order == "reverse":
        work.reverse()
    elif order == "shuffled":
        rng.shuffle(work)
    # every job active at once (their pages split), then finished in the order given
    for start in range(0, len(work), 60):
        commit(store, work[start:start + 60])
        assert store.used_bytes() <= ceiling
    for start in range(0, len(work), 7):
        commit(store, [{**r, "state": "completed"} for r in work[start:start + 7]],
               finish=True)
        assert store.used_bytes() <= ceiling, f"{start} finished"
    after = store.space()
    assert (after.live_jobs, after.live_bytes) == (0, 0)


def test_space_bound_bounds_space(tmp_path: Any) -> None:
    store = LmdbStorage(tmp_path / "db", map_size_bytes=16 * MIB)
    try:
        commit(store, [job(n, 50) for n in range(500)])
        exact, bound = store.space(), store.space_bound()
        assert all(b >= e for b, e in zip(bound, exact, strict=True)), (bound, exact)
    finally:
        store.close()


def test_the_smallest_live_record_is_at_least_min_live_node_bytes() -> None:
    """space_bound counts live jobs as the high-water mark over MIN_LIVE_NODE_BYTES:
    true only while no record can be smaller (one-letter id, no data)."""
    smallest = JobRecord(id="a", queue="q", state="queued", created_at=0).to_record()
    assert len(K.job_key("a")) + len(K.encode_value(smallest)) >= MIN_LIVE_NODE_BYTES


def test_finish_bytes_grows_with_what_is_live(store: Storage) -> None:
    assert store.finish_bytes(0, 0, ALLOWANCE) == 0
    one = store.finish_bytes(2000, 1, ALLOWANCE)
    assert one >= ALLOWANCE
    assert store.finish_bytes(4000, 2, ALLOWANCE) >= 2 * one - 1
    assert store.finish_bytes(2000, 1, 2 * ALLOWANCE) > one


def test_space_is_what_the_store_holds(store: Storage) -> None:
    assert store.space() == Space(store.used_bytes(), 0, 0)
    commit(store, [job(n, 100) for n in range(10)])
    space = store.space()
    assert space.used_bytes == store.used_bytes() and space.live_jobs == 10


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs; skipped, saying why, where mounting is not permitted."""
    try:
        with small_tmpfs(tmp_path / "disk", 8 * MIB) as mount_point:
            yield mount_point
    except CannotMount as exc:
        pytest.skip(str(exc))


def test_disk_bytes_is_what_the_store_could_reach_on_its_disk(small_disk: Path) -> None:
    """An LMDB store's pages in use can reach disk_bytes: its own growth does not
    change it (the file takes what the disk gives), another writer's file takes its
    size from it, and pages freed inside the file stay counted."""
    lmdb_store = LmdbStorage(small_disk / "data")
    try:
        before = lmdb_store.disk_bytes()
        assert before is not None and 7 * MIB < before <= 8 * MIB
        records = [job(n, 1000) for n in range(1000)]
        commit(lmdb_store, records)
        grown = lmdb_store.disk_bytes()
        assert grown is not None and abs(grown - before) <= 16 * PAGE
        assert lmdb_store.used_bytes() > MIB  # (it did grow)
        (small_disk / "log").write_bytes(b"l" * MIB)  # another writer of the disk
        shared = lmdb_store.disk_bytes()
        assert shared is not None and abs(grown - MIB - shared) <= 16 * PAGE
        w = Writes()
        for r in records:
            w.delete_job(r["id"])
        lmdb_store.apply([w])  # freed pages: reused inside the file, still counted
        emptied = lmdb_store.disk_bytes()
        assert emptied is not None and abs(emptied - shared) <= 16 * PAGE
    finally:
        lmdb_store.close()


def test_a_store_with_no_disk_of_its_own_has_no_disk_bytes() -> None:
    assert MemoryStorage().disk_bytes() is None
