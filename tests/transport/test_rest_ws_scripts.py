"""The REST calls bunqueue's own WebSocket test scripts make (its job-lifecycle and
queue/DLQ/cron event scripts create and move their jobs over REST, with bodies and
no bodies exactly as they send them), each answered as those scripts expect."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
import trio

from .rest_client import http_fixture

http = http_fixture()
Q = "ws-job-events"


async def api(http: httpx.AsyncClient, method: str, path: str,
              body: object = None) -> dict[str, object]:
    """As the scripts' helper: JSON body only when there is one; the reply as JSON."""
    answer = await http.request(method, path, json=body)
    assert answer.status_code == 200, (method, path, answer.text)
    reply: dict[str, object] = answer.json()
    assert reply["ok"] is True, (method, path, reply)
    return reply


async def test_the_job_lifecycle_script_calls(http: httpx.AsyncClient) -> None:
    await api(http, "POST", f"/queues/{Q}/obliterate")
    first = str((await api(http, "POST", f"/queues/{Q}/jobs", {"data": {"x": 1}}))["id"])
    pulled = await api(http, "GET", f"/queues/{Q}/jobs")
    assert pulled["job"]["id"] == first  # type: ignore[index]
    await api(http, "POST", f"/jobs/{first}/progress", {"progress": 50})
    await api(http, "POST", f"/jobs/{first}/ack", {"result": {"done": True}})
    once = str((await api(http, "POST", f"/queues/{Q}/jobs",
                          {"data": {"x": 1}, "maxAttempts": 1}))["id"])
    await api(http, "GET", f"/queues/{Q}/jobs")
    await api(http, "POST", f"/jobs/{once}/fail", {"error": "test failure"})
    removed = str((await api(http, "POST", f"/queues/{Q}/jobs", {"data": {}}))["id"])
    await api(http, "DELETE", f"/jobs/{removed}")
    later = str((await api(http, "POST", f"/queues/{Q}/jobs",
                           {"data": {}, "delay": 60000}))["id"])
    await api(http, "POST", f"/jobs/{later}/promote")
    await api(http, "PUT", f"/jobs/{later}/priority", {"priority": 99})
    await api(http, "PUT", f"/jobs/{later}/data", {"data": {"updated": True}})
    await api(http, "POST", f"/jobs/{later}/discard")
    moved = str((await api(http, "POST", f"/queues/{Q}/jobs", {"data": {}}))["id"])
    await api(http, "GET", f"/queues/{Q}/jobs")
    await api(http, "PUT", f"/jobs/{moved}/delay", {"delay": 5000})
    state = await api(http, "GET", f"/jobs/{moved}/state")
    assert state["state"] == "delayed"


async def test_the_queue_dlq_cron_script_calls(http: httpx.AsyncClient) -> None:
    await api(http, "POST", f"/queues/{Q}/jobs", {"data": {"x": 1}})
    await api(http, "POST", f"/queues/{Q}/pause")
    await api(http, "POST", f"/queues/{Q}/resume")
    await api(http, "POST", f"/queues/{Q}/drain")
    await api(http, "POST", f"/queues/{Q}/jobs", {"data": {"x": 2}})
    cleaned = await api(http, "POST", f"/queues/{Q}/clean", {"grace": 0, "state": "waiting"})
    assert cleaned["count"] == 1
    dead = str((await api(http, "POST", f"/queues/{Q}/jobs",
                          {"data": {"x": 1}, "maxAttempts": 1}))["id"])
    await api(http, "GET", f"/queues/{Q}/jobs")
    await api(http, "POST", f"/jobs/{dead}/fail", {"error": "dlq test"})
    assert (await api(http, "POST", f"/queues/{Q}/dlq/retry"))["count"] == 1
    await api(http, "GET", f"/queues/{Q}/jobs")
    await api(http, "POST", f"/jobs/{dead}/fail", {"error": "purge test"})
    assert (await api(http, "POST", f"/queues/{Q}/dlq/purge"))["count"] == 1
    await api(http, "POST", "/crons", {"name": "ws-cron-test", "queue": Q,
                                      "data": {"t": 1}, "repeatEvery": 60000})
    await api(http, "DELETE", "/crons/ws-cron-test")
    await api(http, "POST", f"/queues/{Q}/obliterate")


async def _answer(stream: trio.SocketStream) -> bytes:
    """One whole answer (head and its Content-Length body); b"" if the broker closed."""
    data = b""
    with trio.fail_after(5):
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some(65536)
            if not chunk:
                return b""
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        while len(body) < length:
            body += await stream.receive_some(65536)
    return head


@pytest.mark.slow
async def test_a_connection_idle_through_a_scripts_event_wait_takes_its_next_post(
        start_server: Callable[..., Any]) -> None:
    """The scripts wait 5 s for an event that does not come, then POST on the kept-alive
    connection their fetch holds: at a 5 s keep-alive that POST met the close (Bun's
    fetch: ECONNRESET). The connection must still be open then."""
    server = await start_server(memory=True)
    stream = await trio.open_tcp_stream("127.0.0.1", server.ws_port)
    body = b'{"data":{"x":1}}'
    request = (b"POST /queues/" + Q.encode() + b"/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               b"Content-Type: application/json\r\nContent-Length: "
               + str(len(body)).encode() + b"\r\n\r\n" + body)
    await stream.send_all(request)
    assert (await _answer(stream)).startswith(b"HTTP/1.1 200")
    await trio.sleep(5.5)  # the script's 5 s wait for its event, and a little
    await stream.send_all(request)
    assert (await _answer(stream)).startswith(b"HTTP/1.1 200")
    await stream.aclose()
