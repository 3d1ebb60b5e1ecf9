"""The abuse limits of Config that the I/O shell enforces, over real TCP and WebSocket.

Each test starts its own in-process broker with one limit lowered (``start_server``) and
checks what a client observes: a held-back reply, an error frame, a closed connection.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing
from trio_websocket import ConnectionClosed, ConnectionRejected, open_websocket_url

from trioqueue.server.run import Server
from trioqueue.testing import RawClient
from trioqueue.transport import limits
from trioqueue.transport.limits import ByteBudget, Teardowns, Timers
from trioqueue.transport.wire.codec import MSGPACK
from trioqueue.transport.wire.framing import encode_frame

StartServer = Callable[..., Any]


def push_payload(size: int) -> bytes:
    """A msgpack PUSH whose encoded payload (the frame's body) is exactly ``size`` bytes."""
    pad = size
    for _ in range(10):
        payload = MSGPACK.encode({"cmd": "PUSH", "queue": "sized", "name": "n",
                                  "data": "x" * pad, "reqId": "sized"})
        if len(payload) == size:
            return payload
        pad += size - len(payload)
    raise AssertionError(f"cannot build a {size}-byte payload")


async def connect(server: Server) -> RawClient:
    assert server.tcp_port is not None
    return await RawClient.connect(server.tcp_port)


async def answers_ping(server: Server) -> RawClient | None:
    """A new connection that answers a Ping, or None if the broker turned it away."""
    client = await connect(server)
    try:
        with trio.fail_after(2):
            reply = await client.call("Ping")
    except (EOFError, trio.BrokenResourceError):
        await client.aclose()
        return None
    assert reply["ok"] is True
    return client


# ------------------------------------------------------------------ max_inflight_per_connection


async def test_inflight_limit_holds_back_commands_until_a_slot_frees(
    start_server: StartServer,
) -> None:
    server = await start_server(max_inflight_per_connection=5)
    worker = await connect(server)
    producer = await connect(server)
    for _ in range(5):
        await worker.send("PULL", queue="slow", timeout=5000)
    ping = await worker.send("Ping")

    # The absence of a reply is what is under test: give it a generous moment.
    with trio.move_on_after(0.3):
        reply = await worker.reply_to(ping)
        pytest.fail(f"Ping answered while 5 long-polls held every slot: {reply}")
    # The limit is per connection: another connection is served meanwhile.
    with trio.fail_after(1):
        await producer.ok("Ping")

    pushed = await producer.ok("PUSH", queue="slow", name="n", data=1)
    with trio.fail_after(1):
        reply = await worker.reply_to(ping)
    assert reply["ok"] is True and reply["data"]["pong"] is True
    # The slot was freed by a long-poll that received the pushed job.
    job_state = await producer.ok("GetState", id=pushed["id"])
    assert job_state["state"] == "active"


# ------------------------------------------------------------------ partial_frame_timeout_s


async def test_half_a_frame_is_cut_after_the_partial_frame_timeout(
    start_server: StartServer,
) -> None:
    server = await start_server(partial_frame_timeout_s=0.2)
    client = await connect(server)
    frame = client.frame({"cmd": "Ping", "reqId": "half"})
    started = trio.current_time()
    await client.send_raw(frame[: len(frame) // 2])
    with trio.fail_after(2):
        assert await client.is_closed()
    assert trio.current_time() - started >= 0.15


async def test_trickling_a_frame_does_not_reset_the_partial_frame_timeout(
    start_server: StartServer,
) -> None:
    """Slowloris: one byte every 50 ms keeps each read short but the frame never ends."""
    server = await start_server(partial_frame_timeout_s=0.2)
    client = await connect(server)
    frame = client.frame({"cmd": "PUSH", "queue": "q", "name": "n", "data": "x" * 500})

    async def trickle() -> None:
        try:
            for i in range(len(frame) - 1):
                await client.send_raw(frame[i : i + 1])
                await trio.sleep(0.05)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trickle)
        with trio.fail_after(1.5):
            assert await client.is_closed()
        nursery.cancel_scope.cancel()


async def test_frames_completed_within_the_timeout_are_served(start_server: StartServer) -> None:
    """Each frame gets its own clock, even when a partial frame is always pending."""
    server = await start_server(partial_frame_timeout_s=0.2)
    client = await connect(server)
    first = client.frame({"cmd": "Ping", "reqId": "1"})
    second = client.frame({"cmd": "Ping", "reqId": "2"})
    await client.send_raw(first[:3])
    await trio.sleep(0.15)
    await client.send_raw(first[3:] + second[:3])
    await trio.sleep(0.15)
    await client.send_raw(second[3:])
    with trio.fail_after(1):
        assert (await client.reply_to("1"))["ok"] is True
        assert (await client.reply_to("2"))["ok"] is True


async def test_an_idle_connection_outlives_the_partial_frame_timeout(
    start_server: StartServer,
) -> None:
    server = await start_server(partial_frame_timeout_s=0.2)
    client = await connect(server)
    await client.ok("Ping")
    await trio.sleep(0.5)  # idling past the timeout is the thing under test
    with trio.fail_after(1):
        await client.ok("Ping")


# ------------------------------------------------------------------ max_frame_bytes


async def test_a_frame_over_the_limit_gets_an_error_then_the_connection_closes(
    start_server: StartServer,
) -> None:
    server = await start_server(max_frame_bytes=1024)
    client = await connect(server)
    await client.send_raw(encode_frame(push_payload(2000)))
    with trio.fail_after(2):
        reply = await client.receive()
        assert reply == {"ok": False,
                         "error": "Frame too large: 2000 bytes exceeds maximum 1024"}
        assert await client.is_closed()


async def test_frames_up_to_the_limit_are_served(start_server: StartServer) -> None:
    server = await start_server(max_frame_bytes=1024)
    client = await connect(server)
    for size in (1000, 1024):
        await client.send_raw(encode_frame(push_payload(size)))
        with trio.fail_after(2):
            reply = await client.reply_to("sized")
        assert reply["ok"] is True, reply
    assert (await client.ok("Count", queue="sized"))["count"] == 2


# ------------------------------------------------------------------ max_queues


async def test_max_queues_refuses_a_new_queue_and_keeps_the_old_ones(
    start_server: StartServer,
) -> None:
    server = await start_server(max_queues=2)
    client = await connect(server)
    await client.ok("PUSH", queue="a", name="n", data=1)
    await client.ok("PUSH", queue="b", name="n", data=2)
    for cmd, fields in (("PUSH", {"name": "n", "data": 3}), ("Count", {}), ("PULL", {})):
        reply = await client.call(cmd, queue="c", **fields)
        assert reply["ok"] is False and reply["error"] == "Too many queues (max 2)", reply
    assert (await client.ok("Count", queue="a"))["count"] == 1
    pulled = await client.ok("PULL", queue="b")
    assert pulled["job"]["data"] == 2
    await client.ok("PUSH", queue="a", name="n", data=4)
    assert (await client.ok("Count", queue="a"))["count"] == 2


# ------------------------------------------------------------------ max_connections


async def test_max_connections_turns_away_extra_connections_until_one_closes(
    start_server: StartServer,
) -> None:
    server = await start_server(max_connections=2)
    first = await answers_ping(server)
    second = await answers_ping(server)
    assert first is not None and second is not None

    extra = await connect(server)
    with trio.fail_after(2):
        assert await extra.receive() == {"ok": False, "error": "Too many connections (max 2)"}
        assert await extra.is_closed()
    await extra.aclose()

    await first.aclose()
    # The slot frees once the broker has noticed the close: poll with a deadline.
    with trio.fail_after(3):
        while (replacement := await answers_ping(server)) is None:
            await trio.sleep(0.02)
    await second.ok("Ping")
    await replacement.ok("Ping")


# ------------------------------------------------------------------ connections ending at once

async def test_teardowns_give_turns_in_order_and_a_holder_takes_one_once() -> None:
    teardowns = Teardowns(2)
    a, b, c = object(), object(), object()
    await teardowns.turn(a)
    await teardowns.turn(a)  # (its end goes on: no second turn)
    await teardowns.turn(b)
    assert teardowns.ending == 2
    began = trio.Event()

    async def third() -> None:
        await teardowns.turn(c)
        began.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(third)
        await trio.testing.wait_all_tasks_blocked()
        assert not began.is_set()  # two are ending: the third waits
        teardowns.done(a)
        with trio.fail_after(1):
            await began.wait()
    assert teardowns.ending == 2
    teardowns.done(b)
    teardowns.done(c)
    teardowns.done(c)  # (done twice, or never begun: nothing to give back)
    assert teardowns.ending == 0


async def test_a_connection_in_line_to_end_is_not_cancelled_out_of_it() -> None:
    # A connection that ends must hand back what it holds even while the broker is
    # being cancelled: its wait for a turn outlasts a cancellation and ends when a
    # turn is passed on to it.
    teardowns = Teardowns(1)
    first, second = object(), object()
    await teardowns.turn(first)
    got_turn = trio.Event()

    async def in_line(scope_box: list[trio.CancelScope]) -> None:
        with trio.CancelScope() as scope:
            scope_box.append(scope)
            await teardowns.turn(second)
            got_turn.set()

    box: list[trio.CancelScope] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(in_line, box)
        await trio.testing.wait_all_tasks_blocked()
        box[0].cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert not got_turn.is_set()  # still in line, cancelled or not
        teardowns.done(first)
        with trio.fail_after(1):
            await got_turn.wait()
    assert teardowns.ending == 1
    teardowns.done(second)
    assert teardowns.ending == 0


async def test_connections_closing_together_end_a_few_at_a_time_and_hand_back_their_jobs(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 30 workers each hold a job and close at once; at most 3 connections end at a time
    # (their steps would otherwise all land in the same passes of the loop, and another
    # queue's client waited for all of them), and every job goes back to waiting.
    monkeypatch.setattr(limits, "TEARDOWNS_AT_ONCE", 3)
    most = 0
    turn = Teardowns.turn

    async def counted_turn(self: Teardowns, holder: object) -> None:
        nonlocal most
        await turn(self, holder)
        most = max(most, self.ending)

    monkeypatch.setattr(Teardowns, "turn", counted_turn)
    server = await start_server()
    producer = await connect(server)
    await producer.ok("PUSHB", queue="held", jobs=[{"name": "n", "data": i}
                                                   for i in range(30)])
    workers = [await connect(server) for _ in range(30)]
    for worker in workers:
        assert (await worker.ok("PULL", queue="held"))["job"] is not None
    assert (await producer.ok("GetJobCounts", queue="held"))["counts"]["active"] == 30
    for worker in workers:  # every FIN sent before the broker runs again
        assert isinstance(worker.stream, trio.SocketStream)
        worker.stream.socket.shutdown(socket.SHUT_WR)
    with trio.fail_after(5):
        while (await producer.ok("GetJobCounts", queue="held"))["counts"]["waiting"] < 30:
            await trio.sleep(0.01)
    assert most == 3, most
    await producer.ok("Ping")
    for worker in workers:
        await worker.aclose()


# ------------------------------------------------------------------ WebSocket


async def test_ws_message_over_the_limit_closes_with_1009(start_server: StartServer) -> None:
    server = await start_server(ws_max_message_bytes=1024)
    url = f"ws://127.0.0.1:{server.ws_port}/ws"
    async with open_websocket_url(url) as ws:
        small = {"cmd": "PUSH", "queue": "w", "name": "n", "data": "x" * 500, "reqId": "s"}
        await ws.send_message(json.dumps(small))
        with trio.fail_after(2):
            assert json.loads(await ws.get_message())["ok"] is True
        big = {"cmd": "PUSH", "queue": "w", "name": "n", "data": "x" * 2000}
        await ws.send_message(json.dumps(big))
        with trio.fail_after(2), pytest.raises(ConnectionClosed) as closed:
            while True:  # job events of the first push may still arrive first
                await ws.get_message()
    assert closed.value.reason is not None and closed.value.reason.code == 1009


async def test_ws_limit_counts_bytes_not_characters(start_server: StartServer) -> None:
    """A text message of 500 characters is 1500 bytes of UTF-8: over a 1024-byte limit."""
    server = await start_server(ws_max_message_bytes=1024)
    url = f"ws://127.0.0.1:{server.ws_port}/ws"
    async with open_websocket_url(url) as ws:
        message = json.dumps({"cmd": "PUSH", "queue": "w", "name": "n", "data": "€" * 480},
                             ensure_ascii=False)
        assert len(message) < 1024 < len(message.encode())
        await ws.send_message(message)
        with trio.fail_after(2), pytest.raises(ConnectionClosed) as closed:
            await ws.get_message()
    assert closed.value.reason is not None and closed.value.reason.code == 1009


async def test_http_header_timeout_closes_a_silent_connection(
    start_server: StartServer,
) -> None:
    """A head never finished on the HTTP port (a WebSocket upgrade here) is cut after
    http_header_timeout_s, before either server sees it."""
    server = await start_server(http_header_timeout_s=0.2)
    assert server.ws_port is not None
    stream = await trio.open_tcp_stream("127.0.0.1", server.ws_port)
    client = RawClient(stream)
    await client.send_raw(b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finished
    with trio.fail_after(2):
        assert await client.is_closed()
    await client.aclose()


async def test_max_write_queue_bytes_cuts_a_client_that_never_reads(
    start_server: StartServer,
) -> None:
    server = await start_server(max_write_queue_bytes=256 * 1024, overflow_notice_s=0.2)
    hog = await connect(server)
    await hog.ok("PUSH", queue="big", name="n", data="y" * 60_000)
    # Ask for the same 60 KB job again and again without ever reading a reply: once the
    # unsent replies pass the limit (after the kernel's socket buffers fill), the broker
    # closes the connection instead of buffering without bound.
    job_id = (await hog.ok("GetJobs", queue="big"))["jobs"][0]["id"]
    frame = hog.frame({"cmd": "GetJob", "id": job_id, "reqId": "g"})
    with trio.fail_after(20):
        for _ in range(2000):
            try:
                await hog.send_raw(frame * 20)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                break
            # Once cut, the broker drops the replies; it closes the connection when the
            # notice is out, or overflow_notice_s later for a client that reads nothing.
    with trio.fail_after(10):
        frames = await hog.drain_until_closed()
    assert len(frames) * 60_000 < 64 * 1024 * 1024  # bounded, not 40,000 replies
    other = await connect(server)
    assert (await other.ok("Count", queue="big"))["count"] == 1


async def test_max_data_bytes_is_the_configured_limit(start_server: StartServer) -> None:
    server = await start_server(max_data_bytes=1000)
    client = await connect(server)
    reply = await client.call("PUSH", queue="d", name="n", data="z" * 2000)
    assert reply["ok"] is False and reply["error"].startswith("Job data too large")
    await client.ok("PUSH", queue="d", name="n", data="z" * 500)


async def test_max_connections_counts_websocket_too(start_server: StartServer) -> None:
    server = await start_server(max_connections=1)
    tcp = await connect(server)
    await tcp.ok("Ping")
    with pytest.raises(ConnectionRejected) as refused:
        async with open_websocket_url(f"ws://127.0.0.1:{server.ws_port}/ws"):
            pass
    assert refused.value.status_code == 503


async def test_max_write_queue_bytes_bounds_websocket_replies(start_server: StartServer) -> None:
    server = await start_server(max_write_queue_bytes=256 * 1024, overflow_notice_s=30)
    client = await connect(server)
    pushed = await client.ok("PUSH", queue="wsbig", name="n", data="y" * 60_000)
    url = f"ws://127.0.0.1:{server.ws_port}/ws"
    # A client that asks for a 60 KB job again and again and reads nothing: once the
    # kernel's buffers are full its replies pile up on the broker until the bound cuts
    # it: the unread replies are dropped for one overflow notice, then the close.
    ask = json.dumps({"cmd": "GetJob", "id": pushed["id"]})
    received: list[Any] = []
    with trio.fail_after(20):
        async with open_websocket_url(url) as ws:
            try:
                for _ in range(5_000):
                    await ws.send_message(ask)
                while True:  # now read: what was sent before the cut, then the notice
                    received.append(json.loads(await ws.get_message()))
            except ConnectionClosed:
                pass
    assert received[-1]["event"]["eventType"] == "overflow"
    assert len(received) < 5_000  # replies past the bound were dropped, not buffered
    await client.ok("Ping")


# ------------------------------------------------------------------ the shell's shared parts


class Holder:
    def __init__(self, name: str) -> None:
        self.name = name
        self.cut_by: str | None = None

    def cut(self, budget: str) -> None:
        self.cut_by = budget


def test_a_byte_budget_cuts_the_largest_holders_until_it_is_under_its_bound() -> None:
    budget = ByteBudget(1000, "max_test_bytes")
    a, b, c = Holder("a"), Holder("b"), Holder("c")
    budget.set(a, 500)
    budget.set(b, 300)
    budget.set(c, 200)
    assert budget.total == 1000 and budget.cuts == 0  # at the bound is not over it
    budget.set(c, 700)  # c grows past a: c is cut, and that is enough
    assert (a.cut_by, b.cut_by, c.cut_by) == (None, None, "max_test_bytes")
    assert budget.total == 800 and budget.held(c) == 0
    budget.set(b, 450)  # 950: under
    d = Holder("d")
    budget.set(d, 400)  # 1350: the largest, a (500), goes
    assert (a.cut_by, b.cut_by, d.cut_by) == ("max_test_bytes", None, None)
    assert budget.total == 850 and budget.cuts == 2
    budget.set(b, 900)  # 1300: b is the largest now, and cutting it is enough
    assert b.cut_by == "max_test_bytes" and budget.total == 400
    budget.release(d)
    assert budget.total == 0


def test_a_byte_budget_of_zero_has_no_bound() -> None:
    budget = ByteBudget(0, "off")
    holder = Holder("h")
    budget.set(holder, 1 << 40)
    assert holder.cut_by is None and budget.total == 1 << 40
    budget.set(holder, 0)
    assert budget.total == 0


async def test_timers_call_each_handle_at_its_deadline_and_never_once_cancelled(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery,
) -> None:
    timers = Timers()
    await nursery.start(timers.run)
    calls: list[tuple[str, float]] = []
    start = trio.current_time()

    def record(name: str) -> Callable[[float], None]:
        return lambda now: calls.append((name, now - start))

    late, early, gone = (timers.handle(record(n)) for n in ("late", "early", "gone"))
    late.arm(start + 20)
    early.arm(start + 5)
    early.arm(start + 15)  # armed earlier already: no second entry
    gone.arm(start + 10)
    gone.cancel()
    await trio.sleep(30)
    assert calls == [("early", 5), ("late", 20)]
    early.arm(trio.current_time() + 1)  # armed again once called
    await trio.sleep(2)
    assert calls[-1] == ("early", 31)


async def test_timers_forget_cancelled_handles_as_connections_come_and_go(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery,
) -> None:
    timers = Timers()
    await nursery.start(timers.run)
    live = timers.handle(lambda now: None)
    live.arm(trio.current_time() + 1000)
    for _ in range(10_000):  # each one armed far ahead, then gone
        handle = timers.handle(lambda now: None)
        handle.arm(trio.current_time() + 300)
        handle.cancel()
    assert len(timers) <= 2 * Timers.DEAD_SLACK


def test_timers_run_a_bounded_number_of_callbacks_per_pass() -> None:
    """A flood of connections expiring together is served over several passes."""
    timers = Timers()
    called: list[float] = []
    handles = [timers.handle(called.append) for _ in range(2 * Timers.MAX_PER_PASS + 1)]
    for handle in handles:
        handle.arm(1.0)
    timers._fire(1.0)  # one pass of the timer task
    assert len(called) == Timers.MAX_PER_PASS
    timers._fire(1.0)
    timers._fire(1.0)
    assert len(called) == len(handles) and len(timers) == 0
