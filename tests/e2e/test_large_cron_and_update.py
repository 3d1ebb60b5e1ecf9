"""Job data of many small values that comes with a ``Cron`` (the template a schedule's
firings push) or an ``Update``, handled without one long step of the event loop, as a
``PUSH``'s is: the template measured once, while its frame is decoded (its bound rides
with the command, as a PUSH's does), and never again at a firing; its record and its
firings' jobs written from rows encoded a slice at a time; an ``Update``'s data bounded
by the decoder, and written ahead.

Steps are measured in the broker's thread CPU time per task (``LongestStep``), the
test's own task left out, with the collector tuned as ``trioqueue serve`` tunes it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import httpx
import pytest
import trio

from trioqueue.server.run import Server
from trioqueue.testing import RawClient
from trioqueue.testing.tasks import measured

from .large_data import answer, answered_and_freed, until_freed

StartServer = Callable[..., Awaitable[Server]]

#: A step of the broker's own is a slice (about 0.5 ms) or a small command; the rest is
#: the shared machine's noise.
STEP_CPU_MS = 15.0
#: 600,000 small maps: 4.8M characters of JSON, within the 10M limit.
MANY_MAPS = 600_000
#: A schedule's period: short, so that two firings come within the test.
EVERY_MS = 300

pytestmark = [pytest.mark.usefixtures("served_gc"), pytest.mark.engines("lmdb", "postgres")]
# Each test runs on one store by default, each store taking two of the four; the other
# store's run is under -m slow.
LMDB_FIRST = pytest.mark.engines("lmdb", pytest.param("postgres", marks=pytest.mark.slow))
POSTGRES_FIRST = pytest.mark.engines("postgres", pytest.param("lmdb", marks=pytest.mark.slow))


async def _jobs_waiting(client: RawClient, count: int) -> None:
    """Until the queue holds ``count`` jobs (the schedule's firings), with a deadline."""
    with trio.fail_after(30):
        while True:
            counts = (await client.ok("GetJobCounts", queue="q"))["counts"]
            if counts["waiting"] + counts.get("prioritized", 0) >= count:
                return
            await trio.sleep(0.02)


async def _two_firings_read_back(server: Server, client: RawClient,
                                 data: list[dict[str, int]]) -> None:
    async def fired() -> None:
        await _jobs_waiting(client, 2)
        await client.ok("CronDelete", name="big")
        await until_freed(server)

    await measured("two firings", fired, STEP_CPU_MS)
    pulled = await client.ok("PULLB", queue="q", count=5, timeout=0)
    assert len(pulled["jobs"]) >= 2
    for job in pulled["jobs"]:
        assert job["data"] == data


@LMDB_FIRST
async def test_a_cron_of_600k_small_maps_is_made_and_fired_without_a_long_step(
        start_server: StartServer) -> None:
    server = await start_server(cron_min_interval_ms=1)
    client = await RawClient.connect(server.tcp_port)
    data = [{"a": 1}] * MANY_MAPS
    frame = client.frame({"cmd": "Cron", "name": "big", "queue": "q", "data": data,
                          "repeatEvery": EVERY_MS, "preventOverlap": False, "reqId": "c"})

    reply = await measured("Cron", partial(answer, client, frame), STEP_CPU_MS)
    assert reply["ok"] is True, reply
    await _two_firings_read_back(server, client, data)
    await client.aclose()


@POSTGRES_FIRST
async def test_a_cron_over_rest_of_600k_small_maps_holds_no_long_step(
        start_server: StartServer) -> None:
    server = await start_server(cron_min_interval_ms=1)
    data = [{"a": 1}] * MANY_MAPS
    text = json.dumps({"name": "big", "queue": "q", "data": data, "repeatEvery": EVERY_MS,
                       "preventOverlap": False},
                      separators=(",", ":"))

    async def create() -> dict[str, Any]:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.ws_port}",
                                     timeout=60.0) as http:
            with trio.fail_after(60):
                answer = await http.post("/crons", content=text, headers={
                    "content-type": "application/json"})
        assert answer.status_code == 200, answer.text
        reply: dict[str, Any] = answer.json()
        return reply

    reply = await measured("POST /crons", create, STEP_CPU_MS)
    assert reply["ok"] is True, reply
    client = await RawClient.connect(server.tcp_port)
    await _two_firings_read_back(server, client, data)
    await client.aclose()


@LMDB_FIRST
async def test_a_cron_of_data_over_the_limit_is_refused_without_a_long_step(
        start_server: StartServer) -> None:
    server = await start_server(cron_min_interval_ms=1)
    client = await RawClient.connect(server.tcp_port)
    # 1.4M maps of 7 characters and a comma: 11.2M characters of JSON, over the 10M limit, in a
    # frame whose item counts alone do not say so
    frame = client.frame({"cmd": "Cron", "name": "big", "queue": "q",
                          "data": [{"a": 1}] * 1_400_000, "repeatEvery": EVERY_MS,
                          "reqId": "c"})

    reply = await measured("refused Cron", partial(answered_and_freed, server, client,
                                                   frame), STEP_CPU_MS)
    assert reply == {"ok": False, "error": "Job data too large (max 10MB)", "reqId": "c"}
    assert (await client.ok("CronList"))["crons"] == []
    await client.aclose()


@POSTGRES_FIRST
async def test_an_update_of_600k_small_maps_holds_no_long_step(
        start_server: StartServer) -> None:
    server = await start_server()
    client = await RawClient.connect(server.tcp_port)
    job_id = (await client.ok("PUSH", queue="q", data={"n": 1}))["id"]
    data = [{"a": 1}] * MANY_MAPS
    frame = client.frame({"cmd": "Update", "id": job_id, "data": data, "reqId": "u"})

    reply = await measured("Update", partial(answered_and_freed, server, client, frame,
                                             queue="q"), STEP_CPU_MS)
    assert reply["ok"] is True, reply
    got = await client.ok("GetJob", id=job_id)
    assert got["job"]["data"] == data
    await client.aclose()
