"""CompactMemory's part in one queue (trioqueue.core.queue.compaction): stale heap
entries swept a list per step, live ones kept in order, empty map slots given back."""

from __future__ import annotations

from typing import Any

from trioqueue.core.options import parse_job_input
from trioqueue.core.split_heap import CHUNK_ENTRIES
from trioqueue.testing.queue import QueueHarness

T = 1_764_000_000_000


def push(h: QueueHarness, n: int, **fields: Any) -> list[str]:
    specs = [parse_job_input({"data": None, **fields}, custom_id_key="jobId")
             for _ in range(n)]
    ids: list[str] = h.call("push", specs, T)
    return ids


def test_stale_entries_go_live_ones_stay_in_order() -> None:
    h = QueueHarness()
    ids = push(h, CHUNK_ENTRIES + 500)  # more than one chunk: more than one step
    delayed = push(h, 50, delay=60_000)
    for job_id in ids[10:] + delayed[5:]:
        h.call("cancel", job_id, T)
    assert h.q.order.sizes() == (len(ids), len(delayed))
    work = h.q.compact_work()
    steps = 1
    while not work.step():
        steps += 1
    freed = work.reply()["freed"]
    assert freed["heapEntries"] == len(ids) - 10 + len(delayed) - 5
    assert freed["bytes"] > 0  # the jobs map had thousands of empty slots
    assert steps >= 3  # two lists of the ready heap, one of each of the others
    assert h.q.order.sizes() == (10, 5)
    jobs, _ = h.call("pull", T, count=20, owner=None, lock_ttl=30_000, conn=None)
    assert [j["id"] for j in jobs] == ids[:10]  # FIFO as before
    assert h.q.compact_work().run() == {"heapEntries": 0, "bytes": 0}


def test_timeout_entries_of_jobs_that_left_are_swept() -> None:
    h = QueueHarness()
    push(h, 3, timeout=60_000)
    jobs, tokens = h.call("pull", T, count=3, owner="w", lock_ttl=30_000, conn=None)
    h.call("ack", jobs[0]["id"], T, token=tokens[0])
    assert len(h.q.timeouts) == 3
    assert h.q.compact_work().run()["heapEntries"] == 1
    assert len(h.q.timeouts) == 2  # the two still active keep their deadlines
