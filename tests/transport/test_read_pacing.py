"""A read of many frames does not hold the loop, and a connection sending bad frames is
paced (transport/read_pacing.py)."""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable

import pytest
import trio
from trio_websocket import open_websocket_url

from trioqueue.server.run import Server
from trioqueue.testing import RawClient
from trioqueue.transport.read_pacing import BadFrameClock
from trioqueue.transport.tcp import connection as tcp
from trioqueue.transport.wire.codec import JSON

StartServer = Callable[..., Awaitable[Server]]

# msgpack arrays nested 1,100 deep (past msgpack's own limit): about 1 KB to send and
# 0.05-0.15 ms to refuse; 60 of them (66 KB) fit one read and the socket's window.
NESTED = b"\x91" * 1_100 + b"\xc0"
FLOOD_FRAMES = 60
FLOOD = b"".join(len(NESTED).to_bytes(4, "big") + NESTED for _ in range(FLOOD_FRAMES))


async def connect(server: Server) -> RawClient:
    assert server.tcp_port is not None
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    await sock.connect(("127.0.0.1", server.tcp_port))
    return RawClient(trio.SocketStream(sock))


@pytest.mark.parametrize("step_ms", [0.02, 0.0], ids=["stepped", "at-once"])
async def test_other_connections_are_served_between_the_steps_of_one_read(
    start_server: StartServer, step_ms: float, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A look at the clock after every frame, and steps of 20 us: about a step a frame,
    # so that the healthy client's round trip fits well inside the read's 60 steps.
    monkeypatch.setattr(tcp, "FRAMES_PER_LOOK", 1)
    # Every pause after bad frames is 0.3 s: time for the whole flood to be in the
    # broker's socket buffer, so that the broker takes it in one read.
    server = await start_server(memory=True, max_read_step_ms=step_ms,
                                bad_frame_pause_ratio=1e6, bad_frame_pause_max_ms=300.0)
    healthy = await connect(server)
    await healthy.ok("Ping")
    hog = await connect(server)
    await hog.send_raw(hog.frame({"cmd": "NoSuch"}))
    assert (await hog.receive())["error"] == "Unknown command: NoSuch"
    await hog.send_raw(FLOOD)  # read once the pause is over
    with trio.fail_after(30):
        first = await hog.receive()  # the broker is on the read (or done with it)
    assert first == {"ok": False, "error": "Invalid command format"}
    with trio.fail_after(30):
        assert (await healthy.call("Ping"))["ok"] is True
    # What the hog has received by now: stepped, the Ping came between two of
    # them, long before the read's last answer; at once, they all came in one write.
    answered = 1 + hog.ready_now()
    if step_ms:
        assert answered < FLOOD_FRAMES
    else:
        assert answered == FLOOD_FRAMES
    with trio.fail_after(30):
        for _ in range(FLOOD_FRAMES - answered):
            assert (await hog.receive())["error"] == "Invalid command format"
    assert (await hog.call("Ping"))["ok"] is True  # the frames kept their order


async def start_capped(start_server: StartServer) -> Server:
    """A broker where every pause after bad frames is 1.5 s: any read's cost times a
    million passes the cap."""
    return await start_server(memory=True, bad_frame_pause_ratio=1e6,
                              bad_frame_pause_max_ms=1_500.0)


async def test_a_read_with_bad_frames_pauses_its_connection(
    start_server: StartServer,
) -> None:
    server = await start_capped(start_server)
    client = await connect(server)
    other = await connect(server)
    await client.ok("Ping")
    start = trio.current_time()
    await client.ok("Ping")  # good frames: no pause
    assert trio.current_time() - start < 1.0
    await client.send_raw(client.frame({"cmd": "NoSuchCommand", "reqId": "x"}))
    assert (await client.receive())["error"] == "Unknown command: NoSuchCommand"
    start = trio.current_time()
    # Meanwhile the broker serves everyone else as before.
    assert (await other.call("Ping"))["ok"] is True
    assert trio.current_time() - start < 1.0
    assert (await client.call("Ping"))["ok"] is True
    assert trio.current_time() - start >= 1.4  # this connection was left unread


def test_connections_sending_bad_frames_wait_for_each_other() -> None:
    # Four reads of 1 ms each, finished at once: each waits for those before it.
    clock = BadFrameClock(ratio=4, max_s=0.25)
    waits = [clock.pause_s(0.001, 10.0) for _ in range(4)]
    assert waits == pytest.approx([0.004, 0.008, 0.012, 0.016])
    # Once the clock is past, a read pays from now only.
    assert clock.pause_s(0.001, 11.0) == pytest.approx(0.004)
    # The clock never runs more than max_s ahead: no wait is longer.
    assert max(clock.pause_s(0.001, 12.0) for _ in range(1_000)) == pytest.approx(0.25)
    assert clock.pause_s(0.001, 13.0) == pytest.approx(0.004)


async def test_connections_sending_garbage_take_turns(start_server: StartServer) -> None:
    # One flood of 60 deeply nested frames costs the broker milliseconds; at 500 times
    # that, its sender is left unread for up to 2 s (the cap). Another connection's one
    # cheap bad frame right after it costs microseconds, but it waits for the flood's pause:
    # so four connections sending garbage share one bounded part of the broker, where
    # with a clock per connection each got its own (55% of the broker's CPU together).
    server = await start_server(memory=True, bad_frame_pause_ratio=500.0,
                                bad_frame_pause_max_ms=2_000.0)
    hog, other = await connect(server), await connect(server)
    await hog.send_raw(FLOOD)
    with trio.fail_after(30):
        for _ in range(FLOOD_FRAMES):
            assert (await hog.receive())["error"] == "Invalid command format"
    await other.send_raw(other.frame({"cmd": "NoSuchCommand", "reqId": "x"}))
    assert (await other.receive())["error"] == "Unknown command: NoSuchCommand"
    start = trio.current_time()
    with trio.fail_after(30):
        assert (await other.call("Ping"))["ok"] is True
    assert trio.current_time() - start >= 0.3


async def test_a_websocket_message_with_a_bad_frame_pauses_its_connection(
    start_server: StartServer,
) -> None:
    # As test_a_read_with_bad_frames_pauses_its_connection, for WebSocket messages.
    server = await start_capped(start_server)
    other = await connect(server)
    async with open_websocket_url(f"ws://127.0.0.1:{server.ws_port}/ws") as ws:
        await ws.send_message(JSON.encode_text({"cmd": "Ping", "reqId": "a"}))
        start = trio.current_time()
        assert JSON.decode(await ws.get_message())["ok"] is True  # no pause
        assert trio.current_time() - start < 1.0
        await ws.send_message(JSON.encode_text({"cmd": "NoSuchCommand", "reqId": "b"}))
        reply = JSON.decode(await ws.get_message())
        assert reply["error"] == "Unknown command: NoSuchCommand"
        start = trio.current_time()
        await ws.send_message(JSON.encode_text({"cmd": "Ping", "reqId": "c"}))
        assert (await other.call("Ping"))["ok"] is True  # everyone else as before
        assert trio.current_time() - start < 1.0
        with trio.fail_after(30):
            assert JSON.decode(await ws.get_message())["reqId"] == "c"
        assert trio.current_time() - start >= 1.4  # this connection was left unread


async def test_a_large_frame_refused_for_too_much_data_pauses_its_connection(
    start_server: StartServer,
) -> None:
    # A 40 MB PUSH over the data limit costs the broker its whole sliced decoding before
    # it can be refused: a flood of them is paced like one of malformed frames.
    server = await start_server(memory=True, bad_frame_pause_ratio=1e6,
                                bad_frame_pause_max_ms=1_500.0, max_data_bytes=1 << 20)
    client = await connect(server)
    other = await connect(server)
    fits = await client.call("PUSH", queue="q", data="x" * (1 << 19))  # large, within
    assert fits["ok"] is True
    start = trio.current_time()
    assert (await client.call("Ping"))["ok"] is True  # no pause after it
    assert trio.current_time() - start < 1.0
    over = await client.call("PUSH", queue="q", data="x" * (2 << 20))
    assert over["error"] == "Job data too large (max 10MB)"
    start = trio.current_time()
    assert (await other.call("Ping"))["ok"] is True  # everyone else is served
    assert trio.current_time() - start < 1.0
    assert (await client.call("Ping"))["ok"] is True
    assert trio.current_time() - start >= 1.4  # this connection was left unread
