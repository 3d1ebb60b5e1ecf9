"""The I/O shell's bounds on hostile or careless clients (issue 12), over real sockets.

Each test starts an in-process broker with the limit under test lowered and checks what
a client observes: an error frame, a closed connection, a connection kept. Clocks run
on trio's MockClock (``autojump_clock``) where a test waits for a timeout, so 30 s pass
in no real time; a ``trio.sleep`` there is virtual time passing, the thing under test.
The byte budgets are read from the broker (``server.shell``), not guessed.
"""

from __future__ import annotations

import gc
import json
import os
import socket
import weakref
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import pytest
import trio
import trio.testing
from trio_websocket import ConnectionClosed, open_websocket_url

from trioqueue.server.run import Server
from trioqueue.testing import RawClient
from trioqueue.testing.deadline import wait_until as _wait_until
from trioqueue.testing.wire import websocket_upgrade
from trioqueue.transport.limits import ByteBudget
from trioqueue.transport.wire.codec import MSGPACK
from trioqueue.transport.wire.framing import encode_frame, frame_header

wait_until = partial(_wait_until, timeout_s=10.0)  # this file's deadline

StartServer = Callable[..., Awaitable[Server]]
MockClock = trio.testing.MockClock


async def connect(server: Server, rcvbuf: int = 0) -> RawClient:
    """A raw client; ``rcvbuf`` shrinks its receive buffer, so that a client that does
    not read makes the broker queue its replies early."""
    assert server.tcp_port is not None
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    await sock.connect(("127.0.0.1", server.tcp_port))
    return RawClient(trio.SocketStream(sock))






def totals(budget: ByteBudget, nbytes: int) -> bool:
    return budget.total == nbytes


def push_frame(size: int) -> bytes:
    """A msgpack PUSH frame whose body is exactly ``size`` bytes."""
    pad = size
    for _ in range(10):
        payload = MSGPACK.encode({"cmd": "PUSH", "queue": "big", "name": "n",
                                  "data": "x" * pad, "reqId": "big"})
        if len(payload) == size:
            return encode_frame(payload)
        pad += size - len(payload)
    raise AssertionError(f"cannot build a {size}-byte payload")


# ------------------------------------------------------------------ auth_timeout_s


async def test_a_connection_that_does_not_authenticate_is_closed_at_auth_timeout_s(
    autojump_clock: MockClock, start_server: StartServer,
) -> None:
    server = await start_server(memory=True, auth_tokens=["s3cret"], auth_timeout_s=10,
                                idle_timeout_s=0)
    silent = await connect(server)
    wrong = await connect(server)
    authed = await connect(server)
    started = trio.current_time()
    assert (await wrong.call("Auth", token="nope"))["error"] == "Invalid token"
    await authed.ok("Auth", token="s3cret")
    for client in (silent, wrong):
        with trio.fail_after(60):
            reply = await client.receive()
            assert await client.is_closed()
        assert reply == {"ok": False,
                         "error": "Authentication timeout: no valid Auth within 10 s"}
        assert 10 <= trio.current_time() - started < 11
    await trio.sleep(60)  # well past the deadline: the authenticated one stays
    await authed.ok("Ping")


async def test_without_tokens_there_is_no_auth_timeout(
    autojump_clock: MockClock, start_server: StartServer,
) -> None:
    server = await start_server(memory=True, auth_timeout_s=1, idle_timeout_s=0)
    client = await connect(server)
    await trio.sleep(30)
    await client.ok("Ping")


# ------------------------------------------------------------------ max_preauth_frame_bytes


async def test_a_frame_over_the_preauth_cap_is_refused_and_the_connection_closed(
    start_server: StartServer,
) -> None:
    server = await start_server(memory=True, auth_tokens=["s3cret"],
                                max_preauth_frame_bytes=1024)
    small = await connect(server)
    await small.send_raw(push_frame(1000))  # under the cap: answered, not closed
    assert (await small.receive())["error"] == "Not authenticated"
    big = await connect(server)
    await big.send_raw(push_frame(2000))
    with trio.fail_after(5):
        assert await big.receive() == {
            "ok": False, "error": "Frame too large before authentication: 2000 bytes "
                                  "exceeds maximum 1024 (send Auth first)"}
        assert await big.is_closed()
    await small.ok("Auth", token="s3cret")


async def test_a_header_over_the_preauth_cap_is_refused_before_its_body(
    start_server: StartServer,
) -> None:
    server = await start_server(memory=True, auth_tokens=["s3cret"],
                                max_preauth_frame_bytes=16 * 1024)
    client = await connect(server)
    await client.send_raw(frame_header(8 * 1024 * 1024))  # 8 MiB announced, none sent
    with trio.fail_after(5):
        reply = await client.receive()
        assert await client.is_closed()
    assert reply["error"].startswith("Frame too large before authentication: 8388608 bytes")
    assert server.shell.partial_frames.total == 0


async def test_after_auth_the_full_frame_cap_applies_even_in_the_same_read(
    start_server: StartServer,
) -> None:
    server = await start_server(memory=True, auth_tokens=["s3cret"],
                                max_preauth_frame_bytes=1024)
    client = await connect(server)
    auth = client.frame({"cmd": "Auth", "token": "s3cret", "reqId": "auth"})
    await client.send_raw(auth + push_frame(100_000))  # pipelined: one write
    with trio.fail_after(5):
        assert (await client.reply_to("auth"))["ok"] is True
        assert (await client.reply_to("big"))["ok"] is True
    await client.send_raw(push_frame(200_000))
    with trio.fail_after(5):
        assert (await client.reply_to("big"))["ok"] is True
    assert (await client.ok("Count", queue="big"))["count"] == 2


async def test_the_preauth_cap_applies_to_websocket_messages(start_server: StartServer) -> None:
    server = await start_server(memory=True, auth_tokens=["s3cret"],
                                max_preauth_frame_bytes=1024)
    url = f"ws://127.0.0.1:{server.ws_port}/ws"
    async with open_websocket_url(url) as ws:
        await ws.send_message(json.dumps({"cmd": "Auth", "token": "x" * 2000}))
        with trio.fail_after(5), pytest.raises(ConnectionClosed) as closed:
            await ws.get_message()
    assert closed.value.reason is not None and closed.value.reason.code == 1009
    async with open_websocket_url(url) as ws:
        await ws.send_message(json.dumps({"cmd": "Auth", "token": "s3cret", "reqId": "a"}))
        with trio.fail_after(5):
            assert json.loads(await ws.get_message())["ok"] is True
        await ws.send_message(json.dumps({"cmd": "PUSH", "queue": "w", "name": "n",
                                          "data": "y" * 5000, "reqId": "p"}))
        with trio.fail_after(5):
            while (reply := json.loads(await ws.get_message())).get("reqId") != "p":
                pass
        assert reply["ok"] is True


# ------------------------------------------------------------------ idle_timeout_s


async def test_an_idle_connection_is_closed_at_idle_timeout_s(
    autojump_clock: MockClock, start_server: StartServer,
) -> None:
    server = await start_server(memory=True, idle_timeout_s=30)
    client = await connect(server)
    await client.ok("Ping")
    started = trio.current_time()
    with trio.fail_after(300):
        reply = await client.receive()
        assert await client.is_closed()
    assert reply == {"ok": False, "error": "Idle timeout: nothing received for 30 s"}
    assert 30 <= trio.current_time() - started < 31


async def test_a_connection_that_keeps_sending_is_not_idle(
    autojump_clock: MockClock, start_server: StartServer,
) -> None:
    server = await start_server(memory=True, idle_timeout_s=30)
    client = await connect(server)
    for _ in range(6):  # 120 s in all, never 30 s without a command
        await trio.sleep(20)
        await client.ok("Ping")


async def test_a_parked_pull_keeps_its_connection_past_the_idle_timeout(
    autojump_clock: MockClock, start_server: StartServer,
) -> None:
    server = await start_server(memory=True, idle_timeout_s=30)
    client = await connect(server)
    started = trio.current_time()
    with trio.fail_after(300):
        reply = await client.call("PULL", queue="empty", timeout=45_000)
        answered = trio.current_time() - started
        assert reply["ok"] is True and reply["job"] is None
        notice = await client.receive()  # idle from then on: closed
        assert await client.is_closed()
    assert answered >= 44.99  # the queue's clock is in milliseconds
    assert notice["error"].startswith("Idle timeout")
    assert trio.current_time() - started >= 45


async def test_a_connection_holding_a_lease_is_kept_until_it_ends(
    autojump_clock: MockClock, start_server: StartServer,
) -> None:
    server = await start_server(memory=True, idle_timeout_s=30)
    producer = await connect(server)
    # A long job: no heartbeat for 200 s, and neither its lease nor the stall detector
    # (stallTimeout) gives up on it meanwhile.
    pushed = await producer.ok("PUSH", queue="leased", name="n", data=1,
                               stallTimeout=600_000)
    worker = await connect(server)
    pulled = await worker.ok("PULL", queue="leased", owner="w", lockTtl=600_000)
    assert pulled["job"]["id"] == pushed["id"]
    await trio.sleep(200)
    await worker.ok("ACK", id=pushed["id"], token=pulled["token"], result="done")
    acked = trio.current_time()
    with trio.fail_after(300):
        assert (await worker.receive())["error"].startswith("Idle timeout")
    assert trio.current_time() - acked >= 30


async def test_an_event_subscriber_is_kept_past_the_idle_timeout(
    autojump_clock: MockClock, start_server: StartServer,
) -> None:
    server = await start_server(memory=True, idle_timeout_s=30)
    listener = await connect(server)
    await listener.ok("SubscribeEvents", queue="watched")
    await trio.sleep(200)
    producer = await connect(server)
    await producer.ok("PUSH", queue="watched", name="n", data=1)
    with trio.fail_after(5):
        event = await listener.receive()
    assert event["type"] == "event" and event["event"]["eventType"] == "pushed"


async def ws_handshake(server: Server, path: str = "/ws") -> trio.SocketStream:
    """A WebSocket client made by hand, which never answers a ping."""
    assert server.ws_port is not None
    stream = await trio.open_tcp_stream("127.0.0.1", server.ws_port)
    await stream.send_all(websocket_upgrade(path))
    return stream


async def read_to_the_end(stream: trio.SocketStream) -> bytes:
    data = b""
    while True:
        try:
            chunk = await stream.receive_some(1 << 16)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return data
        if not chunk:
            return data
        data += chunk


async def test_an_idle_websocket_that_answers_pings_stays_one_that_does_not_is_closed(
    autojump_clock: MockClock, start_server: StartServer,
) -> None:
    server = await start_server(memory=True, idle_timeout_s=30, ws_close_timeout_s=5)
    mute = await ws_handshake(server)
    started = trio.current_time()
    async with open_websocket_url(f"ws://127.0.0.1:{server.ws_port}/ws") as alive:
        with trio.fail_after(300):
            wire = await read_to_the_end(mute)
        closed_after = trio.current_time() - started
        assert b"\r\n\r\n\x89" in wire  # after the 101 response: a ping frame (0x89)
        assert b"\x88" in wire.split(b"\x89", 1)[1]  # then a close frame
        assert b"Idle timeout" in wire
        # Idle 30 s, then 5 s for the pong; the close frame then waits up to
        # ws_close_timeout_s (5 s) for the client's own before the socket closes.
        assert 35 <= closed_after <= 40.01
        await trio.sleep(100)  # the library client answers every ping: still open
        await alive.send_message(json.dumps({"cmd": "Ping", "reqId": "p"}))
        with trio.fail_after(5):
            while "reqId" not in (reply := json.loads(await alive.get_message())):
                pass
        assert reply["ok"] is True


async def test_a_websocket_that_does_not_authenticate_is_closed_with_1008(
    autojump_clock: MockClock, start_server: StartServer,
) -> None:
    server = await start_server(memory=True, auth_tokens=["s3cret"], auth_timeout_s=10,
                                idle_timeout_s=0)
    async with open_websocket_url(f"ws://127.0.0.1:{server.ws_port}/ws") as ws:
        started = trio.current_time()
        with trio.fail_after(60), pytest.raises(ConnectionClosed) as closed:
            await ws.get_message()
    assert closed.value.reason is not None and closed.value.reason.code == 1008
    assert trio.current_time() - started >= 10


# ------------------------------------------------------------------ refused upgrades


@pytest.mark.parametrize("path", ["/nope", "/ws/queues/%20"])
async def test_a_websocket_upgrade_to_a_bad_path_gets_404_and_the_connection_closes(
    start_server: StartServer, path: str,
) -> None:
    server = await start_server(memory=True)
    stream = await ws_handshake(server, path)
    with trio.fail_after(5):
        wire = await read_to_the_end(stream)
    assert wire.startswith(b"HTTP/1.1 404 ")
    assert wire.endswith(b"Not found")


async def test_a_websocket_upgrade_past_max_connections_gets_503_and_the_connection_closes(
    start_server: StartServer,
) -> None:
    server = await start_server(memory=True, max_connections=1)
    tcp = await connect(server)
    await tcp.ok("Ping")
    stream = await ws_handshake(server)
    with trio.fail_after(5):
        wire = await read_to_the_end(stream)
    assert wire.startswith(b"HTTP/1.1 503 ")
    assert wire.endswith(b"Too many connections")
    assert server.shell.refusals.count == 1


# ------------------------------------------------------------------ max_partial_frame_total_bytes


async def test_past_the_partial_frame_budget_the_largest_holder_is_cut(
    start_server: StartServer,
) -> None:
    limit = 3 * 1024 * 1024
    server = await start_server(memory=True, max_frame_bytes=1024 * 1024,
                                max_partial_frame_total_bytes=limit)
    budget = server.shell.partial_frames
    healthy = await connect(server)
    sizes = [950_000, 900_000, 850_000, 800_000]  # of 1 MiB frames, never finished
    hogs: list[RawClient] = []
    sent = 0
    for i, size in enumerate(sizes):
        hog = await connect(server)
        hogs.append(hog)
        await hog.send_raw(push_frame(1024 * 1024)[:size])
        sent += size
        # The fourth takes the total over the budget: the first (the largest) goes.
        held = sent if i < 3 else sent - sizes[0]
        await wait_until(partial(totals, budget, held), f"the broker to buffer {held} bytes")
    await wait_until(lambda: hogs[0].peer_closed(), "the largest holder to be cut")
    assert budget.cuts == 1
    assert budget.total == sum(sizes[1:]) <= limit
    assert not any(hog.peer_closed() for hog in hogs[1:])
    with trio.fail_after(5):
        notice = await hogs[0].receive()
    assert notice["error"].startswith("Connection cut: the broker's "
                                      "max_partial_frame_total_bytes was reached")
    # The others finish their frames and are served; the budget empties.
    for hog, size in zip(hogs[1:], sizes[1:], strict=True):
        await hog.send_raw(push_frame(1024 * 1024)[size:])
        with trio.fail_after(5):
            assert (await hog.reply_to("big"))["ok"] is True
    assert budget.total == 0
    assert (await healthy.ok("Count", queue="big"))["count"] == 3


# ------------------------------------------------------------------ max_write_queue_total_bytes


async def test_past_the_reply_budget_the_largest_holder_is_cut_and_its_lease_released(
    start_server: StartServer,
) -> None:
    limit = 8 * 1024 * 1024
    server = await start_server(memory=True, max_write_queue_total_bytes=limit,
                                idle_timeout_s=0)
    budget = server.shell.replies
    healthy = await connect(server)
    big = await healthy.ok("PUSH", queue="data", name="n", data="y" * 200_000)
    work = await healthy.ok("PUSH", queue="work", name="n", data=1)
    leaser = await connect(server, rcvbuf=4096)
    pulled = await leaser.ok("PULL", queue="work", owner="w", lockTtl=600_000)
    assert pulled["job"]["id"] == work["id"]
    ask = healthy.frame({"cmd": "GetJob", "id": big["id"]})
    # The leaser asks for 8 MB of replies and reads none: under the per-connection
    # bound (64 MiB), and most of it queued on the broker once the kernel's buffers fill.
    await leaser.send_raw(ask * 40)
    await wait_until(lambda: budget.total >= 4 * 1024 * 1024, "the leaser's replies to queue")
    assert budget.cuts == 0
    others = [await connect(server, rcvbuf=4096) for _ in range(2)]
    for other in others:
        await other.send_raw(ask * 20)
    await wait_until(lambda: leaser.peer_closed(), "the largest holder to be cut")
    assert budget.total <= limit
    # Cut like any closed connection: its un-renewed job goes back to the queue.
    with trio.fail_after(5):
        while (await healthy.ok("GetState", id=work["id"]))["state"] != "waiting":
            await trio.sleep(0.01)
    assert (await healthy.ok("Count", queue="data"))["count"] == 1
    for other in others:
        await other.aclose()
    await wait_until(lambda: budget.total == 0, "the budget to empty")


async def test_a_long_reply_a_client_does_not_read_counts_in_the_reply_budget(
    start_server: StartServer,
) -> None:
    """A listing of 250 jobs (10 MB, encoded a slice at a time by the sender) to a client
    that reads nothing: its bytes count in the broker-wide budget as they are encoded.
    Before, they counted only once its first piece was on the wire, which a client
    that reads nothing never lets happen: 10 such clients held 100 MB uncounted."""
    server = await start_server(memory=True, idle_timeout_s=0)
    budget = server.shell.replies
    healthy = await connect(server)
    for _ in range(5):
        await healthy.ok("PUSHB", queue="list", jobs=[
            {"name": "n", "data": {"text": "z" * 40_000}} for _ in range(50)])
    hog = await connect(server, rcvbuf=4096)
    await hog.send_raw(hog.frame({"cmd": "GetJobs", "queue": "list", "limit": 250}))
    # (the kernel's buffers take a few hundred KB of it at most)
    await wait_until(lambda: budget.total >= 8 * 1024 * 1024, "the unread listing to count")
    await hog.aclose()
    await wait_until(lambda: budget.total == 0, "the budget to empty")


class _Marker:
    """Something a stack holds, whose end a weak reference sees."""


def _cut_holding(budget: ByteBudget, holder: Any, nbytes: int) -> weakref.ref[_Marker]:
    marker = _Marker()  # what this stack holds: a queue step's replies, say
    budget.set(holder, nbytes)  # past the bound: the largest holder is cut
    return weakref.ref(marker)


@pytest.mark.parametrize("transport", ["tcp", "websocket"])
async def test_a_cut_keeps_nothing_of_the_stack_it_was_made_in(
    start_server: StartServer, transport: str,
) -> None:
    """A budget cuts the largest holder from inside the step that handed some
    connection its replies. trio raises the Cancelled of a task parked elsewhere in
    the stack of whoever cancels it, and its traceback then held every frame of that
    stack (the step's replies among them) until the cut connection's tasks had run,
    or, in the standalone broker, until a pass of the cyclic GC: 10 clients that read
    nothing grew the broker by up to 30 MiB for a 32 MiB bound in their listings alone.
    Now the run loop cancels the connection: the stack keeps nothing once it returns."""
    limit = 4 * 1024 * 1024
    server = await start_server(memory=True, max_write_queue_total_bytes=limit,
                                idle_timeout_s=0)
    budget = server.shell.replies
    healthy = await connect(server)
    big = await healthy.ok("PUSH", queue="data", name="n", data="y" * 100_000)
    if transport == "tcp":
        hog: Any = await connect(server, rcvbuf=4096)
        await hog.send_raw(hog.frame({"cmd": "GetJob", "id": big["id"]}) * 30)
    else:
        hog = await ws_hog(server)
        await hog.send_all(ws_text_frame(json.dumps({"cmd": "GetJob", "id": big["id"]})) * 30)
    await wait_until(lambda: budget.total >= 1024 * 1024, "the hog's replies to queue")
    (holder,) = list(budget._held)
    gc.disable()  # (only references count here)
    try:
        marker = _cut_holding(budget, holder, limit + 1)
        assert budget.cuts == 1
        assert marker() is None
    finally:
        gc.enable()
    with trio.fail_after(5):
        await healthy.ok("Ping")
    await hog.aclose()


async def ws_hog(server: Server) -> trio.SocketStream:
    """A WebSocket client, upgraded by hand, with a small receive buffer (it will not
    read its replies)."""
    assert server.ws_port is not None
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    await sock.connect(("127.0.0.1", server.ws_port))
    hog = trio.SocketStream(sock)
    await hog.send_all(websocket_upgrade("/ws/queues/none"))
    with trio.fail_after(5):
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            head += await hog.receive_some(1)
    return hog


def ws_text_frame(text: str) -> bytes:
    """One masked (client-to-server) WebSocket text frame."""
    payload = text.encode()
    mask = os.urandom(4)
    size = len(payload)
    head = bytes([0x81]) + (bytes([0x80 | size]) if size < 126 else
                            bytes([0x80 | 126]) + size.to_bytes(2, "big"))
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


async def test_websocket_replies_count_in_the_reply_budget(start_server: StartServer) -> None:
    limit = 4 * 1024 * 1024
    server = await start_server(memory=True, max_write_queue_total_bytes=limit,
                                idle_timeout_s=0)
    budget = server.shell.replies
    healthy = await connect(server)
    big = await healthy.ok("PUSH", queue="data", name="n", data="y" * 100_000)
    hogs: list[trio.SocketStream] = []
    for _ in range(3):  # each asks for 3 MB of replies (under the bound) and reads none
        hog = await ws_hog(server)
        await hog.send_all(ws_text_frame(json.dumps({"cmd": "GetJob", "id": big["id"]})) * 30)
        hogs.append(hog)
    await wait_until(lambda: budget.cuts >= 1, "a WebSocket hog to be cut")
    assert budget.total <= limit
    await wait_until(lambda: server.broker.connections.borrowed_tokens <= 3,
                     "the cut connection to close")
    await healthy.ok("Ping")
    for hog in hogs:
        await hog.aclose()
