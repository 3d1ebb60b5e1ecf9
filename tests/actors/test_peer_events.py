"""Events across brokers, in process: the hub's two kinds of subscribers, ClusterEvents
on a broker's own connection, and PeerEvents against real brokers (memory store, port
0) that play the other members of a cluster (docs/scale-out.md, "Events across
brokers"). The three-broker PostgreSQL cluster is tests/e2e/test_cluster_events.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio
import trio.testing

from trioqueue.actors.events import EventHub
from trioqueue.cluster.peers.events import PeerEvents
from trioqueue.server.run import Server
from trioqueue.testing import RawClient
from trioqueue.testing.deadline import wait_until

from .test_peer_links import Opener, free_port, start_broker

HELLO = [{"cmd": "ClusterPeer", "broker": "here"}]


def event(queue: str, job_id: str, kind: str = "pushed") -> dict[str, Any]:
    return {"queue": queue, "jobId": job_id, "eventType": kind, "timestamp": 1.0}


async def next_event(client: RawClient) -> dict[str, Any]:
    """The next job event ``client`` receives; a peer stream also carries the broker-wide
    dashboard events (``client:connected``, ``queue:created``...), skipped here."""
    with trio.fail_after(5):
        while True:
            if client.events:
                found = client.events.pop(0)
            else:
                msg = await client.receive()
                if msg.get("type") != "event":
                    continue
                found = msg["event"]
            if ":" not in found["eventType"]:
                return found


class Members:
    """The peers a PeerEvents follows, changed as a cluster's beats change them."""

    def __init__(self, **peers: str) -> None:
        self.peers = dict(peers)
        self.changed = trio.Event()

    def set(self, **peers: str) -> None:
        self.peers = dict(peers)
        changed, self.changed = self.changed, trio.Event()
        changed.set()


async def start_events(nursery: trio.Nursery, hub: EventHub, members: Members,
                       **kwargs: Any) -> PeerEvents:
    kwargs.setdefault("linger_s", 0.0)
    kwargs.setdefault("connect_timeout_s", 5.0)
    events = PeerEvents(hub, peers=lambda: members.peers, changed=lambda: members.changed,
                        hello=lambda: list(HELLO), **kwargs)
    await nursery.start(events.run)
    return events


async def listen(hub: EventHub, got: list[dict[str, Any]]) -> Callable[..., None]:
    """Subscribe a local listener and wait, as SubscribeEvents' ack does, until the
    peers' events reach the hub."""
    subscriber = got.extend
    hub.subscribe(subscriber)
    ready = trio.Event()
    if not hub.when_relayed(ready.set):
        with trio.fail_after(5):
            await ready.wait()
    return subscriber


def job_events(got: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The job events among ``got``: a peer stream also relays the broker-wide dashboard
    events (``client:connected``, ``queue:created``...), which a session's
    ``SubscribeEvents`` never passes on."""
    return [e for e in got if ":" not in e["eventType"]]


def streams(server: Server) -> int:
    return server.broker.events.streams


def test_the_hub_relays_to_local_subscribers_only_and_says_when_they_come_and_go() -> None:
    hub = EventHub()
    local: list[dict[str, Any]] = []
    stream: list[dict[str, Any]] = []
    changes: list[bool] = []
    hub.listening_changed = lambda: changes.append(hub.listening)
    hub.subscribe(stream.extend, stream=True)
    assert hub.active and not hub.listening and hub.streams == 1 and changes == []
    hub.subscribe(local.extend)
    hub.publish([event("q", "own")])
    hub.publish_relayed([event("q", "theirs")])
    assert [e["jobId"] for e in local] == ["own", "theirs"]
    assert [e["jobId"] for e in stream] == ["own"]  # never back out to a broker
    assert (hub.published, hub.relayed) == (1, 1)
    hub.unsubscribe(local.extend)
    hub.unsubscribe(stream.extend)
    assert changes == [True, False] and not hub.active
    assert hub.when_relayed(lambda: None)  # no cluster: nothing to wait for


async def test_cluster_events_is_for_peers_and_streams_this_brokers_own_events(
        nursery: trio.Nursery) -> None:
    server, _ = await start_broker(nursery)
    assert server.tcp_port is not None
    client = await RawClient.connect(server.tcp_port)
    refused = await client.call("ClusterEvents")
    assert refused["ok"] is False and "peer connection" in refused["error"]
    peer = await RawClient.connect(server.tcp_port, "cbor")
    await peer.ok("ClusterPeer", broker="other")
    await peer.ok("ClusterEvents")
    listener = await RawClient.connect(server.tcp_port)
    await listener.ok("SubscribeEvents", queue="q")
    assert streams(server) == 1
    # an event relayed from a third broker, then one of this broker's own queues
    server.broker.events.publish_relayed([event("q", "relayed")])
    pushed = await client.ok("PUSH", queue="q", name="n", data=1)
    assert (await next_event(listener))["jobId"] == "relayed"
    assert (await next_event(listener))["jobId"] == pushed["id"]
    # the stream has every queue's events, and the relayed one would have come first
    own = await next_event(peer)
    assert (own["jobId"], own["queue"], own["eventType"]) == (pushed["id"], "q", "pushed")
    await peer.aclose()
    await wait_until(lambda: streams(server) == 0, "the stream to end with its connection")


async def test_connections_are_held_while_a_client_listens_and_relay_each_event_once(
        nursery: trio.Nursery) -> None:
    owner, address = await start_broker(nursery)
    hub = EventHub()
    events = await start_events(nursery, hub, Members(b=address))
    await trio.testing.wait_all_tasks_blocked()
    assert events.links == 0 and streams(owner) == 0  # nobody listens here
    got: list[dict[str, Any]] = []
    subscriber = await listen(hub, got)
    assert events.status() == {"eventLinks": 1, "eventStreams": 0}
    assert streams(owner) == 1
    assert owner.tcp_port is not None
    client = await RawClient.connect(owner.tcp_port)
    pushed = await client.ok("PUSH", queue="far", name="n", data=1)
    await client.ok("PULL", queue="far", timeout=0)
    await client.ok("ACK", id=pushed["id"], result=7)
    await wait_until(lambda: len(job_events(got)) >= 4, "the job's events")
    jobs = job_events(got)
    assert [(e["eventType"], e["jobId"]) for e in jobs] == [
        ("pushed", pushed["id"]), ("pulled", pushed["id"]), ("drained", ""),
        ("completed", pushed["id"])]
    assert jobs[-1]["data"] == 7 and hub.relayed == len(got)
    hub.unsubscribe(subscriber)
    await wait_until(lambda: events.links == 0 and streams(owner) == 0,
                     "the connection to close once nobody listens")


async def test_connections_follow_the_brokers_that_join_and_leave(
        nursery: trio.Nursery) -> None:
    first, first_address = await start_broker(nursery)
    second, second_address = await start_broker(nursery)
    hub = EventHub()
    members = Members(b=first_address)
    events = await start_events(nursery, hub, members)
    got: list[dict[str, Any]] = []
    await listen(hub, got)
    members.set(b=first_address, c=second_address)
    await wait_until(lambda: events.links == 2 and streams(second) == 1, "a link to c")
    members.set(c=second_address)
    await wait_until(lambda: events.links == 1 and streams(first) == 0, "b's link gone")
    assert second.tcp_port is not None
    client = await RawClient.connect(second.tcp_port)
    pushed = await client.ok("PUSH", queue="q", name="n", data=1)
    await wait_until(lambda: len(job_events(got)) == 1, "c's event")
    assert job_events(got)[0]["jobId"] == pushed["id"]


async def test_a_broken_connection_is_opened_again_and_events_flow_after(
        nursery: trio.Nursery) -> None:
    owner, address = await start_broker(nursery)
    opener = Opener()
    hub = EventHub()
    events = await start_events(nursery, hub, Members(b=address), connect=opener,
                                retry_first_s=0.01)
    got: list[dict[str, Any]] = []
    await listen(hub, got)
    await opener.streams[0].aclose()  # broken under the reader
    await wait_until(lambda: len(opener.streams) == 2 and events.links == 1,
                     "a second connection")
    assert owner.tcp_port is not None
    client = await RawClient.connect(owner.tcp_port)
    pushed = await client.ok("PUSH", queue="q", name="n", data=1)
    await wait_until(lambda: len(job_events(got)) == 1, "the event, on the new connection")
    assert job_events(got)[0]["jobId"] == pushed["id"]
    await wait_until(lambda: streams(owner) == 1, "the old stream to end at the owner")


async def test_an_unreachable_broker_does_not_hold_the_subscription_up(
        nursery: trio.Nursery) -> None:
    hub = EventHub()
    events = await start_events(nursery, hub, Members(gone=f"127.0.0.1:{free_port()}"))
    await listen(hub, [])  # answered once the attempt failed
    assert events.links == 0


async def test_a_subscription_waiting_for_its_peers_is_answered_at_shutdown(
        nursery: trio.Nursery) -> None:
    # a peer that accepts connections and never answers the hello
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    hub = EventHub()
    answered = trio.Event()
    async with trio.open_nursery() as inner:
        await start_events(inner, hub, Members(mute=f"127.0.0.1:{port}"),
                           connect_timeout_s=60)
        hub.subscribe(lambda events: None)
        assert hub.when_relayed(answered.set) is False
        await trio.testing.wait_all_tasks_blocked()
        assert not answered.is_set()
        inner.cancel_scope.cancel()  # the broker shutting down
    assert answered.is_set() and hub.relay_gate is None
    for listener in listeners:
        await listener.aclose()


async def test_subscribe_events_is_answered_once_the_peers_events_reach_the_broker(
        nursery: trio.Nursery) -> None:
    owner, address = await start_broker(nursery)
    here, _ = await start_broker(nursery)
    events = await start_events(nursery, here.broker.events, Members(b=address))
    assert here.tcp_port is not None and owner.tcp_port is not None
    listener = await RawClient.connect(here.tcp_port)
    await listener.ok("SubscribeEvents", queue="q")
    # so a change made after the answer cannot be missed (QueueEvents' promise)
    assert events.links == 1 and streams(owner) == 1
    producer = await RawClient.connect(owner.tcp_port)
    pushed = await producer.ok("PUSH", queue="q", name="n", data=1)
    assert (await next_event(listener))["jobId"] == pushed["id"]
    # a second subscriber finds the connection up: answered at once
    other = await RawClient.connect(here.tcp_port)
    assert (await other.ok("SubscribeEvents", queue="q"))["ok"] is True
