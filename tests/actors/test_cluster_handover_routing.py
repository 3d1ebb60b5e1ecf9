"""A batch routed while its queue is handed over (docs/scale-out.md, "Rebalancing").

The router awaits between looking a batch up and sending it: the database look-up of
ids, the claim of its queues, the claim of its pushes' custom ids. A handover of one of
its queues can start and end meanwhile: the queue's actor is retired, its jobs are
forgotten here, its lease released. The batch must then go to the queue's new broker,
not to the retired actor (which never answers) nor be told a live job does not exist.

The real Cluster on the in-memory lease tables, the real Router; the queue actors and
the peer links are fakes that record what reached them.
"""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from trioqueue.actors.ports import RouterLimits
from trioqueue.actors.request import Request
from trioqueue.actors.router import Router
from trioqueue.cluster.memory import MemoryCluster
from trioqueue.cluster.placement import ClusterPlacement
from trioqueue.cluster.rendezvous import preferred_owner
from trioqueue.cluster.view import Cluster, HeldLeases
from trioqueue.core.commands.table import CORE_COMMANDS
from trioqueue.storage.port import Claimed, Recovered

LEASE_S = 5.0
ADDRESSES = {"a": "a:1", "b": "b:1"}


class Clock:
    def __call__(self) -> float:
        return 1000.0


class Got:
    def __init__(self) -> None:
        self.replies: list[dict[str, Any]] = []

    def deliver(self, reply: dict[str, Any]) -> None:
        self.replies.append(reply)


class Actor:
    """A queue's actor as the router uses it: it serves what it is sent at once, until
    it is retired; after that nothing takes from its inbox."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.retired = False
        self.batches_in_flight = 0
        self.send, self._inbox = trio.open_memory_channel[list[Request]](16)
        self.served: list[str] = []

    def retire(self) -> None:
        self.retired = True

    def run_inline(self, reqs: list[Request]) -> bool:
        if self.retired:
            return False
        for req in reqs:
            self.served.append(req.cmd)
            req.ok({"servedBy": "a"})
        return True


class Links:
    def __init__(self) -> None:
        self.sent: dict[str, list[str]] = {}

    def forward(self, address: str, reqs: list[Request]) -> None:
        self.sent.setdefault(address, []).extend(r.cmd for r in reqs)


class Committer:
    off_thread = False

    def submit(self, writes: Any) -> None:
        pass

    def release(self, deliveries: Any) -> None:
        pass


class BrokerA:
    """Broker a: its Cluster, its Router, and a handover the test drives a step at a
    time (as Broker._retire_queue and _forget_queue do it)."""

    def __init__(self, tables: MemoryCluster) -> None:
        self.links = Links()
        self.jobs: dict[str, str] = {}  # the database's: job id -> its queue
        self.may_retire = trio.Event()
        self.may_commit = trio.Event()
        self.may_claim_ids = trio.Event()
        self.claiming_ids = trio.Event()
        self.cluster = Cluster(tables, held=HeldLeases("a"), address="a:1",
                               lease_s=LEASE_S, adopt=self._adopt, retire=self._retire,
                               forget=self._forget)
        limits = RouterLimits(max_queues=100, max_data_bytes=1 << 20,
                              removed_result_retention_s=0, max_removed_results=0,
                              slice_budget_ms=4.0)
        placement = ClusterPlacement(self.cluster, self.links.forward,
                                     Committer(),  # type: ignore[arg-type]
                                     lambda *a: None, claim_ids=self._claim_ids)
        self.router = Router(committer=Committer(),  # type: ignore[arg-type]
                             find_queue=lambda job_id: None, now_ms=lambda: 1000,
                             limits=limits, admission=None, new_actor=Actor,  # type: ignore[arg-type]
                             spawn=lambda *a: None, finished_queues=self._look_up,
                             placement=placement)

    def _adopt(self, recovered: Recovered, names: list[str],
               waits: list[tuple[str, str, str]]) -> None:
        for name in names:
            self.router.actor(name, recovering=True)

    async def _retire(self, queue: str) -> bool:
        await self.may_retire.wait()
        self.router.actors[queue].retire()
        await self.may_commit.wait()  # (as Broker._retire_queue commits what it wrote)
        return True

    def _forget(self, queue: str) -> None:
        actor = self.router.actors.pop(queue)
        for job_id in [j for j, q in self.jobs.items() if q == queue]:
            self.router.remove(job_id)
        assert actor.retired

    async def _look_up(self, ids: list[str]) -> dict[str, str | None]:
        return {job_id: self.jobs.get(job_id) for job_id in ids}

    async def _claim_ids(self, wanted: Any) -> dict[str, Claimed]:
        self.claiming_ids.set()
        await self.may_claim_ids.wait()
        return {}


async def _two_brokers_and_a_queue_that_moves_to_b() -> tuple[BrokerA, MemoryCluster, str]:
    """a serves a queue that b, once it joins, wins: a's next handover gives it to b."""
    tables = MemoryCluster(Clock())
    a = BrokerA(tables)
    tables.join("a", "a:1")
    await a.cluster.beat()
    a.cluster.joined.set()
    queue = next(f"q{i}" for i in range(100)
                 if preferred_owner(f"q{i}", list(ADDRESSES)) == "b")
    await a.cluster.prepare([queue])
    assert queue in a.cluster.owned
    tables.join("b", "b:1")
    await a.cluster.beat()  # (a sees b: the queue is b's to take)
    return a, tables, queue


async def test_an_ack_that_waited_for_its_queues_handover_goes_to_the_new_broker() -> None:
    """An ACK of a live job of a's queue arrives while a hands that queue over: once
    the handover is done it is forwarded to b, not answered 'Job not found'."""
    a, tables, queue = await _two_brokers_and_a_queue_that_moves_to_b()
    a.jobs = {"job-1": queue}
    a.router.add("job-1", queue)
    got = Got()
    ack = Request("ACK", {"cmd": "ACK", "id": "job-1", "token": "t"}, got)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(a.cluster.hand_over)
            await trio.testing.wait_all_tasks_blocked()
            assert queue in a.cluster.owned  # (being handed over)
            nursery.start_soon(a.router.dispatch, [(CORE_COMMANDS.wire["ACK"], ack)])
            await trio.testing.wait_all_tasks_blocked()
            a.may_retire.set()
            a.may_commit.set()
    assert queue not in a.cluster.owned
    assert got.replies == [], got.replies  # (not answered here: b answers it)
    assert a.links.sent == {"b:1": ["ACK"]}


async def test_a_push_routed_while_its_queue_is_retired_is_not_left_unanswered() -> None:
    """A PUSH with a custom id passes the claim of its queue, then waits for the claim
    of its id; meanwhile the queue is handed over (its actor retired). The PUSH goes to
    b, once the handover is done, instead of into the retired actor's inbox."""
    a, tables, queue = await _two_brokers_and_a_queue_that_moves_to_b()
    got = Got()
    push = Request("PUSH", {"cmd": "PUSH", "queue": queue, "name": "n", "data": 1,
                            "jobId": "custom-1"}, got)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(a.router.dispatch, [(CORE_COMMANDS.wire["PUSH"], push)])
            await a.claiming_ids.wait()  # (past the queue's claim, waiting on its ids)
            nursery.start_soon(a.cluster.hand_over)
            a.may_retire.set()
            await trio.testing.wait_all_tasks_blocked()
            assert a.router.actors[queue].retired  # (its handover commits meanwhile)
            a.may_claim_ids.set()
            await trio.testing.wait_all_tasks_blocked()
            a.may_commit.set()
    assert queue not in a.cluster.owned
    # forwarded to b (before: sent into the retired actor's inbox, never answered)
    assert a.links.sent == {"b:1": ["PUSH"]}, (a.links.sent, got.replies)
