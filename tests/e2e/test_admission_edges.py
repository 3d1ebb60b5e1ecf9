"""Every way in admits by the same rule, and a large JSON text holds the loop no longer
than a large frame (issue 41, items 3 and 6).

- A ``Cron`` stores its job template, data and all, in a broker record: it is admitted
  by its size as a push is, over TCP and REST alike (a 3 MB template into a 2 MiB store
  took the store past its maximum and stopped the broker).
- A REST body or a WebSocket text message of megabytes of small values is decoded in
  slices: no step of the event loop spends long on it (measured in CPU time, which the
  other load of the machine does not inflate).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import open_websocket_url

from trioqueue.config import MIB
from trioqueue.core.errors import STORAGE_FULL
from trioqueue.server.run import Server
from trioqueue.testing import RawClient
from trioqueue.testing.tasks import LongestStep

StartServer = Callable[..., Any]
KIB = 1024


async def fill(client: RawClient, queue: str, pad: str) -> int:
    """PUSHes of ``pad`` until one is refused for a full store: how many were taken."""
    for n in range(10_000):
        reply = await client.call("PUSH", queue=queue, name="j", data={"pad": pad})
        if not reply["ok"]:
            assert reply["error"] == STORAGE_FULL, reply
            return n
    raise AssertionError("the store never filled up")


@pytest.mark.engines("lmdb")
async def test_a_cron_template_the_store_cannot_hold_is_refused_not_a_crash(
        start_server: StartServer) -> None:
    server: Server = await start_server(store_max_bytes=2 * MIB,
                                        store_reserve_bytes=512 * KIB)
    assert server.tcp_port is not None
    client = await RawClient.connect(server.tcp_port)
    await fill(client, "q", "x" * 200)
    big = "y" * (3 * MIB)  # within the job data limit, not within this store
    reply = await client.call("Cron", name="c", queue="cq", data=big, repeatEvery=60_000)
    assert reply["ok"] is False and reply["error"] == STORAGE_FULL, reply
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.ws_port}",
                                 timeout=30.0) as http:
        answer = await http.post("/crons", json={"name": "c2", "queue": "cq", "data": big,
                                                 "repeatEvery": 60_000})
        assert answer.status_code == 400, answer.text
        assert answer.json() == {"ok": False, "error": STORAGE_FULL}
    assert not server.broker.writer.failed
    assert (await client.ok("CronList"))["crons"] == []
    await client.ok("Ping")


@pytest.mark.engines("lmdb")
async def test_a_cron_firing_is_admitted_by_the_size_of_its_data(
        start_server: StartServer, caplog: pytest.LogCaptureFixture) -> None:
    """A firing writes its job and the schedule's record, both holding the template's
    data: admitted as a push of that data is (it was admitted as an empty push)."""
    server: Server = await start_server(store_max_bytes=2 * MIB,
                                        store_reserve_bytes=512 * KIB)
    assert server.tcp_port is not None
    client = await RawClient.connect(server.tcp_port)
    pad = "d" * (100 * KIB)
    # The schedule's first slot is 3 s away: time to fill the store before it.
    started = time.monotonic()
    await client.ok("Cron", name="c", queue="cq", data={"pad": pad}, repeatEvery=3_000)
    await fill(client, "q", pad)  # a push of the template's data no longer fits...
    small = await client.call("PUSH", queue="q", name="j", data={})
    assert small["ok"], small  # ...while an empty one still does
    assert time.monotonic() - started < 2.5, "the store filled too slowly to test this"
    assert (await client.ok("CronGet", name="c"))["cron"]["executions"] == 0
    with trio.fail_after(10):  # the first slot comes: the firing is pushed or refused
        while not any("cron c: a firing was refused" in r.message for r in caplog.records):
            if (await client.ok("GetJobCounts", queue="cq"))["counts"]["waiting"]:
                break
            await trio.sleep(0.05)
    counts = (await client.ok("GetJobCounts", queue="cq"))["counts"]
    assert counts["waiting"] == 0, "a firing too large for the store was admitted"
    assert (await client.ok("CronGet", name="c"))["cron"]["executions"] == 0
    assert not server.broker.writer.failed


# Three million small values: one json call over them takes a few hundred ms of CPU.
MANY_VALUES = [1] * 3_000_000
STEP_CPU_MS = 40.0  # a slice is about 0.5 ms; the rest is the machine's noise


async def test_a_large_rest_body_of_small_values_is_decoded_in_slices(
        start_server: StartServer) -> None:
    server: Server = await start_server(memory=True)
    # Only the data and name of a push are forwarded: the command itself is cheap.
    body = json.dumps({"name": "j", "data": {}, "ignored": MANY_VALUES}).encode()
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.ws_port}",
                                 timeout=60.0) as http:
        steps = LongestStep()
        trio.lowlevel.add_instrument(steps)
        try:
            reply = await http.post("/queues/q/jobs", content=body,
                                    headers={"content-type": "application/json"})
        finally:
            trio.lowlevel.remove_instrument(steps)
        assert reply.status_code == 200, reply.text
        bad = await http.post("/queues/q/jobs", content=body[:-1],
                              headers={"content-type": "application/json"})
        assert (bad.status_code, bad.json()["error"]) == (400, "Invalid JSON body")
    steps.check("the large JSON text", STEP_CPU_MS)


async def test_a_large_websocket_text_message_is_decoded_in_slices(
        start_server: StartServer) -> None:
    server: Server = await start_server(memory=True, ws_max_message_bytes=16 * MIB)
    message = json.dumps({"cmd": "PUSH", "reqId": "big", "queue": "q", "name": "j",
                          "data": {}, "ignored": MANY_VALUES})
    async with open_websocket_url(f"ws://127.0.0.1:{server.ws_port}/ws",
                                  max_message_size=16 * MIB) as ws:
        steps = LongestStep()
        trio.lowlevel.add_instrument(steps)
        try:
            await ws.send_message(message)
            reply = json.loads(await ws.get_message())
        finally:
            trio.lowlevel.remove_instrument(steps)
        assert reply["ok"] is True and reply["reqId"] == "big", reply
    steps.check("the large JSON text", STEP_CPU_MS)


async def test_job_data_over_the_limit_is_refused_alike_over_rest_and_websocket(
        start_server: StartServer) -> None:
    """The protocol's data limit (10M characters of JSON) holds whatever carries the
    push: a REST push and a REST bulk push of 11 MB, and the same over a WebSocket JSON
    message, get the TCP refusal's text and create nothing; 40 MB is refused too."""
    server: Server = await start_server(memory=True, ws_max_message_bytes=48 * MIB)
    too_large = "Job data too large (max 10MB)"
    big = "d" * (11 * MIB)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.ws_port}",
                                 timeout=60.0) as http:
        for data in (big, "d" * (40 * MIB)):
            answer = await http.post("/queues/rest/jobs", json={"name": "j", "data": data})
            assert answer.status_code == 400, answer.text
            assert answer.json()["error"] == too_large
        answer = await http.post("/queues/rest/jobs/bulk", json={"jobs": [
            {"name": "ok", "data": 1}, {"name": "big", "data": big}]})
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"] == "jobs[1]: " + too_large
    message = json.dumps({"cmd": "PUSH", "reqId": "w", "queue": "ws", "name": "j",
                          "data": big})
    async with open_websocket_url(f"ws://127.0.0.1:{server.ws_port}/ws",
                                  max_message_size=48 * MIB) as ws:
        await ws.send_message(message)
        reply = json.loads(await ws.get_message())
    assert reply == {"ok": False, "error": too_large, "reqId": "w"}, reply
    assert server.tcp_port is not None
    client = await RawClient.connect(server.tcp_port)
    for queue in ("rest", "ws"):
        assert (await client.ok("Count", queue=queue))["count"] == 0
