"""Clients across a peer link (cluster/clients.py), against a real broker in
process: each forwarding client's pulls are its own on the receiving broker, released
when it leaves (ClusterRelease) or when the link closes, and every command the link
sent is still answered."""

from __future__ import annotations

from typing import Any

import trio

from trioqueue.actors.request import Request
from trioqueue.cluster.clients import ClusterClients
from trioqueue.cluster.peers.links import PeerLinks
from trioqueue.testing import RawClient
from trioqueue.testing.deadline import wait_until

from .test_peer_links import FakeSession, Opener, answered, start_broker

LOCK_TTL_MS = 60_000
LONG_PULL_MS = 60_000
PEER_HELLO = [{"cmd": "ClusterPeer", "broker": "b0"}]


class _NoStandIns:
    """The forwarding broker's router, as ClusterClients.closed sees it here (these
    tests' clients are fake sessions: no stand-ins of their own to close)."""

    def connection_closed(self, conn: Any, queues: set[str]) -> None:
        pass

    def holds_jobs(self, conn: Any, queues: set[str]) -> bool:
        return False


async def _forwarding(nursery: trio.Nursery, **links: Any
                      ) -> tuple[ClusterClients, PeerLinks]:
    """A forwarding broker's side: the clients, and their peer links (started)."""
    clients = ClusterClients(lambda address, reqs: peers.forward(address, reqs))
    peers = PeerLinks(hello=lambda: PEER_HELLO, connect_timeout_s=5.0,
                      origin_of=clients.origin_of, **links)
    await nursery.start(peers.run)
    return clients, peers


def _from(client: FakeSession, cmd: str, req_id: str, **fields: Any) -> Request:
    return Request(cmd, {"cmd": cmd, "reqId": req_id, **fields}, client, conn=client)


async def _state(reader: RawClient, job_id: str) -> str:
    state: str = (await reader.ok("GetState", id=job_id))["state"]
    return state


async def test_a_client_that_leaves_gets_its_parked_pull_answered_and_its_job_goes_to_another(
        nursery: trio.Nursery) -> None:
    server, address = await start_broker(nursery)
    reader = await RawClient.connect(server.tcp_port)
    clients, peers = await _forwarding(nursery)
    alice, bob = FakeSession("alice"), FakeSession("bob")
    job_id = (await reader.ok("PUSH", queue="q", name="n", data=1))["id"]
    clients.forward(address, [_from(alice, "PULL", "take", queue="q", timeout=0,
                                    lockTtl=LOCK_TTL_MS)])
    await answered(alice, count=1)
    assert alice.by_req_id()["take"]["job"]["id"] == job_id
    # both wait for more over the one link: alice's and bob's pulls stay apart
    clients.forward(address, [_from(alice, "PULL", "more", queue="q", timeout=LONG_PULL_MS),
                              _from(bob, "PULL", "wait", queue="q", timeout=LONG_PULL_MS)])
    probe = FakeSession("probe")  # (answered by the queue after both pulls: parked)
    clients.forward(address, [_from(probe, "GetJobCounts", "counts", queue="q")])
    await answered(probe, count=1)
    assert len(alice.replies) == 1 and bob.replies == []

    clients.closed(_NoStandIns(), alice)  # alice's connection closed
    await answered(alice, bob, count=3)
    more = alice.by_req_id()["more"]  # answered as at its deadline: the link owes none
    assert more["ok"] is True and more["job"] is None
    got = bob.by_req_id()["wait"]["job"]  # alice's job, back uncharged, to the next
    assert got["id"] == job_id and got["attempts"] == 0
    await wait_until(lambda: peers.in_flight(address) == 0, "the release answered")
    await reader.aclose()
    server.stop()


async def test_a_client_that_pulled_nothing_there_releases_nothing(
        nursery: trio.Nursery) -> None:
    server, address = await start_broker(nursery)
    reader = await RawClient.connect(server.tcp_port)
    clients, _ = await _forwarding(nursery)
    alice, bob = FakeSession("alice"), FakeSession("bob")
    job_id = (await reader.ok("PUSH", queue="q", name="n", data=1))["id"]
    clients.forward(address, [_from(bob, "PULL", "take", queue="q", timeout=0,
                                    lockTtl=LOCK_TTL_MS),
                              _from(alice, "GetJobCounts", "counts", queue="q")])
    await answered(alice, bob, count=2)
    clients.closed(_NoStandIns(), alice)
    await reader.ok("Ping")
    assert await _state(reader, job_id) == "active"  # bob's, still
    await reader.aclose()
    server.stop()


async def test_the_jobs_of_a_links_clients_go_back_when_the_link_closes(
        nursery: trio.Nursery) -> None:
    server, address = await start_broker(nursery)
    reader = await RawClient.connect(server.tcp_port)
    links_scope = trio.CancelScope()
    clients = ClusterClients(lambda address, reqs: peers.forward(address, reqs))
    peers = PeerLinks(hello=lambda: PEER_HELLO, connect_timeout_s=5.0,
                      origin_of=clients.origin_of)

    async def run_links(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        with links_scope:
            await peers.run(task_status=task_status)

    await nursery.start(run_links)
    alice, bob = FakeSession("alice"), FakeSession("bob")
    ids = [(await reader.ok("PUSH", queue="q", name="n", data=i))["id"] for i in range(2)]
    clients.forward(address, [_from(alice, "PULL", "a", queue="q", timeout=0,
                                    lockTtl=LOCK_TTL_MS),
                              _from(bob, "PULL", "b", queue="q", timeout=0,
                                    lockTtl=LOCK_TTL_MS)])
    await answered(alice, bob, count=2)
    assert [await _state(reader, i) for i in ids] == ["active", "active"]

    links_scope.cancel()  # the forwarding broker goes: its link closes
    with trio.fail_after(2):
        back = [(await reader.ok("PULL", queue="q", timeout=2000))["job"] for _ in ids]
    assert sorted(j["id"] for j in back) == sorted(ids)
    assert [j["attempts"] for j in back] == [0, 0]
    await reader.aclose()
    server.stop()


async def test_the_idle_timeout_spares_a_link_whose_clients_hold_jobs(
        nursery: trio.Nursery) -> None:
    server, address = await start_broker(nursery, idle_timeout_s=0.3)
    producer = await RawClient.connect(server.tcp_port)
    job_id = (await producer.ok("PUSH", queue="q", name="n", data=1))["id"]
    await producer.aclose()
    opener = Opener()
    clients, peers = await _forwarding(nursery, connect=opener)
    alice = FakeSession("alice")
    clients.forward(address, [_from(alice, "PULL", "take", queue="q", timeout=0,
                                    lockTtl=LOCK_TTL_MS)])
    await answered(alice, count=1)
    # a client connected after the link's last command, idle too, is closed first...
    idle = await RawClient.connect(server.tcp_port)
    with trio.fail_after(5):
        await idle.drain_until_closed()
    # ...while the link, whose client holds a job, is still the same connection
    clients.forward(address, [_from(alice, "GetState", "state", id=job_id)])
    await answered(alice, count=2)
    assert alice.by_req_id()["state"]["state"] == "active"
    assert len(opener.streams) == 1


async def test_cluster_release_is_refused_to_a_client(nursery: trio.Nursery) -> None:
    server, _ = await start_broker(nursery)
    client = await RawClient.connect(server.tcp_port)
    reply = await client.call("ClusterRelease", queue="q")
    assert reply["ok"] is False
    assert "for another broker's peer link" in reply["error"]
    await client.aclose()
    server.stop()


def test_each_client_has_its_own_number_and_the_brokers_own_requests_none() -> None:
    clients = ClusterClients(lambda address, reqs: None)
    alice, bob = FakeSession("alice"), FakeSession("bob")
    numbers = [clients.origin_of(c) for c in (alice, bob, alice)]
    assert numbers[0] != numbers[1] and numbers[0] == numbers[2]
    assert clients.origin_of(None) is None
