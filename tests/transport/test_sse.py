"""SSE on the HTTP port (/events, /events/queues/<queue>), over real HTTP with httpx."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from typing import Any

import httpx
import trio

from trioqueue.server.run import Server
from trioqueue.testing import RawClient
from trioqueue.transport.http.sse import SseHub

StartServer = Callable[..., Any]


class SseReader:
    """Frames of one SSE response: dicts of the frame's fields (``event``, ``id``,
    ``data`` decoded, ``comment`` for a comment line)."""

    def __init__(self, response: httpx.Response) -> None:
        self._lines = response.aiter_lines()

    async def frame(self) -> dict[str, Any]:
        frame: dict[str, Any] = {}
        async for line in self._lines:
            if line == "":
                if frame:
                    return frame
                continue
            if line.startswith(":"):
                frame["comment"] = line[1:]
                continue
            key, _, value = line.partition(": ")
            frame[key] = json.loads(value) if key == "data" else value
        raise EOFError

    async def until(self, event: str) -> dict[str, Any]:
        while True:
            frame = await self.frame()
            if frame.get("event") == event:
                return frame


def url(server: Server, path: str) -> str:
    return f"http://127.0.0.1:{server.ws_port}{path}"


async def tcp(server: Server) -> RawClient:
    assert server.tcp_port is not None
    return await RawClient.connect(server.tcp_port)


async def test_connected_frame_then_job_events_with_ids(start_server: StartServer) -> None:
    server = await start_server(memory=True)
    client = await tcp(server)
    async with httpx.AsyncClient(timeout=10) as http, \
            http.stream("GET", url(server, "/events")) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        reader = SseReader(response)
        hello = await reader.frame()
        assert hello["retry"] == "3000" and hello["data"]["connected"] is True
        assert hello["data"]["clientId"]
        pushed = await client.ok("PUSH", queue="sse-q", name="n", data={"a": 1})
        with trio.fail_after(5):
            frame = await reader.until("job:pushed")
        assert frame["data"]["jobId"] == pushed["id"] and frame["data"]["queue"] == "sse-q"
        assert int(frame["id"]) >= 1
        with trio.fail_after(5):
            counts = await reader.until("queue:counts")
        assert counts["data"]["queue"] == "sse-q" and counts["data"]["waiting"] == 1


async def test_a_queue_stream_gets_only_its_queue(start_server: StartServer) -> None:
    server = await start_server(memory=True)
    client = await tcp(server)
    async with httpx.AsyncClient(timeout=10) as http, \
            http.stream("GET", url(server, "/events/queues/mine")) as response:
        reader = SseReader(response)
        await reader.frame()  # connected
        await client.ok("PUSH", queue="other", name="n", data=1)
        mine = await client.ok("PUSH", queue="mine", name="n", data=2)
        with trio.fail_after(5):
            frame = await reader.until("job:pushed")
        assert frame["data"]["jobId"] == mine["id"]


async def test_last_event_id_replays_what_was_missed(start_server: StartServer) -> None:
    server = await start_server(memory=True)
    client = await tcp(server)
    async with httpx.AsyncClient(timeout=10) as http:
        async with http.stream("GET", url(server, "/events")) as response:
            reader = SseReader(response)
            await reader.frame()
            first = await client.ok("PUSH", queue="r", name="n", data=1)
            with trio.fail_after(5):
                seen = await reader.until("job:pushed")
            assert seen["data"]["jobId"] == first["id"]
            # while this client is still connected (the ring fills only while someone
            # listens), two more jobs: the reconnecting client has not seen them
            second = await client.ok("PUSH", queue="r", name="n", data=2)
            third = await client.ok("PUSH", queue="r", name="n", data=3)
            with trio.fail_after(5):
                while (await reader.until("job:pushed"))["data"]["jobId"] != third["id"]:
                    pass
        async with http.stream("GET", url(server, "/events"),
                               headers={"Last-Event-ID": seen["id"]}) as again:
            reader = SseReader(again)
            await reader.frame()
            with trio.fail_after(5):
                replayed = [(await reader.until("job:pushed"))["data"]["jobId"]
                            for _ in range(2)]
    assert replayed == [second["id"], third["id"]]


async def test_heartbeat_comment_on_a_quiet_stream(start_server: StartServer) -> None:
    server = await start_server(memory=True, sse_heartbeat_s=0.1)
    async with httpx.AsyncClient(timeout=10) as http, \
            http.stream("GET", url(server, "/events")) as response:
        reader = SseReader(response)
        await reader.frame()
        with trio.fail_after(5):
            frame = await reader.frame()
    assert frame == {"comment": "heartbeat"}


async def test_periodic_frames(start_server: StartServer) -> None:
    server = await start_server(memory=True, stats_snapshot_interval_s=0.05,
                                health_status_interval_s=0.05,
                                storage_status_interval_s=0.05)
    client = await tcp(server)
    await client.ok("PUSH", queue="p", name="n", data=1)
    async with httpx.AsyncClient(timeout=10) as http, \
            http.stream("GET", url(server, "/events/queues/elsewhere")) as response:
        reader = SseReader(response)
        with trio.fail_after(5):
            stats = await reader.until("stats:snapshot")
            health = await reader.until("health:status")
            storage = await reader.until("storage:status")
    assert stats["data"]["queues"]["p"]["waiting"] == 1  # broker-wide: any filter gets it
    assert health["data"]["ok"] is True and health["data"]["connections"]["sse"] == 1
    assert storage["data"]["diskFull"] is False


async def test_too_many_clients_get_503(start_server: StartServer) -> None:
    server = await start_server(memory=True, sse_max_clients=1)
    async with httpx.AsyncClient(timeout=10) as http, \
            http.stream("GET", url(server, "/events")) as response:
        await SseReader(response).frame()
        refused = await http.get(url(server, "/events"))
    assert refused.status_code == 503
    assert refused.json() == {"ok": False, "error": "Too many SSE connections"}


async def test_a_bad_queue_name_is_404(start_server: StartServer) -> None:
    server = await start_server(memory=True)
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.get(url(server, "/events/queues/bad%20name"))
    assert response.status_code == 404


async def test_an_sse_client_that_never_reads_is_cut_and_the_broker_is_not_slowed(
    start_server: StartServer,
) -> None:
    """A client with a tiny receive buffer that reads nothing: the frames queued for it
    pass sse_max_unsent_bytes, the broker closes it; meanwhile pushes keep their pace
    and a reading client gets every event."""
    server = await start_server(memory=True, sse_max_unsent_bytes=64 * 1024)
    assert server.ws_port is not None
    stuck = trio.socket.socket()
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    await stuck.connect(("127.0.0.1", server.ws_port))
    await stuck.send(b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    client = await tcp(server)
    async with httpx.AsyncClient(timeout=10) as http, \
            http.stream("GET", url(server, "/events")) as response:
        reader = SseReader(response)
        await reader.frame()
        with trio.fail_after(5):
            while len(sse_hub(server).clients) < 2:  # both streams are open
                await trio.sleep(0.01)
        seen: list[int] = []

        async def read_all() -> None:
            while True:
                if (await reader.frame()).get("event") == "job:pushed":
                    seen.append(1)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_all)
            pushed = 0
            with trio.fail_after(20):
                for _ in range(400):
                    await client.ok("PUSHB", queue="flood",
                                    jobs=[{"name": "n", "data": "x" * 200} for _ in range(10)])
                    pushed += 10
                    if len(sse_hub(server).clients) == 1:
                        break
                assert len(sse_hub(server).clients) == 1  # the stuck one was cut
                while len(seen) < pushed:  # the reading client got every event
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    # what the stuck client can still read is bounded by what was queued before the cut
    got = 0
    with trio.move_on_after(2):
        while chunk := await stuck.recv(65536):
            got += len(chunk)
    assert got < 2 * 1024 * 1024
    stuck.close()


def sse_hub(server: Server) -> SseHub:
    assert server.http is not None
    return server.http.app.sse


async def test_a_burst_of_job_events_gives_one_queue_counts_frame(
    start_server: StartServer,
) -> None:
    """50 jobs pushed in one batch: 50 job:pushed frames, and queue:counts once, with
    the batch's total (coalesced over queue_counts_coalesce_ms), not 50 times."""
    server = await start_server(memory=True, queue_counts_coalesce_ms=50)
    client = await tcp(server)
    async with httpx.AsyncClient(timeout=10) as http, \
            http.stream("GET", url(server, "/events/queues/burst")) as response:
        reader = SseReader(response)
        await reader.frame()
        await client.ok("PUSHB", queue="burst", jobs=[{"name": "n", "data": i}
                                                     for i in range(50)])
        pushed, counts = 0, []
        with trio.fail_after(5):
            while not counts:
                frame = await reader.frame()
                if frame.get("event") == "job:pushed":
                    pushed += 1
                elif frame.get("event") == "queue:counts":
                    counts.append(frame["data"])
    assert pushed == 50 and [c["waiting"] for c in counts] == [50]
