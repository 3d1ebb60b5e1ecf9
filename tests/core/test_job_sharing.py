"""What live jobs share instead of holding one copy each (see docs on memory in job.py)."""

from __future__ import annotations

from trioqueue.core.job import JobRecord, new_timeline, timeline_entry

NOW = 1_764_581_000_000


def test_a_transition_without_details_shares_its_entry_within_a_millisecond() -> None:
    first, second = (JobRecord.admit(f"j{i}", "q", NOW, NOW, i, new_timeline("waiting", NOW),
                               {"name": "n", "data": None}) for i in (1, 2))
    assert first.timeline == [{"state": "waiting", "timestamp": float(NOW)}]
    assert first.timeline is not second.timeline  # each job appends to its own list
    assert first.timeline[0] is second.timeline[0]
    first.add_timeline("active", NOW + 1)
    second.add_timeline("active", NOW + 1)
    assert first.timeline[1] is second.timeline[1]
    assert len(second.timeline) == 2 and len(first.timeline) == 2
    assert timeline_entry("active", NOW + 2) == {"state": "active",
                                                 "timestamp": float(NOW + 2)}
    assert timeline_entry("active", NOW + 2) is not first.timeline[1]


def test_a_transition_with_details_gets_its_own_entry() -> None:
    job = JobRecord.admit("j", "q", NOW, NOW, 1, new_timeline("waiting", NOW),
                    {"name": "n", "data": None})
    job.add_timeline("failed", NOW, error="boom", attempt=1)
    assert job.timeline[-1] == {"state": "failed", "timestamp": float(NOW), "error": "boom",
                                "attempt": 1}
    assert timeline_entry("failed", NOW) == {"state": "failed", "timestamp": float(NOW)}


def test_names_are_one_string_per_name() -> None:
    made = [JobRecord.admit(f"j{i}", "q", NOW, NOW, i, [], {"name": "".join(["na", "me"]),
                                                      "data": None}) for i in range(2)]
    assert made[0].name is made[1].name
    restored = JobRecord.from_record({**made[0].to_record(), "name": "".join(["na", "me"])})
    assert restored.name is made[0].name
