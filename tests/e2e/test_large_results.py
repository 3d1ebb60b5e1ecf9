"""Values of many small values that are not job data (an ``ACK``'s result, a progress)
stored, read back, freed and sent as events without one long step of the event loop:
made into their row or text a slice at a time before the command runs
(actors/large_values.py), decoded a slice at a time when read back
(actors/store_reads.py), taken apart a slice at a time when let go of
(core/graveyard.py), and the completed event that carries a large result encoded in
slices for WebSocket and SSE subscribers and for a webhook's body.

Over real sockets to an in-process broker; steps measured in the broker's thread CPU
time per task, leaving out the test's own task (it encodes the frames and decodes the
replies in the same loop), with the garbage collector tuned as ``trioqueue serve``
tunes it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Final

import httpx
import lmdb
import pytest
import trio
from trio_websocket import open_websocket_url

from trioqueue.config import Config
from trioqueue.server import Server
from trioqueue.storage.keys import DB_AHEAD
from trioqueue.testing import RawClient
from trioqueue.testing.served import served
from trioqueue.testing.tasks import LongestStep
from trioqueue.testing.webhook_receiver import WebhookReceiver

from .test_large_data_steps import STEP_CPU_MS, _answer, _freed, _measured

StartServer = Callable[..., Awaitable[Server]]

# STEP_CPU_MS (15 ms): a slice or a small command, the rest the machine's noise.
# Before: the ACK's step 150-520 ms, a GetResult's 160 ms, a Progress's 450 ms, a
# webhook's delivery 420 ms.
#: A WebSocket message is sent whole: the library copies its 8 MB of text twice (as
#: for any large reply, tests/e2e/test_replies_of_many_values.py); one received is
#: made UTF-8 in one call.
WS_SENDER_CPU_MS = 60.0
#: An ACK whose result a parent keeps: its commit writes the result's row and the
#: parent's outcome row, a copy of the same 4 MB (made from the row encoded ahead, one
#: join), both in the ACK's step: about 10-12 ms here, up to 17 on the loaded host
#: (before: 110 ms, the outcome encoded in one call).
DEP_STEP_CPU_MS = 25.0
#: A million small maps: 8M characters of JSON (4 MB of msgpack).
MANY = [{"a": 1}] * 1_000_000


pytestmark = pytest.mark.usefixtures("served_gc")  # (tests/conftest.py)


#: Tasks of the test's own (its readers, the webhook's receiver): their decoding of
#: what they receive is not the broker's.
_TEST_TASKS: Final = ("tests.", "trioqueue.testing.")


class StepsByTask(LongestStep):
    """The longest step of each task name (the test's own left out)."""

    def __init__(self, skip: trio.lowlevel.Task | None = None) -> None:
        super().__init__(skip)
        self.by_task: dict[str, float] = {}

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if self._cpu is not None and task is not self.skip and not task.name.startswith(
                _TEST_TASKS):
            cpu_ms = (time.thread_time() - self._cpu) * 1000
            if cpu_ms > self.by_task.get(task.name, 0.0):
                self.by_task[task.name] = cpu_ms
        super().after_task_step(task)

    def check_tasks(self, what: str, bound_ms: float, senders_ms: float) -> None:
        for name, cpu_ms in self.by_task.items():
            bound = senders_ms if name.endswith("run_sender") else bound_ms
            assert cpu_ms < bound, f"{what}: {name} took {cpu_ms:.0f} ms of CPU in one step"


async def _answered_and_freed(server: Server, client: RawClient, frame: bytes
                              ) -> dict[str, Any]:
    """The reply to ``frame``, once the broker has taken apart what the command let
    go of (the value the request held)."""
    reply = await _answer(client, frame)
    await _freed(server)
    return reply


async def _active_job(client: RawClient) -> str:
    await client.ok("PUSH", queue="q", data={"n": 1})
    pulled = await client.ok("PULL", queue="q", timeout=0)
    job_id: str = pulled["job"]["id"]
    return job_id


async def _with_many(start_server: StartServer, cmd: str, field: str
                     ) -> tuple[Server, RawClient, str, bytes]:
    """A broker, a client holding an active job, and the frame of ``cmd`` for that job
    with ``field`` holding :data:`MANY`."""
    server = await start_server()
    client = await RawClient.connect(server.tcp_port)
    job_id = await _active_job(client)
    return server, client, job_id, client.frame(
        {"cmd": cmd, "id": job_id, field: MANY, "reqId": cmd})


async def test_an_ack_result_of_a_million_small_maps_holds_no_long_step(
        start_server: StartServer) -> None:
    server, client, job_id, frame = await _with_many(start_server, "ACK", "result")

    ack = partial(_answered_and_freed, server, client, frame)
    assert (await _measured("ACK", ack))["ok"] is True
    got_frame = client.frame({"cmd": "GetResult", "id": job_id, "reqId": "r"})

    async def get_result() -> dict[str, Any]:
        # read back from the store, decoded in slices; the reply encoded in slices;
        # then let go of by the queue's view and freed in slices
        reply = await _answer(client, got_frame)
        await client.ok("GetJobCounts", queue="q")
        await _freed(server)
        return reply

    got = await _measured("GetResult", get_result)
    assert got["ok"] is True and got["result"] == MANY
    await client.aclose()


async def test_a_progress_of_a_million_small_maps_holds_no_long_step(
        start_server: StartServer) -> None:
    server, client, job_id, frame = await _with_many(start_server, "Progress", "progress")

    progress = partial(_answered_and_freed, server, client, frame)
    # (before: 26-47 ms, the 8 MB message written inside the job's record)
    assert (await _measured("Progress", progress))["ok"] is True
    text = json.dumps(MANY, separators=(",", ":"))
    got = await _measured("GetProgress", partial(client.ok, "GetProgress", id=job_id))
    # bunqueue's rule: an object's progress is 0, its compact JSON the message
    assert got["progress"] == 0 and got["message"] == text
    del got
    job = await _measured("GetJob", partial(client.ok, "GetJob", id=job_id))
    assert job["job"]["progressMessage"] == text
    del job
    # the job's later writes (its finish) leave the message where it is
    ack = client.frame({"cmd": "ACK", "id": job_id, "result": 1, "reqId": "a"})
    assert (await _measured("ACK", partial(_answer, client, ack)))["ok"] is True
    finished = await _measured("GetJob finished",
                               partial(client.ok, "GetJob", id=job_id))
    assert finished["job"]["progressMessage"] == text
    await client.aclose()


def _ahead_rows(config: Config) -> int:
    """The pieces written ahead that an LMDB store holds (the broker stopped)."""
    env = lmdb.open(config.data_dir, readonly=True, lock=False, max_dbs=32)
    try:
        with env.begin() as txn:
            return int(txn.stat(env.open_db(DB_AHEAD, txn=txn, create=False))["entries"])
    finally:
        env.close()


async def test_a_large_progress_is_kept_across_restarts_replaced_and_deleted_with_its_job(
        configure: Callable[..., Config]) -> None:
    config = configure()
    text = json.dumps(MANY, separators=(",", ":"))
    async with served(config) as client:
        job_id = await _active_job(client)
        frame = client.frame({"cmd": "Progress", "id": job_id, "progress": MANY,
                              "reqId": "p"})
        assert (await _answer(client, frame))["ok"] is True
    async with served(config) as client:
        # (active at the stop: charged and queued again, its progress kept)
        assert (await client.ok("GetJob", id=job_id))["job"]["progressMessage"] == text
        assert (await client.ok("PULL", queue="q", timeout=0))["job"]["id"] == job_id
        await client.ok("Progress", id=job_id, progress="half way")
    if not config.storage_url:
        assert _ahead_rows(config) == 0  # (replaced: the large message's rows went)
    async with served(config) as client:
        job = (await client.ok("GetJob", id=job_id))["job"]
        assert job["progressMessage"] == "half way"
        assert (await client.ok("PULL", queue="q", timeout=0))["job"]["id"] == job_id
        frame = client.frame({"cmd": "Progress", "id": job_id, "progress": MANY,
                              "reqId": "p"})
        assert (await _answer(client, frame))["ok"] is True
        await client.ok("ACK", id=job_id, result=1)
    if not config.storage_url:
        assert _ahead_rows(config) > 0
    async with served(config) as client:
        assert (await client.ok("GetJob", id=job_id))["job"]["progressMessage"] == text
        await client.ok("Obliterate", queue="q")
        assert (await client.call("GetJob", id=job_id)).get("job") is None
    if not config.storage_url:
        assert _ahead_rows(config) == 0  # (deleted with its job)


async def test_an_ack_result_over_rest_and_websocket_holds_no_long_step(
        start_server: StartServer) -> None:
    server = await start_server(ws_max_message_bytes=64 << 20)
    client = await RawClient.connect(server.tcp_port)
    body = json.dumps({"result": MANY})
    first, second = await _active_job(client), await _active_job(client)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.ws_port}",
                                 timeout=60.0) as http:

        async def rest_ack() -> httpx.Response:
            reply = await http.post(f"/jobs/{first}/ack", content=body,
                                    headers={"content-type": "application/json"})
            await _freed(server)
            return reply

        answered = await _measured("REST ACK", rest_ack)
        assert answered.status_code == 200, answered.text[:200]
    message = json.dumps({"cmd": "ACK", "id": second, "result": MANY, "reqId": 1})
    async with open_websocket_url(f"ws://127.0.0.1:{server.ws_port}/ws",
                                  max_message_size=64 << 20) as ws:

        async def ws_ack() -> str | bytes:
            await ws.send_message(message)
            with trio.fail_after(60):
                reply = await ws.get_message()
            await _freed(server)
            return reply

        # (the message arrives whole: its text made UTF-8 in one call, about 20 ms
        # for 8 MB, before its sliced decoding; docs/guarantees.md, "Not bounded yet")
        assert json.loads(await _measured("WebSocket ACK", ws_ack,
                                          WS_SENDER_CPU_MS))["ok"] is True
    for job_id in (first, second):
        assert (await client.ok("GetResult", id=job_id))["result"] == MANY
    await client.aclose()


async def _sse_completed(response: httpx.Response, ready: trio.Event) -> Any:
    """The ``data`` of the first ``job:completed`` frame of an SSE stream."""
    lines = response.aiter_lines()
    named = False
    async for line in lines:
        if line.startswith("data: ") and '"connected"' in line:
            ready.set()
        elif line == "event: job:completed":
            named = True
        elif named and line.startswith("data: "):
            return json.loads(line[len("data: "):])
    raise EOFError


async def _tcp_completed(subscriber: RawClient) -> dict[str, Any]:
    """The first ``completed`` event a ``SubscribeEvents`` connection receives."""
    while True:
        frame = await subscriber.receive()
        if frame.get("type") == "event" and frame["event"]["eventType"] == "completed":
            event: dict[str, Any] = frame["event"]
            return event


async def test_a_large_completed_event_reaches_subscribers_and_a_webhook_in_slices(
        start_server: StartServer, nursery: trio.Nursery) -> None:
    """Before: the SSE frame was encoded in the queue's step (about 440 ms) and the
    webhook's body by one json.dumps (420 ms). The SSE bound is the default 1 MiB: a
    single 8 MB frame reaches a client that reads."""
    server = await start_server(webhook_allow_private=True, webhook_retry_delay_ms=10,
                                ws_max_message_bytes=64 << 20)
    receiver = await nursery.start(WebhookReceiver().run)
    client = await RawClient.connect(server.tcp_port)
    await client.ok("AddWebhook", url=receiver.url, events=["job.completed"], queue="q",
                    secret="s3cret")
    subscriber = await RawClient.connect(server.tcp_port)  # as QueueEvents subscribes
    await subscriber.ok("SubscribeEvents", queue="q")
    job_id = await _active_job(client)
    frame = client.frame({"cmd": "ACK", "id": job_id, "result": MANY, "reqId": "a"})
    base = f"127.0.0.1:{server.ws_port}"
    async with open_websocket_url(f"ws://{base}/ws", max_message_size=64 << 20) as ws, \
            httpx.AsyncClient(timeout=60.0) as http, \
            http.stream("GET", f"http://{base}/events") as sse:
        await ws.send_message(json.dumps({"cmd": "Subscribe", "events": ["job:completed"]}))
        assert json.loads(await ws.get_message())["ok"] is True
        ready = trio.Event()
        sse_data: list[Any] = []

        async def read_sse() -> None:
            sse_data.append(await _sse_completed(sse, ready))

        async with trio.open_nursery() as readers:
            readers.start_soon(read_sse)
            with trio.fail_after(10):
                await ready.wait()
            steps = StepsByTask(skip=trio.lowlevel.current_task())
            trio.lowlevel.add_instrument(steps)
            try:
                with trio.fail_after(60):
                    assert (await _answer(client, frame))["ok"] is True
                    event = json.loads(await ws.get_message())
                    hooked = await receiver.wait_for(1, 60)
                    tcp_event = await _tcp_completed(subscriber)
            finally:
                trio.lowlevel.remove_instrument(steps)
        # (the readers' tasks are the test's: their decoding is not the broker's)
    steps.check_tasks("completed event", STEP_CPU_MS, WS_SENDER_CPU_MS)
    assert event["event"] == "job:completed" and event["data"]["jobId"] == job_id
    assert event["data"]["data"] == MANY
    assert sse_data[0]["jobId"] == job_id and sse_data[0]["data"] == MANY
    payload = json.loads(hooked[0].body)
    assert payload["event"] == "job.completed" and payload["jobId"] == job_id
    assert payload["data"] == MANY
    assert hooked[0].headers["x-webhook-signature"] == hmac.new(
        b"s3cret", hooked[0].body, hashlib.sha256).hexdigest()
    assert hooked[0].headers["content-length"] == str(len(hooked[0].body))
    assert tcp_event["jobId"] == job_id and tcp_event["data"] == MANY
    await subscriber.aclose()
    await client.aclose()


async def test_an_ackb_with_a_large_result_holds_no_long_step(
        start_server: StartServer) -> None:
    server = await start_server()
    client = await RawClient.connect(server.tcp_port)
    ids = [await _active_job(client) for _ in range(3)]
    results = ["small", MANY, {"n": 3}]
    frame = client.frame({"cmd": "ACKB", "ids": ids, "results": results, "reqId": "b"})

    ackb = partial(_answered_and_freed, server, client, frame)
    assert (await _measured("ACKB", ackb))["ok"] is True
    for job_id, result in zip(ids, results, strict=True):
        assert (await client.ok("GetResult", id=job_id))["result"] == result
    await client.aclose()


async def test_a_large_result_reaches_a_waiting_client_and_a_parent_in_slices(
        start_server: StartServer) -> None:
    """A WaitJob held on the job gets the result, and the job's parent keeps it as its
    child's value (GetChildrenValues), with no long step of the broker."""
    server = await start_server()
    client = await RawClient.connect(server.tcp_port)
    waiter = await RawClient.connect(server.tcp_port)
    child = (await client.ok("PUSH", queue="q", data={"n": 1}))["id"]
    parent = (await client.ok("PUSH", queue="p", data={}, dependsOn=[child]))["id"]
    wait = await waiter.send("WaitJob", id=child, timeout=60_000)
    await client.ok("GetJobCounts", queue="q")  # (the wait is held by now)
    assert (await client.ok("PULL", queue="q", timeout=0))["job"]["id"] == child
    frame = client.frame({"cmd": "ACK", "id": child, "result": MANY, "reqId": "a"})

    async def ack() -> dict[str, Any]:
        reply = await _answer(client, frame)
        with trio.fail_after(60):
            waited = await waiter.reply_to(wait)
        await _freed(server)
        return {"ack": reply, "waited": waited}

    replies = await _measured("ACK with a WaitJob and a parent", ack, DEP_STEP_CPU_MS)
    assert replies["ack"]["ok"] is True
    assert replies["waited"]["completed"] is True and replies["waited"]["result"] == MANY

    async def children() -> dict[str, Any]:
        # read back decoded in slices, the reply encoded in slices, then let go of by
        # the parent queue's view and freed in slices
        reply = await client.ok("GetChildrenValues", id=parent)
        await client.ok("GetJobCounts", queue="p")
        await _freed(server)
        return reply

    values = (await _measured("GetChildrenValues", children))["data"]["values"]
    assert values == {f"q:{child}": MANY}
    await waiter.aclose()
    await client.aclose()


async def test_a_large_result_of_a_job_removed_on_complete_holds_no_long_step(
        start_server: StartServer) -> None:
    """Its result is kept a while for a late WaitJob, then let go of to be freed in
    slices (here by obliterating its queue)."""
    server = await start_server()
    client = await RawClient.connect(server.tcp_port)
    job_id = (await client.ok("PUSH", queue="q", data={"n": 1},
                              removeOnComplete=True))["id"]
    await client.ok("PULL", queue="q", timeout=0)
    frame = client.frame({"cmd": "ACK", "id": job_id, "result": MANY, "reqId": "a"})
    ack = partial(_answer, client, frame)
    assert (await _measured("ACK removed on complete", ack))["ok"] is True
    wait_frame = client.frame({"cmd": "WaitJob", "id": job_id, "reqId": "w"})
    late = await _measured("late WaitJob", partial(_answer, client, wait_frame))
    assert late["completed"] is True and late["result"] == MANY
    del late

    async def obliterate() -> None:
        await client.ok("Obliterate", queue="q")
        await _freed(server)

    await _measured("Obliterate", obliterate)
    assert (await client.call("WaitJob", id=job_id))["error"] == f"Job {job_id} not found"
    await client.aclose()
