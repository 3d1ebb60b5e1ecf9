"""Hostile clients against the real broker process: memory read from /proc, many sockets.

Issue 12's probe took the broker from 34 to 435 MB with 8 half-sent frames, and to
1,065 MB with 15 clients that never read; 10,000 idle connections filled
``max_connections``. These tests repeat smaller versions of those attacks against
``trioqueue serve`` (a subprocess, so that its memory is its own: ``VmHWM``, the peak
resident set, from ``/proc/<pid>/status``) and check the broker-wide bounds hold. Each
is bounded in count and time; none sleeps to synchronise (``wait_until`` polls a
condition with a deadline).
"""

from __future__ import annotations

import os
import resource
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import pytest
import trio

from trioqueue.testing import RawClient
from trioqueue.testing.deadline import wait_until as _wait_until
from trioqueue.testing.process import BrokerProcess
from trioqueue.transport.wire.framing import frame_header

wait_until = partial(_wait_until, timeout_s=30.0)  # this file's deadline

MIB = 1024 * 1024

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="reads the broker's memory from /proc")


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if not k.startswith("TRIOQUEUE_") and k != "AUTH_TOKENS"}


@asynccontextmanager
async def broker_process(tmp_path: Path, *flags: str) -> AsyncIterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path / "data", "--memory", *flags, env=clean_env())
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()




async def send_until_cut(client: RawClient, data: bytes) -> None:
    try:
        await client.send_raw(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # cut while sending: what the test wants to see


# ------------------------------------------------------------------ max_partial_frame_total_bytes


async def test_half_sent_frames_are_bounded_broker_wide(tmp_path: Path) -> None:
    """8 connections each send 15 MiB of a 16 MiB frame and stop: 120 MiB without the
    bound. With ``max_partial_frame_total_bytes`` 32 MiB, the largest holders are cut
    and the broker's peak memory grows by about the bound, not by 120 MiB."""
    bound = 32 * MIB
    async with broker_process(tmp_path, "--max-frame-bytes", "16MiB",
                              "--max-partial-frame-total-bytes", "32MiB") as broker:
        healthy = await RawClient.connect(broker.tcp_port)
        await healthy.ok("Ping")
        before = broker.memory_bytes("VmRSS")
        hogs = [await RawClient.connect(broker.tcp_port) for _ in range(8)]
        body = frame_header(16 * MIB) + b"x" * (15 * MIB)
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for hog in hogs:
                    nursery.start_soon(send_until_cut, hog, body)
        # At most two whole 15 MiB partial frames fit in 32 MiB: six or more are cut.
        await wait_until(lambda: sum(hog.peer_closed() for hog in hogs) >= 6, "six hogs to be cut")
        grown = broker.memory_bytes("VmHWM") - before
        assert grown < bound + 32 * MIB, f"the broker grew by {grown / MIB:.0f} MiB"
        with trio.fail_after(5):
            await healthy.ok("Ping")


# ------------------------------------------------------------------ max_decoding_total_bytes


@pytest.mark.parametrize("hog_count", [4, pytest.param(6, marks=pytest.mark.slow)])
async def test_large_frames_of_small_values_are_decoded_a_bounded_few_at_once(
    tmp_path: Path, hog_count: int,
) -> None:
    """4 connections (6 under -m slow) each send a 9 MB PUSH of 9M small integers in
    lists of 1,000 (lists small enough to be decoded whole, so not refused from their
    counts): each is about 75 MB once made, so side by side, as before, the broker grew
    by 300 MB (450 MB) and more.
    With ``max_decoding_total_bytes`` (16 MiB, the default) one is decoded at a time, and
    each is refused, measured in slices: the broker's peak grows by one frame's values
    and the frames waiting, well under 200 MiB."""
    async with broker_process(tmp_path) as broker:
        healthy = await RawClient.connect(broker.tcp_port)
        await healthy.ok("Ping")
        before = broker.memory_bytes("VmHWM")
        hogs = [await RawClient.connect(broker.tcp_port) for _ in range(hog_count)]
        frame = hogs[0].frame({"cmd": "PUSH", "queue": "ints", "reqId": "big",
                               "data": [[7] * 1000] * 9000})
        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                for hog in hogs:
                    nursery.start_soon(hog.send_raw, frame)
            for hog in hogs:
                reply = await hog.receive()
                assert reply == {"ok": False, "error": "Job data too large (max 10MB)",
                                 "reqId": "big"}
        grown = broker.memory_bytes("VmHWM") - before
        assert grown < 200 * MIB, f"the broker grew by {grown / MIB:.0f} MiB"
        with trio.fail_after(5):
            await healthy.ok("Ping")


# ------------------------------------------------------------------ max_write_queue_total_bytes


async def test_unread_replies_are_bounded_broker_wide(tmp_path: Path) -> None:
    """6 clients each ask for 20 MB of replies (200 x a 100 KB job) and read none: each
    is under the per-connection bound (64 MiB), 120 MB together. With
    ``max_write_queue_total_bytes`` 32 MiB the largest holders are cut and the broker's
    peak memory grows by about the bound (plus the encoding of one batch of replies,
    at most ``max_inflight_per_connection`` of them: 5 MB here)."""
    bound = 32 * MIB
    async with broker_process(tmp_path, "--max-write-queue-total-bytes", "32MiB",
                              "--idle-timeout-s", "0") as broker:
        healthy = await RawClient.connect(broker.tcp_port)
        job = await healthy.ok("PUSH", queue="big", name="n", data="y" * 100_000)
        await healthy.ok("GetJob", id=job["id"])  # warm the path once
        before = broker.memory_bytes("VmRSS")
        ask = healthy.frame({"cmd": "GetJob", "id": job["id"]}) * 200
        hogs = [await RawClient.connect(broker.tcp_port, rcvbuf=4096) for _ in range(6)]
        for hog in hogs:
            await send_until_cut(hog, ask)
        # 120 MB asked for, at most 32 MiB kept: at least four are cut.
        await wait_until(lambda: sum(hog.peer_closed() for hog in hogs) >= 4, "four hogs to be cut")
        grown = broker.memory_bytes("VmHWM") - before
        assert grown < bound + 32 * MIB, f"the broker grew by {grown / MIB:.0f} MiB"
        with trio.fail_after(5):
            await healthy.ok("Ping")


@pytest.mark.parametrize("asks", [2, 5])
async def test_long_unread_listings_are_bounded_broker_wide(tmp_path: Path, asks: int) -> None:
    """10 clients each ask for ``asks`` listings of 250 jobs (``GetJobs``, a 5 MB reply
    each), three times over while they are connected, and read none: 10 MB or more
    each, under the per-connection bound, 300 MB in all. With
    ``max_write_queue_total_bytes`` 32 MiB the broker's peak resident memory grows by
    less than the bound. Before, a listing behind another was encoded as it arrived
    and counted only then, the replies a client had been handed but the transport had
    not encoded yet counted nothing, and a client holding unsent replies had its next
    commands read and answered all the same: the broker grew by 40-80 MiB."""
    bound = 32 * MIB
    async with broker_process(tmp_path, "--max-write-queue-total-bytes", "32MiB",
                              "--idle-timeout-s", "0") as broker:
        healthy = await RawClient.connect(broker.tcp_port)
        for _ in range(5):
            await healthy.ok("PUSHB", queue="list", jobs=[
                {"name": "n", "data": {"text": "z" * 20_000}} for _ in range(50)])
        listing = {"cmd": "GetJobs", "queue": "list", "limit": 250}
        assert len((await healthy.ok(**listing))["jobs"]) == 250  # warm the path once
        before = broker.memory_bytes("VmRSS")
        hogs = [await RawClient.connect(broker.tcp_port, rcvbuf=4096) for _ in range(10)]

        def grown() -> int:
            return broker.memory_bytes("VmHWM") - before

        for _ in range(3):
            for hog in hogs:
                if not hog.peer_closed():
                    await send_until_cut(hog, healthy.frame(listing) * asks)
            await healthy.ok("Ping")
        # 10 MB or more asked for each and at most 32 MiB kept: seven or more are cut
        # (or the broker grew past the bound, and the test fails without waiting longer).
        await wait_until(lambda: sum(hog.peer_closed() for hog in hogs) >= 7
                         or grown() >= bound, "seven hogs to be cut")
        for _ in range(20):  # what the clients still connected hold is encoded by now
            await healthy.ok("Ping")
        assert grown() < bound, f"the broker grew by {grown() / MIB:.1f} MiB"
        assert sum(hog.peer_closed() for hog in hogs) >= 7
        with trio.fail_after(5):
            await healthy.ok("Ping")
        for hog in hogs:
            await hog.aclose()


# ------------------------------------------------------------------ http_max_body_total_bytes


async def open_http(port: int) -> trio.SocketStream:
    """A connection to the HTTP port (retried: it may open a moment after the TCP port)."""
    with trio.fail_after(10):
        while True:
            try:
                return await trio.open_tcp_stream("127.0.0.1", port)
            except OSError:
                await trio.sleep(0.05)


async def hold_body(port: int, declared: int, sent: int, answers: list[bytes]) -> None:
    """POST a body of ``declared`` bytes, send ``sent`` of them and stop; what the broker
    answers (if anything) is appended to ``answers``."""
    stream = await open_http(port)
    head = (f"POST /queues/held/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
            f"application/json\r\nContent-Length: {declared}\r\n\r\n").encode()
    answer = bytearray()

    async def send() -> None:
        try:
            await stream.send_all(head + b"x" * sent)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # cut while sending
        await trio.sleep_forever()  # then held, until the broker closes it

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            try:
                while chunk := await stream.receive_some(65536):
                    answer += chunk
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            nursery.cancel_scope.cancel()
        answers.append(bytes(answer))
    finally:
        await stream.aclose()


async def test_held_http_bodies_are_bounded_broker_wide(tmp_path: Path) -> None:
    """12 requests each send 20 MiB of a 24 MiB body and hold it: 240 MiB without a
    bound (12 held 60 MB bodies took the broker from 114 to 796 MB before). With
    ``http_max_body_total_bytes`` 32 MiB, the requests holding the most are cut (503,
    and the close) and the broker's peak memory grows by about the bound; a healthy
    client is answered throughout."""
    bound = 32 * MIB
    async with broker_process(tmp_path, "--http-max-body-bytes", "32MiB",
                              "--http-max-body-total-bytes", "32MiB") as broker:
        healthy = await RawClient.connect(broker.tcp_port)
        await healthy.ok("PUSH", queue="warm", name="n", data={})
        (await open_http(broker.ws_port)).socket.close()
        before = broker.memory_bytes("VmRSS")
        answers: list[bytes] = []
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for _ in range(12):
                    nursery.start_soon(hold_body, broker.ws_port, 24 * MIB, 20 * MIB,
                                       answers)
                # At most one whole 20 MiB body fits in 32 MiB: eleven or more are cut.
                await wait_until(lambda: len(answers) >= 11, "eleven holders to be cut")
                await healthy.ok("Ping")
                grown = broker.memory_bytes("VmHWM") - before
                nursery.cancel_scope.cancel()
        print(f"the broker grew by {grown / MIB:.1f} MiB")
        assert grown < bound + 32 * MIB, f"the broker grew by {grown / MIB:.0f} MiB"
        assert sum(answer.startswith(b"HTTP/1.1 503 ") for answer in answers) >= 11, [
            answer[:40] for answer in answers]
        with trio.fail_after(5):
            await healthy.ok("Ping")


# ------------------------------------------------------------------ max_connections


LIMIT = 1100  # above 1,024: a select()-sized descriptor table would break here


def raise_fd_limit(need: int) -> Callable[[], None]:
    """Raise this process's RLIMIT_NOFILE to ``need`` (the broker inherits it); returns
    how to put it back. Skips the test, saying why, if the hard limit is lower."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= need:
        return lambda: None
    if hard != resource.RLIM_INFINITY and hard < need:
        reason = f"RLIMIT_NOFILE hard limit is {hard}, below the {need} this test needs"
        print(reason)
        pytest.skip(reason)
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def answers_ping(port: int) -> RawClient | None:
    """A new connection that answers a Ping, or None if the broker turned it away."""
    client = await RawClient.connect(port)
    try:
        reply = await client.call("Ping")
    except (EOFError, trio.BrokenResourceError):
        await client.aclose()
        return None
    assert reply["ok"] is True
    return client


async def test_max_connections_refuses_clearly_above_1024_descriptors(tmp_path: Path) -> None:
    restore = raise_fd_limit(LIMIT + 400)
    try:
        env = clean_env()
        broker = BrokerProcess(tmp_path / "data", "--memory", "--max-connections",
                               str(LIMIT), "--idle-timeout-s", "0",
                               "--max-connections-per-address", "0", env=env)
        await broker.start()
        clients: list[RawClient] = []
        try:
            with trio.fail_after(120):
                for _ in range(LIMIT):
                    clients.append(await RawClient.connect(broker.tcp_port))
                for client in clients:  # all pipelined, then every answer
                    await client.send("Ping")
                for client in clients:
                    assert (await client.receive())["ok"] is True
            assert broker.process is not None
            fds = [int(fd) for fd in os.listdir(f"/proc/{broker.process.pid}/fd")]
            assert len(fds) > LIMIT and max(fds) > 1024

            extra = await RawClient.connect(broker.tcp_port)
            with trio.fail_after(5):
                assert await extra.receive() == {
                    "ok": False, "error": f"Too many connections (max {LIMIT})"}
                assert await extra.is_closed()
            await extra.aclose()

            await clients.pop().aclose()
            with trio.fail_after(10):  # the slot frees once the broker saw the close
                while (again := await answers_ping(broker.tcp_port)) is None:
                    await trio.sleep(0.02)
            clients.append(again)
            broker.process.send_signal(signal.SIGTERM)
            assert await broker.wait_exit(timeout_s=30) == 0
            assert f"refused 1 TCP connection(s) in the last second: max_connections " \
                   f"({LIMIT}) reached".encode() in broker.log
        finally:
            for client in clients:
                await client.aclose()
            await broker.stop()
    finally:
        restore()
