"""A queue's maps with one entry per live job are of the kinds that never copy
themselves whole as they grow (scripts/bench_growth.py measures why: a dict or
OrderedDict insert took 47-169 ms at 700,000-800,000 entries, inside a command's step).
A map added later with one entry per job belongs here too."""

from __future__ import annotations

from trioqueue.core.chained_order import ChainedOrder
from trioqueue.core.options import parse_job_input
from trioqueue.core.split_dict import SplitDict
from trioqueue.testing.queue import QueueHarness

NOW = 1_764_000_000_000


def test_the_per_job_maps_of_a_queue_are_growth_safe() -> None:
    h = QueueHarness()
    spec = parse_job_input({"data": None, "uniqueKey": "u", "jobId": "c"},
                           custom_id_key="jobId")
    h.call("push", [spec], NOW)
    h.call("pull", NOW, count=1, owner=None, lock_ttl=30_000, conn="conn")
    q = h.q
    for name, table in (("jobs", q.jobs), ("locks", q.leases.locks),
                        ("owner_conn", q.leases.owner_conn), ("dedup", q.dedup.holders)):
        assert isinstance(table, SplitDict), name
    assert all(isinstance(m, SplitDict) for m in q.leases.conn_jobs.values())
    assert all(isinstance(o, ChainedOrder) for o in q.stall_watch.by_limit.values())
    assert isinstance(q.stall_watch.suspects, ChainedOrder)
    assert isinstance(h.index.dependents._parents, SplitDict)
    assert len(q.dedup) == 1 and len(q.jobs) == 1  # (the maps above are the live ones)
