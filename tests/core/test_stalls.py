"""The heartbeat stall detector and processing timeouts of QueueState."""

from __future__ import annotations

import pytest

from trioqueue.core.options import parse_job_input
from trioqueue.core.queue import STALL_CHECK_MS
from trioqueue.testing.queue import QueueHarness

NOW = 1_764_000_000_000


def push(h: QueueHarness, now: int, **fields: object) -> str:
    spec = parse_job_input({"data": None, **fields}, custom_id_key="jobId")
    ids: list[str] = h.call("push", [spec], now)
    return ids[0]


def pull(h: QueueHarness, now: int) -> str:
    jobs, _ = h.call("pull", now, count=1, owner=None, lock_ttl=30_000, conn=None)
    return str(jobs[0]["id"])


def job(h: QueueHarness, job_id: str, now: int) -> dict:
    wire = h.q.job_wire(job_id, now)
    assert wire is not None
    return wire


def test_a_silent_job_is_retried_after_two_sweeps_past_its_interval() -> None:
    h = QueueHarness()
    h.call("set_stall_config", {"stallInterval": 10_000, "gracePeriod": 1_000})
    job_id = push(h, NOW, backoff=0)
    pull(h, NOW)
    assert h.q.next_deadline() == NOW + STALL_CHECK_MS
    t = NOW
    for _ in range(2):  # 10 s: not yet past the interval
        t += STALL_CHECK_MS
        h.call("tick", t)
    assert job(h, job_id, t)["state"] == "active"
    t += STALL_CHECK_MS  # 15 s: a suspect
    h.call("tick", t)
    assert job(h, job_id, t)["state"] == "active"
    t += STALL_CHECK_MS  # 20 s: stalled on the second sweep
    h.call("tick", t)
    stalled = job(h, job_id, t)
    assert stalled["state"] == "waiting"
    assert stalled["attempts"] == 1 and stalled["stallCount"] == 1


def test_heartbeats_keep_a_job_alive_and_max_stalls_buries() -> None:
    h = QueueHarness()
    h.call("set_stall_config", {"stallInterval": 6_000, "gracePeriod": 0, "maxStalls": 1})
    alive = push(h, NOW)
    silent = push(h, NOW, maxAttempts=10)
    pull(h, NOW)
    pull(h, NOW)
    t = NOW
    for _ in range(4):
        t += STALL_CHECK_MS
        assert h.call("heartbeat", alive, t, token=None, duration=None)
        h.call("tick", t)
    assert job(h, alive, t)["state"] == "active"
    assert job(h, silent, t)["state"] == "failed"  # first stall with maxStalls 1
    assert h.storage.get_finished(silent)["dlq"]["reason"] == "stalled"


def test_disabled_detector_and_per_job_stall_timeout() -> None:
    h = QueueHarness()
    h.call("set_stall_config", {"enabled": False})
    a = push(h, NOW)
    pull(h, NOW)
    for k in range(1, 20):
        h.call("tick", NOW + k * STALL_CHECK_MS)
    assert job(h, a, NOW + 20 * STALL_CHECK_MS)["state"] == "active"
    h2 = QueueHarness()
    b = push(h2, NOW, stallTimeout=100_000, backoff=0)
    pull(h2, NOW)
    for k in range(1, 12):  # 55 s: past the default 30 s, within the job's 100 s
        h2.call("tick", NOW + k * STALL_CHECK_MS)
    assert job(h2, b, NOW + 55_000)["state"] == "active"


def test_processing_timeout_retries_then_dead_letters() -> None:
    h = QueueHarness()
    job_id = push(h, NOW, timeout=1_000, maxAttempts=2, backoff=0)
    pull(h, NOW)
    # never early on the ms clock: the pull at reading NOW may have been at NOW + 0.9
    h.call("tick", NOW + 1_000)
    assert job(h, job_id, NOW + 1_000)["state"] == "active"
    h.call("tick", NOW + 1_001)
    assert job(h, job_id, NOW + 1_001)["attempts"] == 1
    pull(h, NOW + 2_000)
    h.call("tick", NOW + 3_001)
    record = h.storage.get_finished(job_id)
    assert record is not None and record["dlq"]["reason"] == "timeout"
    assert record["dlq"]["error"] == "Job timeout exceeded"


def test_stall_config_is_stored_and_restored() -> None:
    h = QueueHarness()
    h.call("set_stall_config", {"maxStalls": 7, "stallInterval": 1234})
    h.restart(NOW)
    assert h.q.stall["maxStalls"] == 7 and h.q.stall["stallInterval"] == 1234


def ten_active_jobs() -> tuple[QueueHarness, list[str]]:
    """A queue with a 1 s stall interval, no grace, and ten jobs pulled at NOW."""
    h = QueueHarness()
    h.call("set_stall_config", {"stallInterval": 1_000, "gracePeriod": 0})
    ids = [push(h, NOW, backoff=0) for _ in range(10)]
    for _ in ids:
        pull(h, NOW)
    return h, ids


def test_many_stale_jobs_are_swept_in_bounded_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep handles at most STALL_SWEEP_MAX_JOBS jobs; the rest follow in the next
    slices, each a step of its own, and every job still stalls only after two sweeps."""
    from trioqueue.core.queue import stalls

    monkeypatch.setattr(stalls, "STALL_SWEEP_MAX_JOBS", 4)
    h, ids = ten_active_jobs()
    t = NOW + STALL_CHECK_MS  # all ten are stale: suspected four at a time
    h.call("tick", t)
    assert len(h.q.stall_watch.suspects) == 4
    assert h.q.next_deadline() == t + 1  # the next slice comes at once
    while h.q.next_deadline() == t + 1:
        t += 1
        h.call("tick", t)
    assert len(h.q.stall_watch.suspects) == 10
    assert all(job(h, i, t)["state"] == "active" for i in ids)  # suspects, not stalled
    t = h.q.next_deadline()  # the second sweep: they stall, four per slice
    assert t is not None and t >= NOW + 2 * STALL_CHECK_MS
    h.call("tick", t)
    assert sum(job(h, i, t)["state"] == "waiting" for i in ids) == 4
    for _ in range(10):
        if h.q.next_deadline() != t + 1:
            break
        t += 1
        h.call("tick", t)
    assert [job(h, i, t)["stallCount"] for i in ids] == [1] * 10
    assert not h.q.stall_watch.suspects


def test_a_sweep_stalls_a_bounded_number_of_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stalling a job costs far more than suspecting it, so a sweep stalls at most
    STALL_SWEEP_MAX_STALLED jobs: the rest stall in the next slices, none is lost and
    none is charged twice."""
    from trioqueue.core.queue import stalls

    monkeypatch.setattr(stalls, "STALL_SWEEP_MAX_STALLED", 3)
    h, ids = ten_active_jobs()
    h.call("tick", NOW + STALL_CHECK_MS)
    assert len(h.q.stall_watch.suspects) == 10  # suspecting is not bounded by it
    t = NOW + 2 * STALL_CHECK_MS
    h.call("tick", t)
    waiting = [sum(job(h, i, t)["state"] == "waiting" for i in ids)]
    while h.q.next_deadline() == t + 1:
        t += 1
        h.call("tick", t)
        waiting.append(sum(job(h, i, t)["state"] == "waiting" for i in ids))
    assert waiting[:4] == [3, 6, 9, 10]
    assert [job(h, i, t)["stallCount"] for i in ids] == [1] * 10
    assert [job(h, i, t)["attempts"] for i in ids] == [1] * 10
    assert not h.q.stall_watch.suspects


def test_a_heartbeat_clears_a_suspect() -> None:
    h = QueueHarness()
    h.call("set_stall_config", {"stallInterval": 1_000, "gracePeriod": 0})
    job_id = push(h, NOW)
    pull(h, NOW)
    t = NOW + STALL_CHECK_MS
    h.call("tick", t)
    assert list(h.q.stall_watch.suspects) == [job_id]
    assert h.call("heartbeat", job_id, t + 1, token=None, duration=None)
    assert not h.q.stall_watch.suspects
    # The next sweep finds it fresh since the beat: no stall.
    h.call("tick", NOW + 2 * STALL_CHECK_MS)
    assert job(h, job_id, NOW + 2 * STALL_CHECK_MS)["state"] == "active"


def test_lock_expiry_pops_a_bounded_number_of_entries_per_tick(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from trioqueue.core.queue import leases

    monkeypatch.setattr(leases, "LOCK_EXPIRY_MAX_ENTRIES", 3)
    h = QueueHarness()
    ids = [push(h, NOW) for _ in range(8)]
    h.call("pull", NOW, count=8, owner="w", lock_ttl=1_000, conn=None)
    t = NOW + 1_001
    h.call("tick", t)
    assert sum(job(h, i, t)["state"] == "waiting" for i in ids) == 3
    ticks = 1
    while (deadline := h.q.next_deadline()) is not None and deadline <= t:
        h.call("tick", t)  # the rest is due now: the next steps take it
        ticks += 1
    assert ticks == 3
    assert [job(h, i, t)["state"] for i in ids] == ["waiting"] * 8
