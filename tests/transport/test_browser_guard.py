"""What a web page can do to a broker on the HTTP port, over real sockets.

A broker with auth off (the default) on loopback is reachable by every page its user
opens. A page may send requests it cannot read the answers of (a form, a ``text/plain``
fetch, a WebSocket), and by DNS rebinding a page on a name it controls may read answers
too (its requests carry its own name in ``Host``). Each test sends what such a page's
browser sends (``Origin``, ``Host``, ``Sec-Fetch-Site``, the content type) and checks the
broker's answer and that nothing changed; the same requests from the broker's own origin,
from a listed origin or without any ``Origin`` (curl, SDKs) still work.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Awaitable, Callable

import httpx
import pytest
import trio
from trio_websocket import ConnectionRejected, HandshakeError, open_websocket_url

from trioqueue.server.run import Server
from trioqueue.transport.http.auth import authorized, bearer_token

from .rest_client import push

StartServer = Callable[..., Awaitable[Server]]
EVIL = "http://evil.example"


def client(server: Server) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.ws_port}", timeout=10.0)


def own_origin(server: Server) -> str:
    return f"http://127.0.0.1:{server.ws_port}"


async def waiting(http: httpx.AsyncClient, queue: str = "q") -> int:
    counts = (await http.get(f"/queues/{queue}/counts")).json()["counts"]
    return int(counts["waiting"])


def refused(answer: httpx.Response, status: int, *words: str) -> None:
    assert answer.status_code == status, (answer.status_code, answer.text)
    body = answer.json()
    assert body["ok"] is False
    for word in words:
        assert word in body["error"], body


# ------------------------------------------------------------------ cross-origin writes


async def test_a_cross_origin_text_plain_push_is_refused_and_creates_no_job(
    start_server: StartServer,
) -> None:
    """A page's ``fetch(url, {method: "POST", body: ...})`` goes out as text/plain
    without a preflight: today it created the job."""
    server = await start_server(memory=True)
    async with client(server) as http:
        answer = await http.post("/queues/q/jobs", content=b'{"name":"n","data":{"a":1}}',
                                 headers={"Origin": EVIL, "Content-Type": "text/plain"})
        refused(answer, 403, "Origin", EVIL, "--http-allowed-origins")
        assert await waiting(http) == 0


@pytest.mark.parametrize("path", ["/queues/q/pause", "/queues/q/obliterate", "/crons",
                                  "/webhooks", "/queues/q/jobs"])
async def test_a_cross_origin_form_post_is_refused_and_changes_nothing(
    start_server: StartServer, path: str,
) -> None:
    """An HTML form posted from another site (form-encoded, no preflight)."""
    server = await start_server(memory=True)
    async with client(server) as http:
        await push(http)
        answer = await http.post(path, content=b"name=x&queue=q&schedule=*+*+*+*+*",
                                 headers={"Origin": EVIL, "Content-Type":
                                          "application/x-www-form-urlencoded"})
        refused(answer, 403, "Origin")
        assert await waiting(http) == 1
        assert (await http.get("/queues/q/paused")).json()["paused"] is False
        assert (await http.get("/crons")).json()["crons"] == []
        assert (await http.get("/webhooks")).json()["data"]["webhooks"] == []


async def test_a_cross_origin_json_write_is_refused_whatever_its_method(
    start_server: StartServer,
) -> None:
    """Even a request that passed a preflight (JSON, DELETE, PUT): the Origin decides."""
    server = await start_server(memory=True)
    async with client(server) as http:
        job = await push(http)
        evil = {"Origin": EVIL}
        refused(await http.post("/queues/q/jobs", json={"name": "n"}, headers=evil), 403)
        refused(await http.request("DELETE", f"/jobs/{job}", headers=evil), 403)
        refused(await http.put(f"/jobs/{job}/data", json={"data": 1}, headers=evil), 403)
        refused(await http.post("/queues/q/pause", headers={"Origin": "null"}), 403)
        assert (await http.get(f"/jobs/{job}/state")).json()["state"] == "waiting"
        assert await waiting(http) == 1


async def test_a_cross_site_pull_by_get_is_refused_and_claims_nothing(
    start_server: StartServer,
) -> None:
    """``GET /queues/{q}/jobs`` claims a job: an ``<img src>`` on any page would take
    one (no Origin on such a GET, but ``Sec-Fetch-Site: cross-site``)."""
    server = await start_server(memory=True)
    async with client(server) as http:
        await push(http)
        refused(await http.get("/queues/q/jobs", headers={"Origin": EVIL}), 403)
        refused(await http.get("/queues/q/jobs", headers={"Sec-Fetch-Site": "cross-site"}),
                403, "Sec-Fetch-Site")
        assert await waiting(http) == 1
        # Reads stay open to any Origin: CORS keeps the page from reading the answer.
        assert (await http.get("/queues/q/counts", headers={"Origin": EVIL})
                ).status_code == 200
        own = await http.get("/queues/q/jobs", headers={
            "Origin": own_origin(server), "Sec-Fetch-Site": "same-origin"})
        assert own.status_code == 200 and own.json()["job"] is not None


async def test_same_origin_and_no_origin_requests_still_work(
    start_server: StartServer,
) -> None:
    server = await start_server(memory=True)
    async with client(server) as http:
        assert (await http.post("/queues/q/jobs", json={"name": "n"})).status_code == 200
        own = {"Origin": own_origin(server), "Sec-Fetch-Site": "same-origin"}
        assert (await http.post("/queues/q/jobs", json={"name": "n"}, headers=own)
                ).status_code == 200
        by_name = {"Origin": f"http://localhost:{server.ws_port}",
                   "Host": f"localhost:{server.ws_port}"}
        assert (await http.post("/queues/q/jobs", json={"name": "n"}, headers=by_name)
                ).status_code == 200
        # a page on another port of the same host is another origin
        other_port = {"Origin": f"http://127.0.0.1:{server.ws_port + 1}"}
        refused(await http.post("/queues/q/jobs", json={"name": "n"}, headers=other_port),
                403)
        assert await waiting(http) == 3
        # a POST with no body at all needs no content type (the dashboard's buttons)
        assert (await http.post("/queues/q/pause", headers=own)).status_code == 200
        assert (await http.get("/queues/q/paused")).json()["paused"] is True


async def test_listed_origins_may_write(start_server: StartServer) -> None:
    server = await start_server(memory=True, http_allowed_origins=["https://app.example"],
                                cors_allow_origins=["http://cors.example:8080"])
    async with client(server) as http:
        for origin in ("https://app.example", "https://APP.example:443",
                       "http://cors.example:8080"):
            answer = await http.post("/queues/q/jobs", json={"name": "n"},
                                     headers={"Origin": origin})
            assert answer.status_code == 200, (origin, answer.text)
        for origin in ("http://app.example", "https://app.example:8443", EVIL,
                       "http://cors.example"):
            refused(await http.post("/queues/q/jobs", json={"name": "n"},
                                    headers={"Origin": origin}), 403)
        assert await waiting(http) == 3


async def test_an_any_origin_setting_lets_every_origin_write(
    start_server: StartServer,
) -> None:
    server = await start_server(memory=True, http_allowed_origins=["*"])
    async with client(server) as http:
        answer = await http.post("/queues/q/jobs", json={"name": "n"},
                                 headers={"Origin": EVIL})
        assert answer.status_code == 200
        # the content type is still checked
        refused(await http.post("/queues/q/jobs", content=b'{"name":"n"}',
                                headers={"Origin": EVIL, "Content-Type": "text/plain"}),
                415)


# ------------------------------------------------------------------ content type


@pytest.mark.parametrize("content_type", [None, "text/plain",
                                          "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x",
                                          "application/jsonx", "text/json"])
async def test_a_body_that_is_not_declared_json_gets_415(
    start_server: StartServer, content_type: str | None,
) -> None:
    server = await start_server(memory=True)
    async with client(server) as http:
        request = http.build_request("POST", "/queues/q/jobs", content=b'{"name":"n"}')
        if content_type is not None:
            request.headers["Content-Type"] = content_type
        assert request.headers.get("Content-Type") == content_type
        refused(await http.send(request), 415, "application/json")
        assert await waiting(http) == 0


@pytest.mark.parametrize("content_type", ["application/json",
                                          "application/json; charset=utf-8",
                                          "Application/JSON;charset=UTF-8",
                                          "application/json;charset=utf-8"])
async def test_json_bodies_are_accepted_with_parameters_and_any_case(
    start_server: StartServer, content_type: str,
) -> None:
    server = await start_server(memory=True)
    async with client(server) as http:
        answer = await http.post("/queues/q/jobs", content=b'{"name":"n"}',
                                 headers={"Content-Type": content_type})
        assert answer.status_code == 200, answer.text
        assert await waiting(http) == 1


# ------------------------------------------------------------------ Host (DNS rebinding)


async def test_a_request_for_another_host_name_is_refused_before_it_reads_anything(
    start_server: StartServer,
) -> None:
    """A page on attacker.example, rebound to 127.0.0.1, reads with its own name in
    Host: today it read the job's data."""
    server = await start_server(memory=True)
    async with client(server) as http:
        job = await push(http, data={"secret": "s3cret"})
        rebound = {"Host": f"attacker.example:{server.ws_port}"}
        for path in (f"/jobs/{job}", "/queues/q/jobs/list", "/dashboard", "/health",
                     "/events", "/", "/queues"):
            answer = await http.get(path, headers=rebound)
            refused(answer, 403, "attacker.example", "--http-allowed-hosts")
            assert "s3cret" not in answer.text
        refused(await http.post("/queues/q/jobs", json={"name": "n"}, headers=rebound),
                403)
        refused(await http.options("/queues", headers=rebound), 403)
        assert await waiting(http) == 1


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.1:1", "[::1]:6790", "10.1.2.3",
                                  "localhost", "LOCALHOST:80", "localhost.",
                                  "dash.localhost:9000"])
async def test_ip_addresses_and_localhost_are_always_allowed_hosts(
    start_server: StartServer, host: str,
) -> None:
    server = await start_server(memory=True)
    async with client(server) as http:
        answer = await http.get("/queues", headers={"Host": host})
        assert answer.status_code == 200, (host, answer.text)


async def test_listed_host_names_are_allowed(start_server: StartServer) -> None:
    server = await start_server(memory=True,
                                http_allowed_hosts=["broker.internal", "*.corp.example"])
    async with client(server) as http:
        for host in ("broker.internal", "Broker.Internal:6790", "q.corp.example",
                     "a.b.corp.example:1"):
            answer = await http.get("/queues", headers={"Host": host})
            assert answer.status_code == 200, (host, answer.text)
        for host in ("corp.example", "evil.example", "broker.internal.evil.example",
                     "xcorp.example"):
            refused(await http.get("/queues", headers={"Host": host}), 403)
        # the broker's own origin under an allowed name may write
        named = {"Host": "broker.internal:6790", "Origin": "http://broker.internal:6790"}
        assert (await http.post("/queues/q/jobs", json={"name": "n"}, headers=named)
                ).status_code == 200


async def test_an_any_host_setting_turns_the_check_off(start_server: StartServer) -> None:
    server = await start_server(memory=True, http_allowed_hosts=["*"])
    async with client(server) as http:
        answer = await http.get("/queues", headers={"Host": "anything.example"})
        assert answer.status_code == 200


# ------------------------------------------------------------------ WebSocket upgrades


async def raw_upgrade(server: Server, *headers: str) -> bytes:
    """A WebSocket upgrade with ``headers`` (``Name: value``); everything the broker
    sends until it closes, or the first 4 KiB."""
    assert server.ws_port is not None
    stream = await trio.open_tcp_stream("127.0.0.1", server.ws_port)
    key = base64.b64encode(os.urandom(16)).decode()
    lines = ["GET /ws HTTP/1.1", "Upgrade: websocket", "Connection: Upgrade",
             f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13", *headers]
    if not any(line.lower().startswith("host:") for line in headers):
        lines.append(f"Host: 127.0.0.1:{server.ws_port}")
    await stream.send_all(("\r\n".join(lines) + "\r\n\r\n").encode())
    wire = b""
    with trio.fail_after(5):
        while len(wire) < 4096 and (chunk := await stream.receive_some(4096)):
            wire += chunk
            if wire.startswith(b"HTTP/1.1 101 "):
                break
    await stream.aclose()
    return wire


async def test_a_cross_site_websocket_is_refused_before_the_upgrade_and_pushes_nothing(
    start_server: StartServer,
) -> None:
    server = await start_server(memory=True)
    url = f"ws://127.0.0.1:{server.ws_port}/ws"
    pushed = False
    with pytest.raises(ConnectionRejected) as rejected:
        async with open_websocket_url(url, extra_headers=[(b"Origin", EVIL.encode())]
                                      ) as ws:
            await ws.send_message(json.dumps({"cmd": "PUSH", "queue": "q", "name": "n",
                                              "data": {}, "reqId": "1"}))
            pushed = json.loads(await ws.get_message())["ok"]
    assert not pushed
    assert rejected.value.status_code == 403
    assert b"Origin" in (rejected.value.body or b"")
    wire = await raw_upgrade(server, f"Origin: {EVIL}")
    assert wire.startswith(b"HTTP/1.1 403 ")
    assert json.loads(wire.split(b"\r\n\r\n", 1)[1])["ok"] is False
    async with client(server) as http:
        assert await waiting(http) == 0


async def test_a_websocket_for_another_host_name_is_refused(
    start_server: StartServer,
) -> None:
    server = await start_server(memory=True)
    wire = await raw_upgrade(server, "Host: attacker.example")
    assert wire.startswith(b"HTTP/1.1 403 ")
    assert b"attacker.example" in wire


async def test_same_origin_listed_and_no_origin_websockets_are_served(
    start_server: StartServer,
) -> None:
    server = await start_server(memory=True, http_allowed_origins=["https://app.example"])
    url = f"ws://127.0.0.1:{server.ws_port}/ws"
    for headers in ([], [(b"Origin", own_origin(server).encode())],
                    [(b"Origin", b"https://app.example")]):
        async with open_websocket_url(url, extra_headers=headers) as ws:
            await ws.send_message(json.dumps({"cmd": "PUSH", "queue": "q", "name": "n",
                                              "data": {}, "reqId": "1"}))
            with trio.fail_after(5):
                while "reqId" not in (reply := json.loads(await ws.get_message())):
                    pass
            assert reply["ok"] is True, reply
    async with client(server) as http:
        assert await waiting(http) == 3


# ------------------------------------------------------------------ two Authorization headers


async def test_two_authorization_headers_are_refused(start_server: StartServer) -> None:
    """Which header counts would depend on who reads them (a proxy may check the last,
    we the first): a request with two is refused, whatever they hold."""
    server = await start_server(memory=True, auth_tokens=["t"])
    async with client(server) as http:
        both = [("Authorization", "Bearer t"), ("Authorization", "Bearer wrong")]
        refused(await http.post("/queues/q/jobs", json={"name": "n"}, headers=both), 400,
                "Authorization")
        refused(await http.get("/queues", headers=both), 400, "Authorization")
        good = {"Authorization": "Bearer t"}
        assert (await http.post("/queues/q/jobs", json={"name": "n"}, headers=good)
                ).status_code == 200
    wire = await raw_upgrade(server, "Authorization: Bearer t", "Authorization: Bearer x")
    assert wire.startswith(b"HTTP/1.1 400 ") and b"Authorization" in wire
    url = f"ws://127.0.0.1:{server.ws_port}/ws"
    with pytest.raises(HandshakeError):
        async with open_websocket_url(url, extra_headers=[
                (b"Authorization", b"Bearer x"), (b"Authorization", b"Bearer t")]):
            pass


def test_two_authorization_headers_give_no_token_to_any_reader() -> None:
    """Whoever else reads the bearer token (the WebSocket side) gets none that matches."""
    both = [(b"authorization", b"Bearer t"), (b"authorization", b"Bearer x")]
    assert bearer_token(both) == ""
    assert not authorized(["t"], both)
    assert bearer_token([(b"authorization", b"Bearer t")]) == "t"


async def test_an_upgrade_whose_host_is_not_idna_closes_its_connection_not_the_broker(
    start_server: StartServer,
) -> None:
    """wsproto decodes Host as IDNA and lets the error out of trio-websocket's reader:
    one such upgrade ended the broker (``*.localhost`` passes the Host check)."""
    server = await start_server(memory=True)
    assert server.ws_port is not None
    stream = await trio.open_tcp_stream("127.0.0.1", server.ws_port)
    key = base64.b64encode(os.urandom(16)).decode()
    head = "GET /ws HTTP/1.1\r\nHost: xn--zz.localhost\r\n"
    await stream.send_all((head + "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
                           ).encode("latin-1"))
    with trio.fail_after(5):
        while await stream.receive_some(4096):
            pass
    await stream.aclose()
    async with client(server) as http:
        assert (await http.post("/queues/q/jobs", json={"name": "n"})).status_code == 200
