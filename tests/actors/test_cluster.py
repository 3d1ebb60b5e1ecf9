"""The cluster runtime's rules (cluster/view.py) on the in-memory membership and lease
tables (cluster/memory.py): who serves which queue, claims on first use,
failover to the survivors, and a broker that finds itself dead stopping.
(The same operations on PostgreSQL: tests/storage/test_pg_cluster.py; three real
brokers: tests/e2e/test_cluster.py.)"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import trio

from trioqueue.cluster.memory import MemoryCluster
from trioqueue.cluster.rendezvous import preferred_owner
from trioqueue.cluster.view import Cluster, HeldLeases, LostMembership
from trioqueue.core.writes import Writes
from trioqueue.storage.memory import MemoryStorage
from trioqueue.storage.port import Recovered

LEASE_S = 5.0
QUEUES = [f"queue-{i}" for i in range(40)]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Node:
    """One broker's Cluster, recording what it was asked to rebuild."""

    def __init__(self, tables: MemoryCluster, name: str) -> None:
        self.adopted: list[str] = []
        self.retired: list[str] = []
        self.forgotten: list[str] = []
        self.cluster = Cluster(tables, held=HeldLeases(name), address=f"{name}:1",
                               lease_s=LEASE_S, adopt=self._adopt, retire=self._retire,
                               forget=self.forgotten.append)

    def _adopt(self, recovered: Recovered, names: list[str],
               waits: list[tuple[str, str, str]]) -> None:
        self.adopted.extend(names)

    async def _retire(self, queue: str) -> bool:
        self.retired.append(queue)
        return True


async def _joined(tables: MemoryCluster, *names: str,
                  kind: Callable[[MemoryCluster, str], Node] = Node) -> list[Node]:
    nodes = [kind(tables, name) for name in names]
    for node in nodes:
        tables.join(node.cluster.broker_id, node.cluster.address)
    for node in nodes:
        await node.cluster.beat()
        node.cluster.joined.set()
    return nodes


async def test_every_broker_routes_a_queue_to_the_same_one() -> None:
    tables = MemoryCluster(Clock())
    a, b, c = await _joined(tables, "a", "b", "c")
    for queue in QUEUES:
        owner = preferred_owner(queue, ["a", "b", "c"])
        for node in (a, b, c):
            expected = None if owner == node.cluster.broker_id else f"{owner}:1"
            assert node.cluster.route(queue) == expected
    # the queues are spread over the three
    assert {preferred_owner(q, ["a", "b", "c"]) for q in QUEUES} == {"a", "b", "c"}


async def test_a_queue_is_claimed_and_rebuilt_on_first_use_by_its_broker() -> None:
    tables = MemoryCluster(Clock())
    a, b = await _joined(tables, "a", "b")
    mine = [q for q in QUEUES if preferred_owner(q, ["a", "b"]) == "a"]
    await a.cluster.prepare(mine + mine[:2])  # (a queue named twice is claimed once)
    assert a.adopted == mine
    assert {q: tables.leases[q] for q in mine} == {q: ("a", 1) for q in mine}
    assert a.cluster.held.epoch(mine[0]) == 1
    # b routes them to a, even once its view says a holds them
    await b.cluster.beat()
    assert all(b.cluster.route(q) == "a:1" for q in mine)
    await b.cluster.prepare(mine)  # not b's: nothing claimed
    assert b.adopted == []


async def test_the_survivors_take_the_queues_of_a_dead_broker() -> None:
    clock = Clock()
    tables = MemoryCluster(clock)
    a, b, c = await _joined(tables, "a", "b", "c")
    a_queues = [q for q in QUEUES if preferred_owner(q, ["a", "b", "c"]) == "a"]
    await a.cluster.prepare(a_queues)
    for _ in range(2):  # a stops beating; b and c go on: a is dead to them
        clock.now += LEASE_S * 0.6
        for node in (b, c):
            await node.cluster.beat()
    for node in (b, c):
        assert "a" not in node.cluster.live
        await node.cluster.take_orphans()
    taken = {q: tables.leases[q] for q in a_queues}
    for queue, (owner, epoch) in taken.items():
        assert owner == preferred_owner(queue, ["b", "c"]) and epoch == 2
    assert sorted(b.adopted + c.adopted) == sorted(a_queues)
    assert b.cluster.takeovers + c.cluster.takeovers == len(a_queues)
    # a wakes up: its beat finds it dead and it stops, whatever it held
    with pytest.raises(LostMembership, match="missed its heartbeat"):
        await a.cluster.beat()


async def test_a_claim_loses_to_a_live_holder_and_then_routes_to_it() -> None:
    tables = MemoryCluster(Clock())
    a, b = await _joined(tables, "a", "b")
    queue = next(q for q in QUEUES if preferred_owner(q, ["a", "b"]) == "a")
    tables.leases[queue] = ("b", 7)  # b holds it (say it won it while a was away)
    await a.cluster.prepare([queue])
    assert a.adopted == [] and a.cluster.route(queue) == "b:1"


async def test_a_lease_that_moved_under_a_live_broker_stops_it() -> None:
    tables = MemoryCluster(Clock())
    (a,) = await _joined(tables, "a")
    await a.cluster.prepare(["q"])
    tables.leases["q"] = ("x", 9)  # (an operator's hand, or a bug: never silently)
    with pytest.raises(LostMembership, match="moved to x"):
        await a.cluster.beat()


async def test_a_broker_that_joins_gets_the_queues_it_wins_and_no_others() -> None:
    tables = MemoryCluster(Clock())
    (a,) = await _joined(tables, "a")
    await a.cluster.prepare(QUEUES)
    assert sorted(a.adopted) == sorted(QUEUES)
    (b,) = await _joined(tables, "b")
    await a.cluster.beat()
    await a.cluster.hand_over()
    moving = [q for q in QUEUES if preferred_owner(q, ["a", "b"]) == "b"]
    assert moving and len(moving) < len(QUEUES)
    assert sorted(a.retired) == sorted(a.forgotten) == sorted(moving)
    assert sorted(a.cluster.owned) == sorted(set(QUEUES) - set(moving))
    assert all(tables.leases[q] == (None, 1) for q in moving)
    await b.cluster.beat()
    await b.cluster.take_orphans()  # (or on their first command)
    assert sorted(b.adopted) == sorted(moving)
    assert all(tables.leases[q] == ("b", 2) for q in moving)


# --- a role: a lease that is no queue (the cron scheduler's) -------------------------

ROLE = "#role"


class RoleNode(Node):
    """A broker with one role, recording what it was given and when it retired."""

    def __init__(self, tables: MemoryCluster, name: str) -> None:
        super().__init__(tables, name)
        self.taken: list[dict[str, Any]] = []
        self.retires = 0
        self.cluster = Cluster(tables, held=HeldLeases(name), address=f"{name}:1",
                               lease_s=LEASE_S, adopt=self._adopt, retire=self._retire,
                               forget=self.forgotten.append, roles={ROLE: self})

    kinds = ("cron",)

    def take(self, records: dict[str, Any]) -> None:
        self.taken.append(records)

    async def retire(self) -> None:
        self.retires += 1


async def _role_nodes(tables: MemoryCluster, *names: str) -> list[RoleNode]:
    nodes = await _joined(tables, *names, kind=RoleNode)
    return [node for node in nodes if isinstance(node, RoleNode)]


def _holder(nodes: list[RoleNode]) -> RoleNode:
    [holder] = [n for n in nodes if ROLE in n.cluster.owned]
    return holder


async def test_a_role_is_claimed_by_its_winner_with_its_records_and_is_no_queue() -> None:
    store = MemoryStorage()
    writes = Writes()
    writes.put_broker_record("cron", "nightly", {"name": "nightly"})
    writes.put_broker_record("webhook", "w1", {"id": "w1"})
    store.apply([writes])
    tables = MemoryCluster(Clock(), store=store)
    nodes = await _role_nodes(tables, "a", "b", "c")
    for node in nodes:  # (its lease has no row yet: only the winner claims it)
        await node.cluster.take_orphans()
    holder = _holder(nodes)
    assert holder.cluster.broker_id == preferred_owner(ROLE, ["a", "b", "c"])
    assert holder.taken == [{"cron": {"nightly": {"name": "nightly"}}}]
    assert holder.adopted == [] and holder.cluster.takeovers == 0
    assert tables.leases[ROLE] == (holder.cluster.broker_id, 1)
    for node in nodes:
        await node.cluster.beat()
        assert ROLE not in node.cluster.queue_names()
        status = node.cluster.status()
        assert ROLE not in status["queues"]
        assert status["roles"] == {ROLE: holder.cluster.broker_id}
        expected = None if node is holder else f"{holder.cluster.broker_id}:1"
        assert node.cluster.route(ROLE) == expected


async def test_a_role_moves_to_a_broker_that_joins_and_wins_it() -> None:
    tables = MemoryCluster(Clock())
    names = ["a", "b", "c", "d", "e"]
    winner = preferred_owner(ROLE, names)
    assert winner is not None
    first = [n for n in names if n != winner]
    nodes = await _role_nodes(tables, *first)
    for node in nodes:
        await node.cluster.take_orphans()
    old = _holder(nodes)
    (new,) = await _role_nodes(tables, winner)
    await old.cluster.beat()
    await old.cluster.hand_over()  # retired first, then released
    assert old.retires == 1 and ROLE not in old.cluster.owned
    assert old.forgotten == [] and old.cluster.handovers == 1
    assert tables.leases[ROLE] == (None, 1)
    await new.cluster.beat()
    await new.cluster.take_orphans()
    assert ROLE in new.cluster.owned and tables.leases[ROLE] == (winner, 2)
    assert len(new.taken) == 1


async def test_the_survivors_take_a_dead_holders_role() -> None:
    clock = Clock()
    tables = MemoryCluster(clock)
    nodes = await _role_nodes(tables, "a", "b", "c")
    for node in nodes:
        await node.cluster.take_orphans()
    dead = _holder(nodes)
    survivors = [n for n in nodes if n is not dead]
    for _ in range(2):
        clock.now += LEASE_S * 0.6
        for node in survivors:
            await node.cluster.beat()
    for node in survivors:
        await node.cluster.take_orphans()
    taker = _holder(survivors)
    assert taker.cluster.broker_id == preferred_owner(
        ROLE, [n.cluster.broker_id for n in survivors])
    assert tables.leases[ROLE] == (taker.cluster.broker_id, 2) and len(taker.taken) == 1


async def test_a_beat_carries_the_versions_of_the_broker_records() -> None:
    tables = MemoryCluster(Clock())
    (a,) = await _joined(tables, "a")
    assert a.cluster.versions == {}
    tables.versions["webhook"] = 3  # (a commit of another broker raised it)
    await a.cluster.beat()
    assert a.cluster.versions == {"webhook": 3}


async def test_a_broker_that_finds_itself_fenced_off_is_told_why_before_it_stops() -> None:
    """on_lost runs, with the reason, before LostMembership ends the broker: the
    broker's chance to answer its clients' commands instead of dropping them."""
    clock = Clock()
    tables = MemoryCluster(clock)
    told: list[str] = []

    async def on_lost(why: str) -> None:
        told.append(why)

    a = Cluster(tables, held=HeldLeases("a"), address="a:1", lease_s=LEASE_S,
                adopt=lambda *args: None, on_lost=on_lost)
    tables.join("a", "a:1")
    await a.beat()
    assert told == []
    clock.now += LEASE_S * 1.5  # (a paused past its lease)
    with pytest.raises(LostMembership) as caught:
        await a.beat()
    assert told == [str(caught.value)] and "missed its heartbeat" in told[0]


class StuckBeats(MemoryCluster):
    """Tables whose beats hang after the first, as on a database that stopped
    answering (the calls run in worker threads, so the hang is a thread's)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__(clock)
        self.beats = 0
        self.unstick = threading.Event()

    def beat(self, broker_id: str, lease_s: float) -> Any:
        self.beats += 1
        if self.beats > 1:
            self.unstick.wait(10)
        return super().beat(broker_id, lease_s)


async def test_a_broker_that_reaches_no_database_stops_before_its_lease_runs_out() -> None:
    """Beats that never come back say nothing, so the broker goes by its own clock: it
    is told why and stops before the others could take its queues (their clock: the
    last successful beat plus the lease), instead of renewing its workers' locks from
    memory while another broker re-leases their jobs."""
    lease_s = 0.5
    tables = StuckBeats(Clock())
    told: list[str] = []

    async def on_lost(why: str) -> None:
        told.append(why)

    a = Cluster(tables, held=HeldLeases("a"), address="a:1", lease_s=lease_s,
                adopt=lambda *args: None, on_lost=on_lost)
    started = trio.current_time()
    try:
        with trio.fail_after(lease_s * 10), pytest.RaisesGroup(
                LostMembership, allow_unwrapped=True, flatten_subgroups=True) as caught:
            await a.run()
    finally:
        tables.unstick.set()
    assert trio.current_time() - started < lease_s + 0.2
    assert tables.beats >= 2  # (it was beating: the second beat hung)
    (lost,) = caught.value.exceptions
    assert told == [str(lost)] and "reached no database" in told[0]
