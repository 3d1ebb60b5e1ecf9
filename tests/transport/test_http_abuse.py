"""Bad input on the HTTP port: answered at once with a client error, never a 500, and
the broker goes on; a route that does raise answers 500 and harms nothing else."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trioqueue.config import Config
from trioqueue.server.run import Server
from trioqueue.transport.http.rest.api import Call, Response, RunCommand

StartServer = Callable[..., Any]

# (no "events": an SSE stream is never whole; test_sse.py covers its paths)
SEGMENTS = ["jobs", "queues", "q", "1", "custom", "ack", "fail", "logs", "dlq", "crons",
            "webhooks", "workers", "dashboard", "jobs/list", "pull-batch",
            "bulk", "rate-limit", "concurrency", "stall-config", "%00", "..", "%2F", "é",
            "summary", "counts", "state", "priority", "data", "wait", "heartbeat"]
BODIES = st.one_of(
    st.binary(max_size=64),
    st.sampled_from([b"", b"{}", b"[]", b"null", b"1", b'{"jobs": 5}', b'{"data": {}}',
                     b'{"count": -1}', b'{"name": 7}', b'{"limit": "x"}', b'{"jobs":[1]}',
                     b'{"queue": {"a": 1}}', b"{" * 200, b'{"data": 1e400}']),
)


def url(server: Server) -> str:
    return f"http://127.0.0.1:{server.ws_port}"


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]),
       path=st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=5),
       query=st.sampled_from(["", "?limit=abc", "?timeout=-5", "?offset=1e9",
                              "?state=nope&limit=2", "?includeJobs=true"]),
       body=BODIES)
def test_random_requests_get_a_client_error_never_a_crash(
    start_server_sync: Callable[[], tuple[Server, httpx.Client]], method: str,
    path: list[str], query: str, body: bytes,
) -> None:
    server, http = start_server_sync()
    response = http.request(method, "/" + "/".join(path) + query, content=body,
                            headers={"content-type": "application/json"})
    assert response.status_code in (200, 400, 404, 413), (response.status_code,
                                                           response.text)
    if response.headers.get("content-type", "").startswith("application/json"):
        assert isinstance(response.json(), (dict, list))
    assert http.get("/live").status_code == 200


@pytest.fixture
def start_server_sync(tmp_path: Any) -> Any:
    """One broker in a thread of its own for the hypothesis examples (the trio
    fixtures are per test, hypothesis runs many examples in one)."""
    holder: dict[str, Any] = {}
    started = threading.Event()

    def run() -> None:
        async def main() -> None:
            server = Server(Config(host="127.0.0.1", tcp_port=0, ws_port=0, memory=True,
                                   http_rate_limit_max_requests=0))
            async with trio.open_nursery() as nursery:
                await nursery.start(server.run)
                holder["server"] = server
                holder["token"] = trio.lowlevel.current_trio_token()
                stopped = trio.Event()
                holder["stop"] = stopped.set
                started.set()
                await stopped.wait()
                server.stop()
        trio.run(main)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(10)
    http = httpx.Client(base_url=url(holder["server"]), timeout=10)
    yield lambda: (holder["server"], http)
    http.close()
    trio.from_thread.run_sync(holder["stop"], trio_token=holder["token"])
    thread.join(10)


async def test_a_route_that_raises_answers_500_and_nothing_else_is_hurt(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    server: Server = await start_server(memory=True)
    assert server.http is not None
    table = server.http.app.routes
    found = table.find

    async def broken(call: Call, run: RunCommand) -> Response:
        raise RuntimeError("a bug in a route")

    monkeypatch.setattr(table, "find", lambda method, path: (
        (broken, {}) if path == "/ping" else found(method, path)))
    async with httpx.AsyncClient(base_url=url(server), timeout=5) as http:
        failed = await http.get("/ping")
        assert failed.status_code == 500
        assert failed.json() == {"ok": False, "error": "Internal server error"}
        pushed = await http.post("/queues/q/jobs", json={"name": "n", "data": 1})
        assert pushed.status_code == 200
        assert (await http.get(f"/jobs/{pushed.json()['id']}")).status_code == 200
