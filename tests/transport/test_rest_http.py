"""What surrounds every REST route, over real HTTP: bearer auth (health probes
ungated), CORS, the per-address 429 budget, the body and header limits, unknown
paths, and long-polled pulls (answered by a push; given up when the client leaves)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import trio
import trio.testing

from .rest_client import push, rest_client

BEARER = {"Authorization": "Bearer t"}


async def test_routes_need_the_bearer_token_and_probes_do_not(
        start_server: Callable[..., Any]) -> None:
    async with rest_client(start_server, auth_tokens=["t"]) as http:
        for path in ("/queues", "/jobs/x", "/heapstats"):
            missing = await http.get(path)
            assert missing.status_code == 401, path
            assert missing.json() == {"ok": False, "error": "Unauthorized"}
            wrong = await http.get(path, headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 401, path
        assert (await http.post("/gc")).status_code == 401
        assert (await http.post("/queues/q/jobs", json={"name": "n"})).status_code == 401
        assert (await http.get("/queues", headers=BEARER)).status_code == 200
        assert (await http.get("/heapstats", headers=BEARER)).status_code == 200
        assert (await http.post("/gc", headers=BEARER)).status_code == 200
        for probe in ("/health", "/healthz", "/live", "/ready"):
            assert (await http.get(probe)).status_code == 200, probe


async def test_cors_preflight_and_allowed_origin(start_server: Callable[..., Any]) -> None:
    async with rest_client(start_server, cors_allow_origins=["http://a.example"]) as http:
        preflight = await http.options("/queues/q/jobs", headers={
            "Origin": "http://a.example", "Access-Control-Request-Method": "POST"})
        assert preflight.status_code == 204
        assert "POST" in preflight.headers["access-control-allow-methods"]
        allowed = await http.get("/queues", headers={"Origin": "http://a.example"})
        assert allowed.headers["access-control-allow-origin"] == "http://a.example"
        other = await http.get("/queues", headers={"Origin": "http://b.example"})
        assert "access-control-allow-origin" not in other.headers


async def test_requests_past_the_budget_get_429(start_server: Callable[..., Any]) -> None:
    async with rest_client(start_server, http_rate_limit_max_requests=3) as http:
        for _ in range(3):
            assert (await http.get("/queues")).status_code == 200
        refused = await http.get("/queues")
        assert refused.status_code == 429
        assert refused.json() == {"ok": False, "error": "Rate limit exceeded"}
        assert int(refused.headers["retry-after"]) >= 1


async def test_a_body_past_the_limit_gets_413(start_server: Callable[..., Any]) -> None:
    async with rest_client(start_server, http_max_body_bytes=100) as http:
        small = await http.post("/queues/q/jobs", json={"name": "n", "data": "x"})
        assert small.status_code == 200
        large = await http.post("/queues/q/jobs", json={"name": "n", "data": "x" * 200})
        assert large.status_code == 413
        assert (await http.get("/queues/q/count")).json()["count"] == 1


async def test_a_head_past_the_limit_gets_431(start_server: Callable[..., Any]) -> None:
    async with rest_client(start_server, http_max_header_bytes=1024) as http:
        assert (await http.get("/queues", headers={"X-Pad": "p" * 100})).status_code == 200
        refused = await http.get("/queues", headers={"X-Pad": "p" * 2000})
        assert refused.status_code == 431


async def test_unknown_paths_and_methods_are_404(start_server: Callable[..., Any]) -> None:
    async with rest_client(start_server) as http:
        for method, path in (("GET", "/nope"), ("GET", "/queues/q/nope"),
                             ("PATCH", "/jobs/x"), ("DELETE", "/queues"),
                             ("GET", "/jobs/x/y/z")):
            answer = await http.request(method, path)
            assert answer.status_code == 404, (method, path)
            assert answer.json() == {"ok": False, "error": "Not found"}


async def test_a_long_poll_is_answered_by_a_push(start_server: Callable[..., Any]) -> None:
    async with rest_client(start_server) as http:
        answers: list[httpx.Response] = []

        async def poll() -> None:
            answers.append(await http.get("/queues/q/jobs?timeout=30000"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(poll)
            await trio.testing.wait_all_tasks_blocked(cushion=0.05)  # the pull is parked
            assert answers == []
            job_id = await push(http)
        assert answers[0].status_code == 200
        assert answers[0].json()["job"]["id"] == job_id


async def test_a_long_poll_given_up_leaves_the_job_for_the_next_puller(
        start_server: Callable[..., Any]) -> None:
    async with rest_client(start_server) as http:
        with trio.CancelScope() as gone:
            async def poll() -> None:
                await http.get("/queues/q/jobs?timeout=30000")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(poll)
                await trio.testing.wait_all_tasks_blocked(cushion=0.05)
                gone.cancel()  # the client closes its connection
        # The server notices the close and withdraws the parked pull; whichever comes
        # first, the close or the push, the job ends up waiting for the next puller.
        job_id = await push(http)
        nxt = await http.get("/queues/q/jobs?timeout=5000")
        assert nxt.status_code == 200 and nxt.json()["job"]["id"] == job_id
        assert (await http.get(f"/jobs/{job_id}/state")).json()["state"] == "active"


async def test_a_first_head_past_the_limit_gets_431(
        start_server: Callable[..., Any]) -> None:
    """The first request of a connection is read by the port's front (a whole head in
    one read is measured too)."""
    server = await start_server(memory=True, http_max_header_bytes=1024)
    with trio.socket.socket() as sock:
        await sock.connect(("127.0.0.1", server.ws_port))
        await sock.send(b"GET /queues HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"p" * 2000
                        + b"\r\n\r\n")
        answer = await sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 431 ")


async def test_a_long_reply_is_whole_and_valid_json(start_server: Callable[..., Any]) -> None:
    """A PULLB of 500 jobs (encoded in slices, as on the other transports) reads back as
    the jobs pushed, in order, with their tokens."""
    async with rest_client(start_server) as client:
        jobs = [{"name": "n", "data": {"i": i, "text": "é\n\"" * 3}} for i in range(500)]
        assert (await client.post("/queues/long/jobs/bulk", json={"jobs": jobs})
                ).status_code == 200
        reply = await client.post("/queues/long/jobs/pull-batch",
                                  json={"count": 500, "owner": "w"})
        body = reply.json()
    assert reply.status_code == 200 and body["ok"] is True
    assert [job["data"] for job in body["jobs"]] == [job["data"] for job in jobs]
    assert len(body["tokens"]) == 500
    assert int(reply.headers["content-length"]) == len(reply.content)


async def test_an_answer_given_before_the_body_is_read_keeps_the_connection_usable(
    start_server: Callable[..., Any],
) -> None:
    """A body sent to a path that never reads it (404, 401...) is taken before the
    answer, so the kept-alive connection serves the next request (hypercorn closes a
    connection whose request was not received whole, without telling the client)."""
    server = await start_server(memory=True)
    assert server.ws_port is not None
    stream = await trio.open_tcp_stream("127.0.0.1", server.ws_port)
    head = (b"POST /nowhere HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 2000\r\n\r\n")
    await stream.send_all(head)
    await trio.testing.wait_all_tasks_blocked(cushion=0.05)  # the head is in alone
    await stream.send_all(b"x" * 2000 + b"GET /live HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    wire = b""
    with trio.fail_after(5):
        while wire.count(b"HTTP/1.1 ") < 2 or not wire.endswith(b"OK"):
            chunk = await stream.receive_some(65536)
            assert chunk, wire
            wire += chunk
    assert wire.startswith(b"HTTP/1.1 404 ") and b"HTTP/1.1 200 " in wire
    await stream.aclose()


async def test_a_body_past_the_limit_closes_the_connection_after_413(
    start_server: Callable[..., Any],
) -> None:
    server = await start_server(memory=True, http_max_body_bytes=100)
    assert server.ws_port is not None
    stream = await trio.open_tcp_stream("127.0.0.1", server.ws_port)
    await stream.send_all(b"POST /queues/q/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          b"Content-Type: application/json\r\n"
                          b"Transfer-Encoding: chunked\r\n\r\n" + b"c8\r\n" + b"y" * 200
                          + b"\r\n")
    wire = b""
    with trio.fail_after(5):
        while chunk := await stream.receive_some(65536):
            wire += chunk
    assert wire.startswith(b"HTTP/1.1 413 ") and b"connection: close" in wire.lower()
    await stream.aclose()
