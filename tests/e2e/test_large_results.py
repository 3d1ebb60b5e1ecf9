"""Values of many small values that are not job data (an ``ACK``'s result, a progress)
stored, read back, freed and sent as events without one long step of the event loop:
made into their row or text a slice at a time before the command runs
(actors/large_values.py), decoded a slice at a time when read back
(actors/store_reads.py), taken apart a slice at a time when let go of
(core/large_values/graveyard.py), and the completed event that carries a large result encoded in
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
from trioqueue.core.large_values import graveyard as graveyard_module
from trioqueue.server.run import Server
from trioqueue.storage.keys import DB_AHEAD
from trioqueue.testing import RawClient
from trioqueue.testing.served import served
from trioqueue.testing.tasks import LongestStep, measured
from trioqueue.testing.webhook_receiver import WebhookReceiver

from .large_data import answer, answered_and_freed, until_freed
from .test_large_data_steps import STEP_CPU_MS

StartServer = Callable[..., Awaitable[Server]]

# STEP_CPU_MS (15 ms): a slice or a small command, the rest the machine's noise.
# Before: the ACK's step 150-520 ms, a GetResult's 160 ms, a Progress's 450 ms, a
# webhook's delivery 420 ms.
#: A WebSocket message is sent whole: the library copies its 8 MB of text twice (as
#: for any large reply, tests/e2e/test_replies_of_many_values.py); one received is
#: made UTF-8 in one call.
WS_SENDER_CPU_MS = 60.0
#: An ACK whose result a parent keeps: its commit writes the result's row and claims
#: the parent's copy, written ahead in pieces (storage/kept_outcomes.py): 4-6 ms here
#: (before: 10-19 ms, the copy joined and put in the commit; 110 ms before that).
DEP_STEP_CPU_MS = 15.0
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

    ack = partial(answered_and_freed, server, client, frame)
    assert (await measured("ACK", ack, STEP_CPU_MS))["ok"] is True
    got_frame = client.frame({"cmd": "GetResult", "id": job_id, "reqId": "r"})

    # read back from the store, decoded in slices; the reply encoded in slices; then
    # let go of by the queue's view and freed in slices
    get_result = partial(answered_and_freed, server, client, got_frame, queue="q")
    got = await measured("GetResult", get_result, STEP_CPU_MS)
    assert got["ok"] is True and got["result"] == MANY
    await client.aclose()


async def test_a_progress_of_a_million_small_maps_holds_no_long_step(
        start_server: StartServer) -> None:
    server, client, job_id, frame = await _with_many(start_server, "Progress", "progress")

    progress = partial(answered_and_freed, server, client, frame)
    # (before: 26-47 ms, the 8 MB message written inside the job's record)
    assert (await measured("Progress", progress, STEP_CPU_MS))["ok"] is True
    text = json.dumps(MANY, separators=(",", ":"))
    got = await measured("GetProgress", partial(client.ok, "GetProgress", id=job_id),
                         STEP_CPU_MS)
    # bunqueue's rule: an object's progress is 0, its compact JSON the message
    assert got["progress"] == 0 and got["message"] == text
    del got
    job = await measured("GetJob", partial(client.ok, "GetJob", id=job_id),
                         STEP_CPU_MS)
    assert job["job"]["progressMessage"] == text
    del job
    # the job's later writes (its finish) leave the message where it is
    ack = client.frame({"cmd": "ACK", "id": job_id, "result": 1, "reqId": "a"})
    assert (await measured("ACK", partial(answer, client, ack), STEP_CPU_MS))["ok"] is True
    finished = await measured("GetJob finished",
                              partial(client.ok, "GetJob", id=job_id), STEP_CPU_MS)
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
        assert (await answer(client, frame))["ok"] is True
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
        assert (await answer(client, frame))["ok"] is True
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
            await until_freed(server)
            return reply

        answered = await measured("REST ACK", rest_ack, STEP_CPU_MS)
        assert answered.status_code == 200, answered.text[:200]
    message = json.dumps({"cmd": "ACK", "id": second, "result": MANY, "reqId": 1})
    async with open_websocket_url(f"ws://127.0.0.1:{server.ws_port}/ws",
                                  max_message_size=64 << 20) as ws:

        async def ws_ack() -> str | bytes:
            await ws.send_message(message)
            with trio.fail_after(60):
                reply = await ws.get_message()
            await until_freed(server)
            return reply

        # (the message arrives whole: its text made UTF-8 in one call, about 20 ms
        # for 8 MB, before its sliced decoding; docs/guarantees.md, "Not bounded yet")
        assert json.loads(await measured("WebSocket ACK", ws_ack,
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
                    assert (await answer(client, frame))["ok"] is True
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

    ackb = partial(answered_and_freed, server, client, frame)
    assert (await measured("ACKB", ackb, STEP_CPU_MS))["ok"] is True
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
        reply = await answer(client, frame)
        with trio.fail_after(60):
            waited = await waiter.reply_to(wait)
        await until_freed(server)
        return {"ack": reply, "waited": waited}

    replies = await measured("ACK with a WaitJob and a parent", ack, DEP_STEP_CPU_MS)
    assert replies["ack"]["ok"] is True
    assert replies["waited"]["completed"] is True and replies["waited"]["result"] == MANY

    async def children() -> dict[str, Any]:
        # read back decoded in slices, the reply encoded in slices, then let go of by
        # the parent queue's view and freed in slices
        reply = await client.ok("GetChildrenValues", id=parent)
        await client.ok("GetJobCounts", queue="p")
        await until_freed(server)
        return reply

    values = (await measured("GetChildrenValues", children,
                             STEP_CPU_MS))["data"]["values"]
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
    ack = partial(answer, client, frame)
    assert (await measured("ACK removed on complete", ack, STEP_CPU_MS))["ok"] is True
    wait_frame = client.frame({"cmd": "WaitJob", "id": job_id, "reqId": "w"})
    late = await measured("late WaitJob", partial(answer, client, wait_frame),
                          STEP_CPU_MS)
    assert late["completed"] is True and late["result"] == MANY
    del late

    async def obliterate() -> None:
        await client.ok("Obliterate", queue="q")
        await until_freed(server)

    await measured("Obliterate", obliterate, STEP_CPU_MS)
    assert (await client.call("WaitJob", id=job_id))["error"] == f"Job {job_id} not found"
    await client.aclose()


async def test_a_retained_result_dropped_after_the_graveyard_gave_up_is_freed_in_slices(
        start_server: StartServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A removed-on-complete job's result kept longer than the graveyard tries (its
    HELD_TRIES, lowered here) is handed back to it when dropped, not freed in one call;
    and a value buried twice is still taken apart."""
    monkeypatch.setattr(graveyard_module, "HELD_TRIES", 1)
    server = await start_server(removed_result_retention_s=3600.0)
    client = await RawClient.connect(server.tcp_port)
    job_id = (await client.ok("PUSH", queue="q", data={"n": 1},
                              removeOnComplete=True))["id"]
    await client.ok("PULL", queue="q", timeout=0)
    frame = client.frame({"cmd": "ACK", "id": job_id, "result": MANY, "reqId": "a"})
    assert (await answer(client, frame))["ok"] is True
    await until_freed(server)  # (it gave up: the retained result still holds it)
    wait_frame = client.frame({"cmd": "WaitJob", "id": job_id, "reqId": "w"})
    late = await answer(client, wait_frame)
    assert late["completed"] is True and late["result"] == MANY
    del late
    graveyard = server.broker.dismantler.graveyard
    freed = graveyard.freed

    async def obliterate() -> None:
        await client.ok("Obliterate", queue="q")
        await until_freed(server)

    await measured("Obliterate after the graveyard gave up", obliterate, STEP_CPU_MS)
    assert graveyard.freed > freed
    await client.aclose()


async def test_an_unmade_sse_frame_evicted_from_the_replay_ring_is_freed_in_slices(
        start_server: StartServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A completed event of a large result no SSE client took (its stream watches
    another queue) stays in the replay ring, unmade; evicted by later events after the
    graveyard stopped trying, its values are handed back to the graveyard."""
    monkeypatch.setattr(graveyard_module, "HELD_TRIES", 1)
    server = await start_server(sse_replay_events=4)
    client = await RawClient.connect(server.tcp_port)
    job_id = await _active_job(client)
    frame = client.frame({"cmd": "ACK", "id": job_id, "result": MANY, "reqId": "a"})
    base = f"127.0.0.1:{server.ws_port}"
    async with httpx.AsyncClient(timeout=60.0) as http, \
            http.stream("GET", f"http://{base}/events/queues/other") as sse:
        lines = sse.aiter_lines()
        with trio.fail_after(10):
            async for line in lines:
                if '"connected"' in line:
                    break
        assert (await answer(client, frame))["ok"] is True
        await until_freed(server)  # (it gave up: the ring's frame still holds the result)
        graveyard = server.broker.dismantler.graveyard
        freed = graveyard.freed

        async def evict() -> None:
            for n in range(4):  # (each push's events go in the ring)
                await client.ok("PUSH", queue="q", data={"n": n})
            await client.ok("GetJobCounts", queue="q")
            await until_freed(server)

        await measured("events evicting an unmade frame", evict, STEP_CPU_MS)
        assert graveyard.freed > freed
    assert (await client.ok("GetResult", id=job_id))["result"] == MANY
    await client.aclose()


async def test_a_large_result_kept_for_a_parent_outlives_its_child_and_goes_with_the_parent(
        configure: Callable[..., Config]) -> None:
    """The parent's copy of its child's result, written ahead, is claimed by the ACK:
    it survives a restart and the child's removal, and goes with the parent."""
    config = configure()
    async with served(config) as client:
        child = (await client.ok("PUSH", queue="q", data={"n": 1},
                                 removeOnComplete=True))["id"]
        parent = (await client.ok("PUSH", queue="p", data={}, dependsOn=[child]))["id"]
        assert (await client.ok("PULL", queue="q", timeout=0))["job"]["id"] == child
        frame = client.frame({"cmd": "ACK", "id": child, "result": MANY, "reqId": "a"})
        assert (await answer(client, frame))["ok"] is True
    if not config.storage_url:
        assert _ahead_rows(config) > 0  # (the parent's copy, claimed)
    async with served(config) as client:
        values = (await client.ok("GetChildrenValues", id=parent))["data"]["values"]
        assert values == {child: MANY}  # (by its bare id: the child is gone)
        assert (await client.ok("PULL", queue="p", timeout=0))["job"]["id"] == parent
        await client.ok("ACK", id=parent, result=1)
        await client.ok("Obliterate", queue="p")
        assert (await client.call("GetJob", id=parent)).get("job") is None
    if not config.storage_url:
        assert _ahead_rows(config) == 0  # (deleted with the parent)
