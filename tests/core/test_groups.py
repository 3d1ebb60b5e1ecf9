"""Job groups in the sans-IO core: round-robin claims, priority within a group, pause,
concurrency and rate limits (own and default), RateLimitGroup, groupMaxSize, counts,
restart and Obliterate."""

from __future__ import annotations

from typing import Any

import pytest

from trioqueue.core.commands import groups
from trioqueue.core.commands.context import Ctx
from trioqueue.core.errors import Refused

from .test_queue import NOW, Harness, waiter


def run(h: Harness, handler: Any, now: int = NOW, **msg: Any) -> dict[str, Any]:
    """One group command, committed as the actor does."""
    reply: dict[str, Any] = handler(h.q, {"queue": h.name, **msg}, Ctx(now=now))
    h.commit()
    return reply


def push_group(h: Harness, group: str, n: int, now: int = NOW, **fields: Any) -> list[str]:
    return h.pushb(now, *[{"groupId": group, **fields} for _ in range(n)])


def groups_of(h: Harness, ids: list[str]) -> list[str]:
    return [h.q.jobs[i].group_id or "-" for i in ids]


def test_round_robin_is_fair_to_small_groups() -> None:
    h = Harness()
    push_group(h, "big", 1000)
    push_group(h, "s1", 10)
    push_group(h, "s2", 10)
    claimed: list[str] = []
    for _ in range(6):
        ids, _ = h.pull(NOW, 10)
        claimed.extend(groups_of(h, ids))
    # the small groups finish within their fair share of the first 60 claims (a third)
    assert claimed[:30].count("s1") == 10 and claimed[:30].count("s2") == 10
    assert claimed[:3] == ["big", "s1", "s2"]
    assert claimed[30:] == ["big"] * 30


def test_ungrouped_first_then_groups_by_ascending_priority() -> None:
    h = Harness()
    low = h.pushb(NOW, {"groupId": "g", "priority": 5})[0]
    high = h.pushb(NOW, {"groupId": "g", "priority": 0})[0]
    mid = h.pushb(NOW, {"groupId": "g", "priority": 1})[0]
    plain = h.push(NOW)
    order = h.drain_order(NOW)
    assert order == [plain, high, mid, low]


def test_paused_group_is_skipped_until_resumed() -> None:
    h = Harness()
    push_group(h, "a", 2)
    b = push_group(h, "b", 2)
    assert run(h, groups.pause_group, groupId="a") == {"data": {"changed": True}}
    assert run(h, groups.pause_group, groupId="a") == {"data": {"changed": False}}
    assert run(h, groups.is_group_paused, groupId="a") == {"data": {"paused": True}}
    assert h.drain_order(NOW) == b
    assert run(h, groups.resume_group, groupId="a")["data"]["changed"] is True
    assert groups_of(h, h.drain_order(NOW)) == ["a", "a"]


def test_own_concurrency_caps_a_group_until_a_job_leaves_active() -> None:
    h = Harness()
    push_group(h, "a", 3)
    push_group(h, "b", 3)
    run(h, groups.set_group_concurrency, groupId="a", concurrency=1)
    assert run(h, groups.get_group_concurrency, groupId="a") == {"data": {"concurrency": 1}}
    ids, tokens = h.pull(NOW, 10, owner="w")
    assert groups_of(h, ids) == ["a", "b", "b", "b"]
    assert run(h, groups.get_group_active_count, groupId="a") == {"data": {"count": 1}}
    assert h.pull(NOW, 10) == ([], [])
    h.ack(ids[0], NOW, token=tokens[0])
    again, _ = h.pull(NOW, 10)
    assert groups_of(h, again) == ["a"]
    assert run(h, groups.remove_group_concurrency, groupId="a") == {"data": {"removed": 1}}
    assert run(h, groups.remove_group_concurrency, groupId="a") == {"data": {"removed": 0}}
    assert groups_of(h, h.pull(NOW, 10)[0]) == ["a"]


def test_pull_group_field_sets_the_default_own_settings_override_it() -> None:
    h = Harness()
    for g in ("a", "b"):
        push_group(h, g, 4)
    groups.pull_group(h.q, {"concurrency": 2})
    run(h, groups.set_group_concurrency, groupId="b", concurrency=3)
    ids, _ = h.pull(NOW, 20)
    assert sorted(groups_of(h, ids)) == ["a", "a", "b", "b", "b"]
    with pytest.raises(Refused, match="group.concurrency must be a positive safe integer"):
        groups.pull_group(h.q, {"concurrency": 0})
    with pytest.raises(Refused, match="group.limit.max must be a positive safe integer"):
        groups.pull_group(h.q, {"limit": {"max": "3", "duration": 10}})
    groups.pull_group(h.q, {})  # no defaults any more: only b's own limit holds
    assert groups_of(h, h.pull(NOW, 20)[0]) == ["a", "a"]


def test_group_rate_window_and_the_wake_up_of_a_parked_pull() -> None:
    h = Harness()
    push_group(h, "a", 5)
    run(h, groups.set_group_rate_limit, groupId="a", max=2, duration=1000)
    assert run(h, groups.get_group_rate_limit, groupId="a") == {
        "data": {"limit": {"max": 2, "duration": 1000}}}
    assert len(h.pull(NOW, 10)[0]) == 2
    ttl = run(h, groups.get_group_rate_limit_ttl, NOW + 400, groupId="a")
    assert ttl == {"data": {"ttl": 600}}
    h.q.park(waiter("w", deadline=NOW + 60_000))
    assert h.tick(NOW + 400) == []
    assert h.q.next_deadline() == NOW + 1000  # the window's end, not a poll
    assert [a.waiter.handle for a in h.tick(NOW + 1000)] == ["w"]
    assert run(h, groups.remove_group_rate_limit, groupId="a") == {"data": {"removed": 1}}
    assert len(h.pull(NOW + 1000, 10)[0]) == 2
    for bad in (0, 1.5, "2", None):
        with pytest.raises(Refused, match="max must be a positive safe integer"):
            run(h, groups.set_group_rate_limit, groupId="a", max=bad, duration=1)


def test_group_rate_limit_holds_in_every_window_not_only_fixed_ones() -> None:
    """At most max claims in ANY duration: two at a window's end and two at the next
    one's start would be four in a few ms (a fixed window lets that through)."""
    h = Harness()
    push_group(h, "a", 10)
    run(h, groups.set_group_rate_limit, groupId="a", max=2, duration=1000)
    starts: list[int] = []
    for now in (NOW, NOW + 990, NOW + 995, NOW + 1000, NOW + 1001, NOW + 1500, NOW + 1990,
                NOW + 2000, NOW + 2995, NOW + 3000):
        ids, _ = h.pull(now, 1)
        starts.extend([now] * len(ids))
    assert starts, "nothing was claimed"
    for at in starts:
        inside = [t for t in starts if at - 1000 < t <= at]
        assert len(inside) <= 2, (at, starts)
    assert len(starts) >= 4  # (and it still lets jobs through, window after window)


def test_rate_limit_group_holds_it_until_the_deadline() -> None:
    h = Harness()
    push_group(h, "a", 2)
    b = push_group(h, "b", 1)
    run(h, groups.rate_limit_group, groupId="a", duration=500)
    assert h.pull(NOW, 10)[0] == b
    assert run(h, groups.get_group_rate_limit_ttl, NOW + 100, groupId="a") == {"data": {"ttl": 400}}
    assert h.pull(NOW + 499, 10) == ([], [])
    assert len(h.pull(NOW + 500, 10)[0]) == 2


def test_group_max_size_refuses_the_whole_push() -> None:
    h = Harness()
    push_group(h, "a", 2)
    with pytest.raises(Refused, match="Group a is full"):
        h.pushb(NOW, {"groupId": "a"}, {"groupId": "a", "groupMaxSize": 3},
                {"groupId": "b"})
    assert run(h, groups.get_groups_jobs_count) == {"data": {"count": 2}}
    h.pushb(NOW, {"groupId": "a", "groupMaxSize": 3})
    assert run(h, groups.get_group_jobs_count, groupId="a") == {"data": {"count": 3}}
    assert run(h, groups.get_groups_jobs_count, maxCount=2) == {"data": {"count": 2}}


def test_counts_include_delayed_and_settings_survive_a_restart() -> None:
    h = Harness()
    push_group(h, "a", 2)
    push_group(h, "a", 1, delay=10_000)
    run(h, groups.set_group_concurrency, groupId="a", concurrency=1)
    run(h, groups.pause_group, groupId="z")
    groups.pull_group(h.q, {"limit": {"max": 9, "duration": 100}})
    h.commit()
    h.pull(NOW, 5)
    h.restart(NOW + 1, charge_active=False)
    assert run(h, groups.get_group_jobs_count, groupId="a") == {"data": {"count": 2}}
    assert run(h, groups.get_group_active_count, groupId="a") == {"data": {"count": 1}}
    assert run(h, groups.get_group_concurrency, groupId="a")["data"]["concurrency"] == 1
    assert run(h, groups.is_group_paused, groupId="z")["data"]["paused"] is True
    assert h.q.groups.defaults.rate == (9, 100)
    assert h.pull(NOW + 1, 5) == ([], [])  # a is still at its limit
    h.call("obliterate", NOW + 2)
    assert run(h, groups.get_group_concurrency, groupId="a")["data"]["concurrency"] is None
    assert run(h, groups.get_groups_jobs_count) == {"data": {"count": 0}}
    assert h.q.groups.defaults.rate is None


def test_groups_set_aside_are_not_scanned_by_later_claims() -> None:
    h = Harness()
    for i in range(2000):
        push_group(h, f"g{i}", 1)
    groups.pull_group(h.q, {"concurrency": 1})
    ids, _ = h.pull(NOW, 1000)
    push_group(h, "g0", 1)  # g0 is at its limit: it stays set aside
    assert len(ids) == len(h.pull(NOW, 1000)[0]) == 1000
    assert h.pull(NOW, 10) == ([], [])  # g0 came up, was found full and set aside
    assert len(h.q.groups.rotation) == 0  # so no later claim looks at it again


def test_a_group_released_by_time_is_not_a_wake_up_forever() -> None:
    """A queue at its concurrency limit takes no claim; the group whose deadline passed
    must not keep naming that past deadline (the actor would spin on it)."""
    h = Harness()
    push_group(h, "a", 2)
    run(h, groups.rate_limit_group, groupId="a", duration=500)
    assert h.pull(NOW, 5) == ([], [])  # a comes up held: set aside until NOW + 500
    h.push(NOW)
    h.call("set_concurrency", 1, NOW)
    assert len(h.pull(NOW, 5)[0]) == 1  # the ungrouped job: now the queue is full
    h.q.park(waiter("w", deadline=NOW + 60_000))
    assert h.q.next_deadline() == NOW + 500
    assert h.tick(NOW + 500) == []  # still at its limit: no claim runs
    deadline = h.q.next_deadline()
    assert deadline is not None and deadline > NOW + 500
