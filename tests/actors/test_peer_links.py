"""PeerLinks against a real broker (in process, memory store, port 0): commands
forwarded in one write, replies relayed to their own sessions with their own reqIds,
and an error reply, never silence, whenever a peer cannot be reached or is lost."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Any

import pytest
import trio
import trio.testing

from trioqueue.actors.request import Request
from trioqueue.cluster.peers.links import PeerLinks
from trioqueue.cluster.peers.wire import PeerBroken, lost_error, relay
from trioqueue.config import Config
from trioqueue.server.run import Server
from trioqueue.testing import RawClient
from trioqueue.testing.deadline import wait_until
from trioqueue.transport.wire.framing import FrameDecoder

PING = [{"cmd": "Ping"}]
LONG_PULL_MS = 60_000


class FakeSession:
    """A session as the links see it: a replier that keeps what it is handed."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.replies: list[dict[str, Any]] = []
        self.handovers = 0  # calls of deliver/deliver_many

    def deliver(self, reply: dict[str, Any]) -> None:
        self.handovers += 1
        self.replies.append(reply)

    def deliver_many(self, replies: list[dict[str, Any]]) -> None:
        self.handovers += 1
        self.replies.extend(replies)

    def by_req_id(self) -> dict[Any, dict[str, Any]]:
        return {reply.get("reqId"): reply for reply in self.replies}


def request(session: FakeSession, cmd: str, req_id: Any = None, **fields: Any) -> Request:
    msg: dict[str, Any] = {"cmd": cmd, **fields}
    if req_id is not None:
        msg["reqId"] = req_id
    return Request(cmd, msg, session)


class CountingStream(trio.abc.Stream):
    """A TCP stream whose writes are recorded, to see how many a batch took."""

    def __init__(self, inner: trio.SocketStream) -> None:
        self.inner = inner
        self.writes: list[bytes] = []

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


class Opener:
    """PeerLinks' ``connect``: opens real TCP streams and keeps them, wrapped."""

    def __init__(self) -> None:
        self.streams: list[CountingStream] = []

    async def __call__(self, host: str, port: int) -> trio.abc.Stream:
        stream = CountingStream(await trio.open_tcp_stream(host, port))
        self.streams.append(stream)
        return stream


def frames_in(data: bytes) -> int:
    return len(FrameDecoder(1 << 30).feed(data))


def free_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def broker_config(**overrides: Any) -> Config:
    config = Config(host="127.0.0.1", tcp_port=0, ws_port=0, memory=True)
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


async def start_broker(nursery: trio.Nursery, **overrides: Any) -> tuple[Server, str]:
    server: Server = await nursery.start(Server(broker_config(**overrides)).run)
    return server, f"127.0.0.1:{server.tcp_port}"


async def run_in(scope: trio.CancelScope, server: Server, *,
                 task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Run ``server`` until ``scope`` is cancelled (a broker that goes away at once)."""
    with scope:
        await server.run(task_status=task_status)


@pytest.fixture
async def peer(nursery: trio.Nursery) -> AsyncIterator[str]:
    """A broker to forward to: its address."""
    server, address = await start_broker(nursery)
    yield address
    server.stop()


@pytest.fixture
def start_links(nursery: trio.Nursery) -> Callable[..., Any]:
    """Start a PeerLinks in the test's nursery (cancelled with it)."""

    async def start(**kwargs: Any) -> PeerLinks:
        kwargs.setdefault("hello", lambda: PING)
        kwargs.setdefault("connect_timeout_s", 5.0)
        links = PeerLinks(**kwargs)
        await nursery.start(links.run)
        return links

    return start


async def answered(*sessions: FakeSession, count: int, timeout_s: float = 10.0) -> None:
    await wait_until(lambda: sum(len(s.replies) for s in sessions) >= count,
                     f"{count} replies", timeout_s)


async def test_a_batch_goes_out_in_one_write_and_each_reply_keeps_its_clients_req_id(
        peer: str, start_links: Callable[..., Any]) -> None:
    opener = Opener()
    links: PeerLinks = await start_links(connect=opener)
    alice, bob = FakeSession("alice"), FakeSession("bob")
    reqs: list[Request] = []
    for i in range(200):
        session = alice if i % 2 else bob
        # every 10th without a reqId; the others a string or an int, as clients send
        req_id = None if i % 10 == 0 else (f"c{i}" if i % 3 else i)
        reqs.append(request(session, "PUSH", req_id, queue="remote",
                            data={"i": i, "who": session.name, "blob": b"\x00\xff" * 4,
                                  "big": 2**70 + i, "nested": {"list": [1, {"x": None}]}}))
    originals = [dict(req.msg) for req in reqs]

    links.forward(peer, reqs)
    await answered(alice, bob, count=200)

    # one write for the hello, ONE for the 200 commands queued before the sender ran
    [stream] = opener.streams
    assert [frames_in(w) for w in stream.writes] == [1, 200]
    assert [req.msg for req in reqs] == originals  # the clients' maps are untouched
    for session in (alice, bob):
        assert len(session.replies) == 100
        assert all(reply["ok"] for reply in session.replies)
        # a read's replies are handed over together, not one call each
        assert session.handovers < len(session.replies)
    job_ids: dict[Any, Any] = {}
    for original in originals:
        session = alice if original["data"]["who"] == "alice" else bob
        if "reqId" in original:
            reply = session.by_req_id()[original["reqId"]]
            job_ids[original["reqId"]] = reply["id"]
    unnamed = [r for s in (alice, bob) for r in s.replies if "reqId" not in r]
    assert len(unnamed) == 20  # the ones sent without a reqId came back without one
    assert links.in_flight(peer) == 0

    # the jobs exist on the peer: read back through a forward too
    reader = FakeSession("reader")
    links.forward(peer, [request(reader, "GetJob", f"get-{name}", id=job_id)
                         for name, job_id in job_ids.items()])
    await answered(reader, count=len(job_ids))
    for name, job_id in job_ids.items():
        job = reader.by_req_id()[f"get-{name}"]["job"]
        assert job["id"] == job_id
        assert job["data"]["blob"] == b"\x00\xff" * 4
        assert job["data"]["big"] - 2**70 == job["data"]["i"]
        assert job["data"]["nested"] == {"list": [1, {"x": None}]}
    assert len(stream.writes) == 3  # the same connection, one write more


async def test_the_same_req_ids_of_two_sessions_reach_their_own_session(
        peer: str, start_links: Callable[..., Any]) -> None:
    links: PeerLinks = await start_links()
    alice, bob = FakeSession("alice"), FakeSession("bob")
    links.forward(peer, [request(alice, "PUSH", "r1", queue="qa", data={"for": "alice"}),
                         request(bob, "PUSH", "r1", queue="qb", data={"for": "bob"})])
    await answered(alice, bob, count=2)
    alice_job = alice.replies[0]["id"]
    bob_job = bob.replies[0]["id"]
    assert alice_job != bob_job
    links.forward(peer, [request(alice, "GetJob", "r2", id=alice_job),
                         request(bob, "GetJob", "r2", id=bob_job)])
    await answered(alice, bob, count=4)
    assert alice.by_req_id()["r2"]["job"]["data"] == {"for": "alice"}
    assert bob.by_req_id()["r2"]["job"]["data"] == {"for": "bob"}
    assert [r["reqId"] for r in alice.replies + bob.replies] == ["r1", "r2", "r1", "r2"]


async def test_a_large_reply_is_relayed_whole(
        peer: str, start_links: Callable[..., Any]) -> None:
    links: PeerLinks = await start_links()
    session = FakeSession("s")
    text = "x" * 300_000  # its GetJob reply is decoded in slices
    links.forward(peer, [request(session, "PUSH", "push", queue="big", data={"t": text})])
    await answered(session, count=1)
    links.forward(peer, [request(session, "GetJob", "get", id=session.replies[0]["id"]),
                         request(session, "Ping", "after")])
    await answered(session, count=3)
    assert session.by_req_id()["get"]["job"]["data"] == {"t": text}
    assert session.by_req_id()["after"]["ok"] is True


def test_a_refusal_that_names_no_request_is_the_one_in_flight_or_breaks_the_link() -> None:
    alone = FakeSession("alone")
    pending = {7: request(alone, "PUSH", "mine")}
    refusal = {"ok": False, "error": "Invalid frame"}
    assert relay(pending, dict(refusal)) == (alone, {**refusal, "reqId": "mine"})
    assert pending == {}
    two = {1: request(alone, "PUSH", "a"), 2: request(alone, "PUSH", "b")}
    with pytest.raises(PeerBroken):
        relay(two, dict(refusal))  # whose it is cannot be told: waiting would hang it
    assert relay(two, {"type": "event", "event": {}}) is None  # events answer nothing
    assert relay({}, dict(refusal)) is None  # (an idle timeout's notice)


async def test_a_message_the_codec_refuses_is_answered_at_once_and_the_rest_still_goes(
        peer: str, start_links: Callable[..., Any]) -> None:
    links: PeerLinks = await start_links()
    session = FakeSession("s")
    links.forward(peer, [request(session, "PUSH", "good1", queue="q", data={"n": 1}),
                         request(session, "PUSH", "bad", queue="q", data={"n": object()}),
                         request(session, "PUSH", "good2", queue="q", data={"n": 2})])
    await answered(session, count=3)
    replies = session.by_req_id()
    assert replies["good1"]["ok"] and replies["good2"]["ok"]
    assert replies["bad"]["ok"] is False
    assert replies["bad"]["error"].startswith("Could not forward PUSH to the broker at")


async def test_a_refused_hello_fails_the_waiting_commands_without_a_hang(
        nursery: trio.Nursery, start_links: Callable[..., Any]) -> None:
    server, address = await start_broker(nursery, auth_tokens=["secret"])
    wrong: PeerLinks = await start_links(
        hello=lambda: [{"cmd": "Auth", "token": "wrong"}], connect_timeout_s=5.0)
    session = FakeSession("s")
    with trio.fail_after(2):
        wrong.forward(address, [request(session, "PUSH", f"r{i}", queue="q", data={})
                                for i in range(3)])
        await answered(session, count=3)
    for reply in session.replies:
        assert reply["ok"] is False
        assert reply["error"].startswith(f"Broker at {address} is unreachable: "
                                         "it refused Auth")
    assert wrong.in_flight(address) == 0

    right: PeerLinks = await start_links(
        hello=lambda: [{"cmd": "Auth", "token": "secret"}])
    fine = FakeSession("fine")
    right.forward(address, [request(fine, "PUSH", "r", queue="q", data={})])
    await answered(fine, count=1)
    assert fine.replies[0]["ok"] is True
    server.stop()


async def test_an_unreachable_peer_fails_the_commands_within_the_connect_timeout(
        start_links: Callable[..., Any]) -> None:
    links: PeerLinks = await start_links(connect_timeout_s=1.0)
    address = f"127.0.0.1:{free_port()}"
    session = FakeSession("s")
    with trio.fail_after(1.0):
        links.forward(address, [request(session, "Ping", "p1"), request(session, "Ping")])
        await answered(session, count=2)
    assert [r["ok"] for r in session.replies] == [False, False]
    assert all(r["error"].startswith(f"Broker at {address} is unreachable: ")
               for r in session.replies)
    assert [r.get("reqId") for r in session.replies] == ["p1", None]
    # and again on the next forward (a new attempt, after a short backoff)
    with trio.fail_after(2.0):
        links.forward(address, [request(session, "Ping", "p2")])
        await answered(session, count=3)
    assert session.replies[2]["ok"] is False


async def test_a_peer_that_accepts_but_never_answers_the_hello_times_out(
        nursery: trio.Nursery, start_links: Callable[..., Any]) -> None:
    async def silent(stream: trio.SocketStream) -> None:
        await trio.sleep_forever()

    [listener] = await nursery.start(partial(trio.serve_tcp, silent, 0, host="127.0.0.1"))
    address = f"127.0.0.1:{listener.socket.getsockname()[1]}"
    links: PeerLinks = await start_links(connect_timeout_s=0.3)
    session = FakeSession("s")
    started = trio.current_time()
    with trio.fail_after(2):
        links.forward(address, [request(session, "Ping", "p")])
        await answered(session, count=1)
    assert trio.current_time() - started >= 0.3
    assert session.replies == [{"ok": False, "reqId": "p", "error":
                                f"Broker at {address} is unreachable: no connection "
                                "within 0.3 s"}]


async def test_a_peer_that_stops_fails_the_commands_in_flight_and_is_reconnected(
        nursery: trio.Nursery, start_links: Callable[..., Any]) -> None:
    opener = Opener()
    links: PeerLinks = await start_links(connect=opener)
    first_life = trio.CancelScope()
    first: Server = await nursery.start(run_in, first_life, Server(broker_config()))
    port = first.tcp_port
    address = f"127.0.0.1:{port}"
    session = FakeSession("s")
    links.forward(address, [request(session, "PULL", "waits", queue="empty",
                                    timeout=LONG_PULL_MS)])
    await wait_until(lambda: bool(opener.streams) and len(opener.streams[0].writes) == 2,
                     "the PULL written")
    first_life.cancel()  # the peer broker goes away while the PULL waits there
    with trio.fail_after(5):
        await answered(session, count=1)
    assert session.replies == [{"ok": False, "reqId": "waits", "error": lost_error(address)}]
    assert links.in_flight(address) == 0

    # back on the same port: the next forward opens a new connection
    second: Server = await nursery.start(Server(broker_config(tcp_port=port)).run)
    with trio.fail_after(5):
        links.forward(address, [request(session, "PUSH", "again", queue="q", data={})])
        await answered(session, count=2)
    assert session.replies[1]["ok"] is True, session.replies[1]
    assert len(opener.streams) == 2
    second.stop()


async def test_cancelling_run_answers_every_request_it_holds(peer: str) -> None:
    async def silent(stream: trio.SocketStream) -> None:
        await trio.sleep_forever()

    opener = Opener()
    links = PeerLinks(hello=lambda: PING, connect_timeout_s=30.0, connect=opener)
    session = FakeSession("s")
    async with trio.open_nursery() as outer:
        [listener] = await outer.start(partial(trio.serve_tcp, silent, 0, host="127.0.0.1"))
        mute = f"127.0.0.1:{listener.socket.getsockname()[1]}"
        async with trio.open_nursery() as owner:
            # forwarded before run has started: they wait for it
            links.forward(peer, [request(session, "PULL", "in-flight", queue="empty",
                                         timeout=LONG_PULL_MS)])
            links.forward(mute, [request(session, "Ping", "queued")])
            owner.start_soon(links.run)
            await wait_until(lambda: any(len(s.writes) == 2 for s in opener.streams),
                             "the PULL written")
            assert links.in_flight(peer) == 1 and links.in_flight(mute) == 1
            assert session.replies == []
            owner.cancel_scope.cancel()  # the broker shuts down
        replies = session.by_req_id()
        assert replies["in-flight"]["ok"] is False
        assert replies["in-flight"]["error"].startswith("This broker is shutting down")
        assert "may or may not have been applied" in replies["in-flight"]["error"]
        assert replies["queued"] == {
            "ok": False, "reqId": "queued",
            "error": f"Not forwarded to the broker at {mute}: this broker is shutting down"}
        late = FakeSession("late")
        links.forward(peer, [request(late, "Ping", "after")])
        assert late.replies[0]["ok"] is False  # refused at once after the end
        outer.cancel_scope.cancel()


async def test_dropping_a_link_answers_its_requests(
        peer: str, start_links: Callable[..., Any]) -> None:
    opener = Opener()
    links: PeerLinks = await start_links(connect=opener)
    session = FakeSession("s")
    links.forward(peer, [request(session, "PULL", "w", queue="empty",
                                 timeout=LONG_PULL_MS)])
    await wait_until(lambda: bool(opener.streams) and len(opener.streams[0].writes) == 2,
                     "the PULL written")
    links.drop(peer)
    assert session.replies == [{
        "ok": False, "reqId": "w",
        "error": f"The broker at {peer} left the cluster before answering (its queues "
                 "move to the others): the command may or may not have been applied; "
                 "retry"}]
    assert links.in_flight(peer) == 0
    # a later forward to the address opens a new link
    links.forward(peer, [request(session, "Ping", "p")])
    await answered(session, count=2)
    assert session.replies[1]["ok"] is True
    assert len(opener.streams) == 2


async def test_past_max_in_flight_forward_refuses_and_forward_wait_waits(
        peer: str, start_links: Callable[..., Any]) -> None:
    links: PeerLinks = await start_links(max_in_flight=2)
    session = FakeSession("s")
    links.forward(peer, [request(session, "PULL", f"w{i}", queue="pm",
                                 timeout=LONG_PULL_MS) for i in range(3)])
    assert session.replies == [{
        "ok": False, "reqId": "w2",
        "error": f"Too many commands in flight to the broker at {peer} (2): try again"}]
    assert links.in_flight(peer) == 2

    pushed = trio.Event()

    async def push_when_room() -> None:
        await links.forward_wait(peer, [request(session, "PUSH", "p", queue="pm",
                                                data={"by": "forward_wait"})])
        pushed.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(push_when_room)
        await trio.testing.wait_all_tasks_blocked()
        assert not pushed.is_set()  # no room: it waits
        # a job from another client: one PULL is answered, which makes room
        client = await RawClient.connect(int(peer.rsplit(":", 1)[1]))
        await client.ok("PUSH", queue="pm", data={"by": "client"})
        await client.aclose()
        with trio.fail_after(5):
            await pushed.wait()
    # the forwarded PUSH feeds the other PULL
    await answered(session, count=4)
    replies = session.by_req_id()
    assert replies["p"]["ok"] is True
    assert {replies["w0"]["job"]["data"]["by"], replies["w1"]["job"]["data"]["by"]} == {
        "client", "forward_wait"}


async def test_event_frames_are_counted_and_dropped(
        peer: str, start_links: Callable[..., Any]) -> None:
    links: PeerLinks = await start_links()
    session = FakeSession("s")
    links.forward(peer, [request(session, "SubscribeEvents", "sub", queue="ev"),
                         request(session, "PUSH", "push", queue="ev", data={})])
    await answered(session, count=2)
    await wait_until(lambda: links.dropped_frames > 0, "an event frame")
    assert {r["reqId"] for r in session.replies} == {"sub", "push"}


@pytest.mark.parametrize(("setting", "value"), [
    ("peer_connect_timeout_s", 0.0), ("peer_connect_timeout_s", float("inf")),
    ("peer_max_in_flight", 0)])
def test_the_link_limits_are_checked_settings(setting: str, value: Any) -> None:
    Config().validate()
    with pytest.raises(ValueError, match=setting):
        broker_config(**{setting: value}).validate()


async def test_a_peer_that_stops_answering_has_its_commands_answered_at_the_deadline(
        nursery: trio.Nursery, start_links: Callable[..., Any]) -> None:
    """A peer that takes the commands and never answers (frozen, wedged): once a
    command that holds nothing waits past the reply deadline, every command on the
    link gets an error that says to retry (the long-poll behind it too), and the next
    command opens a new connection."""
    accepted: list[trio.SocketStream] = []

    async def frozen(stream: trio.SocketStream) -> None:
        accepted.append(stream)
        await trio.sleep_forever()

    [listener] = await nursery.start(partial(trio.serve_tcp, frozen, 0, host="127.0.0.1"))
    address = f"127.0.0.1:{listener.socket.getsockname()[1]}"
    links: PeerLinks = await start_links(hello=lambda: [], reply_timeout_s=0.4)
    session = FakeSession("s")
    started = trio.current_time()
    links.forward(address, [request(session, "PULL", "long", queue="q",
                                    timeout=LONG_PULL_MS),
                            request(session, "PUSH", "push", queue="q", data=1)])
    await answered(session, count=2, timeout_s=3)
    waited = trio.current_time() - started
    assert 0.4 <= waited < 1.5, waited
    for reply in session.replies:
        assert reply["error"] == (f"The broker at {address} did not answer within 0.4 s: "
                                  "the command may or may not have been applied; retry")
    assert links.in_flight(address) == 0
    links.forward(address, [request(session, "Ping", "again")])
    await wait_until(lambda: len(accepted) == 2, "a new connection")


async def test_a_long_poll_alone_is_not_cut_by_the_reply_deadline(
        nursery: trio.Nursery, start_links: Callable[..., Any]) -> None:
    """A long-poll may rightly wait at the peer longer than the deadline."""
    async def quiet(stream: trio.SocketStream) -> None:
        await trio.sleep_forever()

    [listener] = await nursery.start(partial(trio.serve_tcp, quiet, 0, host="127.0.0.1"))
    address = f"127.0.0.1:{listener.socket.getsockname()[1]}"
    links: PeerLinks = await start_links(hello=lambda: [], reply_timeout_s=0.2)
    session = FakeSession("s")
    links.forward(address, [request(session, "PULL", "long", queue="q",
                                    timeout=LONG_PULL_MS)])
    await trio.sleep(1.0)  # (five deadlines pass: nothing may happen in them)
    assert session.replies == [] and links.in_flight(address) == 1
