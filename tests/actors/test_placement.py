"""One broker's placement and membership: the null objects the router and the broker
hold when they are not in a cluster (actors/ports.py)."""

from __future__ import annotations

from trioqueue.actors.ports import LocalMembership, LocalPlacement, RouterLimits
from trioqueue.actors.request import Request
from trioqueue.actors.router import Router


class _Got:
    def __init__(self) -> None:
        self.replies: list[dict[str, object]] = []

    def deliver(self, reply: dict[str, object]) -> None:
        self.replies.append(reply)


def test_one_broker_has_the_local_placement_and_membership() -> None:
    limits = RouterLimits(max_queues=1, max_data_bytes=1, removed_result_retention_s=0,
                          max_removed_results=0, slice_budget_ms=4.0)
    router = Router(committer=None, find_queue=lambda job_id: None,  # type: ignore[arg-type]
                    now_ms=lambda: 7, limits=limits, admission=None,
                    new_actor=None, spawn=None)  # type: ignore[arg-type]
    placement = router.placement
    assert isinstance(placement, LocalPlacement)
    assert router.cluster_status() is None and router.queues_elsewhere() == []
    assert placement.serves("any") and placement.where("any", None) is None  # type: ignore[arg-type]
    got = _Got()
    placement.poked(["q"], Request("ClusterPoke", {}, got))  # (nothing to apply here)
    assert got.replies and got.replies[0]["ok"] is True
    router.post_notices([("gone", ("notice",))])  # a job no queue holds: dropped
    assert isinstance(LocalMembership(None).cron_firing(), tuple)  # type: ignore[arg-type]
