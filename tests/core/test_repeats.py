"""Job-level ``repeat`` in the queue core: each ACK of a generation admits the next one
(``core/queue/repeats.py``). Driven through the queue harness (writes committed to a
memory store after each command, restarts rebuilt from it); time is explicit."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from trioqueue.core.errors import Refused
from trioqueue.core.options import parse_job_input
from trioqueue.testing.queue import QueueHarness

T0 = 1_700_000_000_000  # 2023-11-14 22:13:20 UTC


class Chain(QueueHarness):
    """The harness with the few commands a repeat chain needs."""

    def push(self, now: int, repeat: dict[str, Any], **fields: Any) -> str:
        spec = parse_job_input({"data": {"n": 1}, "repeat": repeat, **fields},
                               custom_id_key="jobId")
        ids: list[str] = self.call("push", [spec], now)
        return ids[0]

    def run(self, now: int) -> str | None:
        """Pull the job due at ``now`` (if any) and ACK it at once."""
        jobs, tokens = self.call("pull", now, count=1, owner="w", lock_ttl=30_000,
                                 conn=None)
        if not jobs:
            return None
        self.call("ack", jobs[0]["id"], now, token=tokens[0])
        job_id: str = jobs[0]["id"]
        return job_id

    def pending(self) -> list[Any]:
        return list(self.q.jobs.values())

    def only_pending(self) -> Any:
        (job,) = self.pending()
        return job

    def runs(self, start: int, stop: int, step: int = 1) -> list[int]:
        """Every ms from ``start`` to ``stop`` (by ``step``) at which a job ran."""
        return [now for now in range(start, stop, step) if self.run(now) is not None]


@pytest.fixture
def h() -> Chain:
    return Chain()


def error_of(h: Chain, repeat: Any, **fields: Any) -> str:
    with pytest.raises(Refused) as info:
        h.push(T0, repeat, **fields)
    return info.value.message


# ------------------------------------------------------------------------- every


def test_every_runs_on_the_schedule_and_limit_counts_successors(h: Chain) -> None:
    first = h.push(T0, {"every": 1000, "limit": 3})
    assert h.q.jobs[first].run_at == T0  # the first generation runs at once
    assert h.runs(T0, T0 + 10_000, 250) == [T0, T0 + 1000, T0 + 2000, T0 + 3000]
    assert h.pending() == []  # four runs: the first and three successors


def test_a_successor_is_a_new_generation(h: Chain) -> None:
    first = h.push(T0, {"every": 1000}, name="tick", priority=3, maxAttempts=5,
                   tags=["a"])
    jobs, tokens = h.call("pull", T0, count=1, owner="w", lock_ttl=30_000, conn=None)
    h.call("set_progress", first, T0, 50, "half", True)
    h.call("ack", first, T0 + 5, token=tokens[0])
    nxt = h.only_pending()
    assert nxt.id != first and nxt.name == "tick" and nxt.data == {"n": 1}
    assert nxt.priority == 3 and nxt.max_attempts == 5 and nxt.tags == ["a"]
    assert nxt.attempts == 0 and nxt.progress == 0 and nxt.started_at is None
    assert [e["state"] for e in nxt.timeline] == ["delayed"]
    assert nxt.repeat["count"] == 1 and nxt.repeat["prevMillis"] == T0 + 1000
    assert nxt.run_at == T0 + 1000 and nxt.created_at == T0 + 5  # made at the ACK
    # The completed generation names its successor, in the same commit.
    done = h.storage.get_finished(first)
    assert done is not None and done["state"] == "completed"
    assert done["repeat"]["successorId"] == nxt.id and done["repeat"]["count"] == 0


def test_every_is_anchored_to_the_schedule_not_to_completion(h: Chain) -> None:
    h.push(T0, {"every": 1000})
    h.run(T0 + 300)  # ran late: the next slot is still T0 + 1000
    assert h.only_pending().run_at == T0 + 1000
    h.run(T0 + 2700)  # missed 2000: the next slot is 3000, on the same grid
    assert h.only_pending().run_at == T0 + 3000
    assert h.only_pending().repeat["count"] == 2


def test_start_date_offset_and_end_date(h: Chain) -> None:
    h.push(T0, {"every": 1000, "startDate": T0 + 5000, "offset": 100,
                "endDate": T0 + 7200})
    assert h.only_pending().run_at == T0 + 5100
    assert h.runs(T0, T0 + 10_000, 50) == [T0 + 5100, T0 + 6100, T0 + 7100]
    assert h.pending() == []  # 8100 is past endDate


def test_immediately_runs_now_and_keeps_the_grid(h: Chain) -> None:
    h.push(T0, {"every": 1000, "startDate": T0 + 5000, "immediately": True})
    assert h.runs(T0, T0 + 7500, 50) == [T0, T0 + 5000, T0 + 6000, T0 + 7000]


def test_a_delay_moves_the_first_slot(h: Chain) -> None:
    h.push(T0, {"every": 1000}, delay=500)
    assert h.runs(T0, T0 + 2600, 50) == [T0 + 500, T0 + 1500, T0 + 2500]


# ----------------------------------------------------------------------- pattern


def ms(zone: str, *when: int) -> int:
    return int(datetime(*when, tzinfo=ZoneInfo(zone)).timestamp() * 1000)  # type: ignore[misc]


def test_pattern_with_tz_waits_for_its_slots(h: Chain) -> None:
    start = ms("Europe/Rome", 2024, 3, 30, 12, 0)
    h.push(start, {"pattern": "30 2 * * *", "tz": "Europe/Rome"})
    assert h.only_pending().run_at == ms("Europe/Rome", 2024, 3, 31, 3, 0)  # spring forward
    h.run(h.only_pending().run_at)
    assert h.only_pending().run_at == ms("Europe/Rome", 2024, 4, 1, 2, 30)
    h.run(h.only_pending().run_at + 5 * 86_400_000)  # days late: the next slot from now
    assert h.only_pending().run_at == ms("Europe/Rome", 2024, 4, 7, 2, 30)


def test_pattern_immediately_offset_and_limit(h: Chain) -> None:
    base = ms("UTC", 2024, 1, 1, 0, 0)
    h.push(base + 10, {"pattern": "* * * * *", "immediately": True, "offset": 5000,
                       "limit": 2})
    assert h.only_pending().run_at == base + 10
    # every minute, 5 s in: the first slot after the immediate run is base + 5 s
    assert h.runs(base + 10, base + 300_000, 10) == [base + 10, base + 5000, base + 65_000]
    assert h.pending() == []


def test_pattern_first_slot_from_start_date(h: Chain) -> None:
    base = ms("UTC", 2024, 1, 1, 0, 0)
    h.push(base, {"pattern": "0 * * * *", "startDate": base + 90 * 60_000})
    assert h.only_pending().run_at == base + 120 * 60_000


# ------------------------------------------------------------------ chain endings


def test_a_failure_that_dead_letters_ends_the_chain(h: Chain) -> None:
    first = h.push(T0, {"every": 1000}, maxAttempts=2)
    jobs, tokens = h.call("pull", T0, count=1, owner="w", lock_ttl=30_000, conn=None)
    h.call("fail", first, T0, token=tokens[0], error="boom")
    job = h.only_pending()
    assert job.id == first and job.attempts == 1  # a retry is the same generation
    h.run(job.run_at)  # the retry succeeds: the chain goes on
    nxt = h.only_pending()
    assert nxt.id != first and nxt.attempts == 0 and nxt.repeat["count"] == 1
    _, tokens = h.call("pull", nxt.run_at, count=1, owner="w", lock_ttl=30_000, conn=None)
    h.call("fail", nxt.id, nxt.run_at, token=tokens[0], unrecoverable=True)
    assert h.pending() == []
    assert h.storage.get_finished(nxt.id)["state"] == "failed"  # type: ignore[index]


@pytest.mark.parametrize("end", ["cancel", "drain", "obliterate"])
def test_removing_the_pending_successor_ends_the_chain(h: Chain, end: str) -> None:
    h.push(T0, {"every": 1000})
    h.run(T0)
    successor = h.only_pending().id
    if end == "cancel":
        h.call("cancel", successor, T0)
    else:
        h.call(end, T0)
    assert h.pending() == []
    assert h.runs(T0, T0 + 5000, 100) == []


def test_update_of_the_completed_job_patches_the_pending_successor(h: Chain) -> None:
    first = h.push(T0, {"every": 1000})
    h.run(T0)
    h.call("update_data", first, {"n": 2})
    assert h.only_pending().data == {"n": 2}
    assert h.storage.get_finished(first)["data"] == {"n": 1}  # type: ignore[index]
    with pytest.raises(Refused, match="Job not found or cannot be updated"):
        h.call("update_data", "nope", {})


def test_a_restart_keeps_the_pending_successor(h: Chain) -> None:
    first = h.push(T0, {"every": 1000, "limit": 2})
    h.run(T0)
    successor = h.only_pending().id
    h.restart(T0 + 10)
    job = h.only_pending()
    assert job.id == successor and job.run_at == T0 + 1000
    assert job.repeat["count"] == 1 and job.repeat["prevMillis"] == T0 + 1000
    h.call("update_data", first, {"n": 3})  # the link survived the restart too
    assert h.only_pending().data == {"n": 3}
    assert h.runs(T0 + 10, T0 + 4000, 10) == [T0 + 1000, T0 + 2000]
    assert h.pending() == []


def test_remove_on_complete_still_chains(h: Chain) -> None:
    first = h.push(T0, {"every": 1000}, removeOnComplete=True)
    h.run(T0)
    assert h.storage.get_finished(first) is None
    assert h.only_pending().run_at == T0 + 1000


def test_a_successor_takes_the_unique_key_back(h: Chain) -> None:
    h.push(T0, {"every": 1000}, uniqueKey="k")
    h.run(T0)
    successor = h.only_pending().id
    spec = parse_job_input({"data": None, "uniqueKey": "k"}, custom_id_key="jobId")
    assert h.call("push", [spec], T0) == [successor]  # the key is held by the successor


# -------------------------------------------------------------------- refusals


@pytest.mark.parametrize(("repeat", "fields", "text"), [
    ({}, {}, "repeat requires exactly one of every or pattern"),
    ({"every": 1000, "pattern": "* * * * *"}, {},
     "repeat requires exactly one of every or pattern"),
    ({"pattern": "nope"}, {}, "Invalid repeat pattern: Invalid cron expression: nope"),
    ({"pattern": "* * * * *", "tz": "Mars/Base"}, {},
     "Invalid repeat pattern: Invalid timezone: Mars/Base"),
    ({"every": 1000, "startDate": "soon"}, {}, "repeat.startDate must be a finite timestamp"),
    ({"every": 1000, "endDate": float("inf")}, {},
     "repeat.endDate must be a finite timestamp"),
    ({"every": 1000, "offset": True}, {}, "repeat.offset must be a finite timestamp"),
    ({"every": 1000, "startDate": 2**63}, {}, "repeat.startDate must be a finite timestamp"),
    ({"every": 1000, "offset": 1e300}, {}, "repeat.offset must be a finite timestamp"),
    ({"every": 1000, "limit": "x"}, {}, "repeat.limit must be a number"),
    ({"every": 1000, "count": 2**64 - 1}, {}, "repeat.count must be a non-negative integer"),
    ({"every": 1000, "count": -1}, {}, "repeat.count must be a non-negative integer"),
    ({"every": 1000, "count": 1.5}, {}, "repeat.count must be a non-negative integer"),
    ({"every": 1000}, {"jobId": "mine"},
     "repeat jobs cannot use JobOptions.jobId; use repeat.jobId instead"),
    ({"every": 1000}, {"parentId": "p"},
     "repeat jobs cannot participate in parent or dependency relationships"),
    ({"every": 1000}, {"dependsOn": ["d"]},
     "repeat jobs cannot participate in parent or dependency relationships"),
    ({"every": 1000}, {"childrenIds": ["c"]},
     "repeat jobs cannot participate in parent or dependency relationships"),
])
def test_refused_configs(h: Chain, repeat: dict[str, Any], fields: dict[str, Any],
                         text: str) -> None:
    assert error_of(h, repeat, **fields) == text
    assert h.pending() == []


def test_a_client_cannot_forge_the_successor_mark(h: Chain) -> None:
    job_id = h.push(T0, {"every": 1000, "successorId": "x"})
    assert "successorId" not in h.q.jobs[job_id].repeat


def test_a_pattern_past_the_last_year_ends_the_chain(h: Chain) -> None:
    """A start date far in the future: the one run, no successor, no crash."""
    h.push(T0, {"pattern": "0 0 * * *", "startDate": 8_000_000_000_000_000})
    job = h.only_pending()
    assert job.run_at == T0
    h.run(T0)
    assert h.pending() == []


def test_a_client_count_is_where_the_chain_starts(h: Chain) -> None:
    h.push(T0, {"every": 1000, "count": 2.0, "limit": 3})
    assert h.runs(T0, T0 + 5000, 100) == [T0, T0 + 1000]  # counts 2 and 3


def test_ackb_chains_each_generation(h: Chain) -> None:
    a = h.push(T0, {"every": 1000})
    b = h.push(T0, {"pattern": "* * * * * *"})  # every second, with seconds
    plain = h.call("push", [parse_job_input({"data": None}, custom_id_key="jobId")], T0)[0]
    jobs, tokens = h.call("pull", T0 + 1000, count=3, owner="w", lock_ttl=30_000, conn=None)
    assert {j["id"] for j in jobs} == {a, b, plain}
    h.call("ackb", [j["id"] for j in jobs], T0 + 1000, tokens=tokens, results=None,
           removes=None)
    successors = sorted(j.run_at for j in h.pending())
    assert successors == [T0 + 2000, T0 + 2000]  # the plain job has none
    assert "repeat" not in h.storage.get_finished(plain)  # type: ignore[operator]
