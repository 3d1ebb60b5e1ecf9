"""A reply carrying a job whose data is many small values is encoded in slices: no step
of the broker holds the loop for its whole encoding (transport/large/value_slices.py), over
TCP in both codecs, over REST and over WebSocket."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import open_websocket_url

from trioqueue.server.run import Server
from trioqueue.testing import RawClient
from trioqueue.testing.tasks import steps_watched
from trioqueue.transport.wire.codec import CBOR, MSGPACK
from trioqueue.transport.wire.framing import FrameDecoder

StartServer = Callable[..., Awaitable[Server]]

# 1M small maps: 8M characters of JSON, within the data limit; one call encoding it took
# about 100 ms of CPU (msgpack), 300 ms (CBOR).
DATA = [{"a": 1}] * 1_000_000
# A slice is about 0.5 ms; the rest is the machine's noise.
STEP_CPU_MS = 15.0
WS_STEP_CPU_MS = 60.0


async def raw_reply(client: RawClient, msg: dict[str, Any]) -> bytes:
    """Send ``msg``; the payload of the one frame that answers it, not decoded (the
    test's decoding would be a long step of its own)."""
    await client.send_raw(client.frame(msg))
    decoder = FrameDecoder(1 << 30)
    with trio.fail_after(60):
        while True:
            data = await client.stream.receive_some(1 << 20)
            assert data, "the broker closed the connection"
            payloads = list(decoder.feed(data))
            if payloads:
                assert len(payloads) == 1
                return bytes(payloads[0])


@pytest.mark.parametrize("codec", [MSGPACK, pytest.param(CBOR, marks=pytest.mark.slow)],
                         ids=lambda c: c.name)  # (CBOR's push is the slow part: 7 s)
async def test_pull_and_getjob_of_many_small_maps_are_encoded_in_slices_over_tcp(
    start_server: StartServer, codec: Any,
) -> None:
    server = await start_server(memory=True)
    client = await RawClient.connect(server.tcp_port, codec.name)
    pushed = await client.ok("PUSH", queue="q", data=DATA)
    for msg in ({"cmd": "PULL", "queue": "q", "timeout": 0, "reqId": "p"},
                {"cmd": "GetJob", "id": pushed["id"], "reqId": "g"}):
        async with steps_watched(skip_caller=False) as steps:
            payload = await raw_reply(client, msg)
        reply = codec.decode(payload)
        assert reply["ok"] is True and reply["reqId"] == msg["reqId"]
        assert reply["job"]["id"] == pushed["id"]
        assert reply["job"]["data"] == DATA
        steps.check(msg["cmd"], STEP_CPU_MS)


async def test_pull_and_getjob_of_many_small_maps_are_encoded_in_slices_over_rest(
    start_server: StartServer,
) -> None:
    server = await start_server(memory=True)
    headers = {"content-type": "application/json"}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.ws_port}",
                                 timeout=60.0) as http:
        pushed = await http.post("/queues/q/jobs", content=json.dumps({"data": DATA}),
                                 headers=headers)
        job_id = pushed.json()["id"]
        for method, path in (("GET", "/queues/q/jobs"), ("GET", f"/jobs/{job_id}")):
            async with steps_watched(skip_caller=False) as steps:
                got = await http.request(method, path)
            assert got.status_code == 200, got.text[:200]
            body = json.loads(got.content)
            assert body["job"]["id"] == job_id
            assert body["job"]["data"] == DATA
            steps.check(path, STEP_CPU_MS)


async def test_getjob_of_many_small_maps_is_encoded_in_slices_over_websocket(
    start_server: StartServer,
) -> None:
    server = await start_server(memory=True)
    client = await RawClient.connect(server.tcp_port)
    pushed = await client.ok("PUSH", queue="q", data=DATA)
    async with open_websocket_url(f"ws://127.0.0.1:{server.ws_port}/ws",
                                  max_message_size=64 << 20) as ws:
        for message, decode in (
                (json.dumps({"cmd": "GetJob", "id": pushed["id"], "reqId": 1}), json.loads),
                (CBOR.encode({"cmd": "GetJob", "id": pushed["id"], "reqId": 2}),
                 CBOR.decode)):
            async with steps_watched(skip_caller=False) as steps:
                await ws.send_message(message)
                raw = await ws.get_message()
            reply = decode(raw)
            assert reply["job"]["data"] == DATA
            # the message is sent whole: the WebSocket library copies its 8 MB (str to
            # UTF-8, then behind the frame's header), 10-25 ms here; before, 120-440 ms
            steps.check("GetJob over WebSocket", WS_STEP_CPU_MS)


async def test_a_long_listing_holding_a_job_of_many_small_maps_is_encoded_in_slices(
    start_server: StartServer,
) -> None:
    """A listing long enough to be encoded a slice of jobs at a time (more than 200
    jobs) with one job of 1M small maps among them: that job is not encoded in one
    call either, over TCP and REST."""
    server = await start_server(memory=True)
    client = await RawClient.connect(server.tcp_port)
    await client.ok("PUSHB", queue="q", jobs=[{"name": "s", "data": {"i": i}}
                                              for i in range(150)])
    heavy_id = (await client.ok("PUSH", queue="q", data=DATA))["id"]
    await client.ok("PUSHB", queue="q", jobs=[{"name": "s", "data": {"i": i}}
                                              for i in range(150, 300)])
    msg = {"cmd": "GetJobs", "queue": "q", "state": "waiting", "limit": 301, "reqId": "l"}
    async with steps_watched(skip_caller=False) as steps:
        payload = await raw_reply(client, msg)
    jobs = MSGPACK.decode(payload)["jobs"]
    assert len(jobs) == 301
    assert next(j for j in jobs if j["id"] == heavy_id)["data"] == DATA
    steps.check("GetJobs over TCP", STEP_CPU_MS)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.ws_port}",
                                 timeout=60.0) as http:
        async with steps_watched(skip_caller=False) as steps:
            got = await http.get("/queues/q/jobs/list", params={"state": "waiting",
                                                                "limit": 301})
        assert got.status_code == 200, got.text[:200]
        listed = json.loads(got.content)["jobs"]
        assert len(listed) == 301
        assert next(j for j in listed if j["id"] == heavy_id)["data"] == DATA
        steps.check("the listing over REST", STEP_CPU_MS)
