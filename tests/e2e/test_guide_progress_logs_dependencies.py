"""The guide page "Progress, Job Logs and Dependencies" (seed 004), paragraph by
paragraph, as a client of the broker sees it over TCP and WebSocket.

Where time matters the test runs under trio's MockClock (``autojump_clock``): the
broker's clock derives from trio's, so stall sweeps, wait deadlines and the retention
window pass in virtual time.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import trio
from trio_websocket import open_websocket_url

from trioqueue.server.run import Server
from trioqueue.testing import RawClient


async def next_event(client: RawClient, event_type: str) -> dict[str, Any]:
    while True:
        if client.events:
            event = client.events.pop(0)
        else:
            msg = await client.receive()
            if msg.get("type") != "event":
                continue
            event = msg["event"]
        if event["eventType"] == event_type:
            return dict(event)


def flow(parent: str, child: str, queue: str) -> list[dict[str, Any]]:
    return [
        {"id": parent, "queue": queue, "input": {
            "name": "parent", "data": {"__childrenIds": [child]}, "childrenIds": [child],
            "dependsOn": [child]}},
        {"id": child, "queue": queue, "input": {
            "name": "child", "data": {"__parentId": parent, "__parentQueue": queue},
            "parentId": parent}},
    ]


# --- "Progress, logs, dependencies" (the code block) ------------------------------


async def test_progress_and_logs_make_a_running_job_observable(client: RawClient) -> None:
    job_id = (await client.ok("PUSH", queue="g1", name="n", data={}))["id"]
    await client.ok("PULL", queue="g1")
    await client.ok("Progress", id=job_id, progress=75)
    await client.ok("AddLog", id=job_id, message="Processing step 3 completed")
    assert (await client.ok("GetProgress", id=job_id))["progress"] == 75
    logs = (await client.ok("GetLogs", id=job_id, start=0, end=100))["data"]
    assert logs["count"] == 1
    assert [(e["level"], e["message"]) for e in logs["logs"]] == [
        ("info", "Processing step 3 completed")]


async def test_dependency_links_show_how_a_job_relates_to_its_graph(
        client: RawClient) -> None:
    await client.ok("PUSHF", jobs=flow("parent-job-id", "child-job-id", "g2"))
    deps = (await client.ok("GetDependencies", id="parent-job-id"))["data"]
    assert deps["unprocessed"] == ["g2:child-job-id"] and deps["processed"] == {}
    child = (await client.ok("PULL", queue="g2"))["job"]
    await client.ok("ACK", id=child["id"], result={"rows": 10})
    values = (await client.ok("GetChildrenValues", id="parent-job-id"))["data"]["values"]
    assert values == {"g2:child-job-id": {"rows": 10}}
    processed = await client.ok("GetDependencies", id="parent-job-id", type="processed",
                                start=0, end=10)
    assert processed["data"] == {"processed": {"g2:child-job-id": {"rows": 10}}, "count": 1}


async def test_wait_job_until_finished_with_queue_events(connect: Callable[..., Any]
                                                        ) -> None:
    events: RawClient = await connect()
    worker: RawClient = await connect()
    await events.ok("SubscribeEvents", queue="g3")
    job_id = (await worker.ok("PUSH", queue="g3", name="n", data={}))["id"]
    wait = await worker.send("WaitJob", id=job_id, timeout=30_000)
    await worker.ok("PULL", queue="g3")
    await worker.ok("ACK", id=job_id, result="done")
    completed = await next_event(events, "completed")
    assert completed["jobId"] == job_id and completed["data"] == "done"
    reply = await worker.reply_to(wait)
    assert reply["completed"] is True and reply["result"] == "done"


# --- "getJobDependencies, getDependencies, and QueueEvents are available ..." ----------


async def test_dependency_queries_and_live_events_work_over_websocket(
        server: Server, client: RawClient) -> None:
    await client.ok("PUSHF", jobs=flow("ws-parent", "ws-child", "g4"))
    url = f"ws://127.0.0.1:{server.ws_port}/ws/queues/g4"
    async with open_websocket_url(url) as ws:
        await ws.send_message(json.dumps({"cmd": "GetDependencies", "id": "ws-parent",
                                          "reqId": "d"}))
        child = (await client.ok("PULL", queue="g4"))["job"]
        await client.ok("ACK", id=child["id"], result=1)
        seen_reply, seen_event = None, None
        with trio.fail_after(5):
            while seen_reply is None or seen_event is None:
                message = json.loads(await ws.get_message())
                if message.get("reqId") == "d":
                    seen_reply = message
                elif message.get("eventType") == "completed":  # /ws's raw events
                    seen_event = message
    assert seen_reply["data"]["unprocessed"] == ["g4:ws-child"]
    assert seen_event["jobId"] == "ws-child"


# --- "A wait settles on the job's final outcome, as in BullMQ ..." --------------------


async def test_a_retried_failure_does_not_end_the_wait(connect: Callable[..., Any]) -> None:
    events: RawClient = await connect()
    worker: RawClient = await connect()
    await events.ok("SubscribeEvents", queue="g5")
    job_id = (await worker.ok("PUSH", queue="g5", name="n", data={}, backoff=0))["id"]
    wait = await worker.send("WaitJob", id=job_id, timeout=30_000)
    await worker.ok("PULL", queue="g5")
    await worker.ok("FAIL", id=job_id, error="first attempt")
    failed = await next_event(events, "failed")
    assert failed["terminal"] is False and failed["error"] == "first attempt"
    await worker.ok("PULL", queue="g5")
    await worker.ok("ACK", id=job_id, result="second attempt")
    reply = await worker.reply_to(wait)
    assert reply["completed"] is True and reply["result"] == "second attempt"


async def test_the_wait_rejects_with_the_last_error_once_no_retry_is_left(
        client: RawClient) -> None:
    job_id = (await client.ok("PUSH", queue="g6", name="n", data={}, maxAttempts=2,
                              backoff=0))["id"]
    wait = await client.send("WaitJob", id=job_id, timeout=30_000)
    for error in ("first", "last"):
        await client.ok("PULL", queue="g6")
        await client.ok("FAIL", id=job_id, error=error)
    reply = await client.reply_to(wait)
    assert reply["completed"] is False and reply["error"] == "last"


async def test_a_job_the_stall_detector_buries_ends_the_wait(
        autojump_clock: trio.testing.MockClock, start_server: Callable[..., Any]) -> None:
    server = await start_server(memory=True)
    client = await RawClient.connect(server.tcp_port)
    await client.ok("SetStallConfig", queue="g7", config={
        "stallInterval": 1000, "gracePeriod": 0, "maxStalls": 1})
    job_id = (await client.ok("PUSH", queue="g7", name="n", data={}))["id"]
    await client.ok("PULL", queue="g7")  # and then the worker goes silent
    reply = await client.call("WaitJob", id=job_id, timeout=60_000)
    assert reply["completed"] is False
    assert reply["error"] == "Job stalled more than allowable limit"
    assert (await client.ok("GetState", id=job_id))["state"] == "failed"
    await client.aclose()


# --- "A job that no longer exists ... rejects the wait with Job <id> not found" -------


async def test_a_wait_on_a_removed_drained_or_obliterated_job_is_job_not_found(
        client: RawClient) -> None:
    removals = [("Cancel", "id"), ("Drain", "queue"), ("Obliterate", "queue")]
    for i, (cmd, key) in enumerate(removals):
        queue = f"g8-{i}"
        job_id = (await client.ok("PUSH", queue=queue, name="n", data={}))["id"]
        wait = await client.send("WaitJob", id=job_id, timeout=30_000)
        await client.ok(cmd, **{key: job_id if key == "id" else queue})
        reply = await client.reply_to(wait)
        assert reply == {"ok": False, "error": f"Job {job_id} not found", "reqId": wait}
        again = await client.call("WaitJob", id=job_id)
        assert again["error"] == f"Job {job_id} not found", cmd


# --- "Request/reply with removeOnComplete: true works ..." ----------------------------


async def test_removed_on_complete_results_are_kept_for_waits_for_60_seconds(
        autojump_clock: trio.testing.MockClock, start_server: Callable[..., Any]) -> None:
    server = await start_server(memory=True)
    client = await RawClient.connect(server.tcp_port)
    job_id = (await client.ok("PUSH", queue="g9", name="n", data={},
                              removeOnComplete=True))["id"]
    await client.ok("PULL", queue="g9")
    await client.ok("ACK", id=job_id, result="kept")
    late = await client.ok("WaitJob", id=job_id)  # the wait arrives after the completion
    assert late["completed"] is True and late["result"] == "kept"
    assert (await client.ok("GetState", id=job_id))["state"] == "unknown"
    assert "result" not in await client.ok("GetResult", id=job_id)
    await trio.sleep(61)
    assert (await client.call("WaitJob", id=job_id))["error"] == f"Job {job_id} not found"
    await client.aclose()


async def test_obliterating_the_queue_forgets_its_retained_results(client: RawClient
                                                                   ) -> None:
    job_id = (await client.ok("PUSH", queue="g9b", name="n", data={},
                              removeOnComplete=True))["id"]
    await client.ok("PULL", queue="g9b")
    await client.ok("ACK", id=job_id, result="kept")
    assert (await client.ok("WaitJob", id=job_id))["result"] == "kept"
    await client.ok("Obliterate", queue="g9b")
    assert (await client.call("WaitJob", id=job_id))["error"] == f"Job {job_id} not found"


async def test_reusing_the_custom_id_forgets_the_retained_result(client: RawClient) -> None:
    await client.ok("PUSH", queue="g10", name="n", data={}, jobId="rr",
                    removeOnComplete=True)
    await client.ok("PULL", queue="g10")
    await client.ok("ACK", id="rr", result="old")
    await client.ok("PUSH", queue="g10", name="n", data={}, jobId="rr")
    reply = await client.call("WaitJob", id="rr", timeout=0)
    assert reply == {"ok": True, "completed": False, "reqId": reply["reqId"]}


# --- "QueueEvents remains the best path for high-concurrency request/response" --------


async def test_one_subscription_reports_every_completion_beyond_the_hold_limit(
        connect: Callable[..., Any]) -> None:
    events: RawClient = await connect()
    worker: RawClient = await connect()
    await events.ok("SubscribeEvents", queue="g11")
    jobs = (await worker.ok("PUSHB", queue="g11", jobs=[
        {"name": "n", "data": i} for i in range(60)]))["ids"]
    pulled = (await worker.ok("PULLB", queue="g11", count=60))["jobs"]
    await worker.ok("ACKB", ids=[j["id"] for j in pulled], results=[j["data"] for j in pulled])
    results = {}
    while len(results) < 60:
        event = await next_event(events, "completed")
        results[event["jobId"]] = event["data"]
    assert results == {job_id: i for i, job_id in enumerate(jobs)}


# --- "each connection of the pool holds the broker's WaitJob for at most 40 waits" ----


async def test_waits_beyond_40_per_connection_are_answered_at_once(
        client: RawClient) -> None:
    ids = (await client.ok("PUSHB", queue="g12", jobs=[
        {"name": "n", "data": i} for i in range(41)]))["ids"]
    held = [await client.send("WaitJob", id=job_id, timeout=30_000) for job_id in ids[:40]]
    extra = await client.ok("WaitJob", id=ids[40], timeout=30_000)
    assert extra["completed"] is False  # not held: the client asks again later
    assert (await client.ok("Ping"))["ok"] is True  # other commands are not starved
    job = (await client.ok("PULL", queue="g12"))["job"]
    await client.ok("ACK", id=job["id"], result="first")
    reply = await client.reply_to(held[0])
    assert reply["completed"] is True and reply["result"] == "first"


# --- "Manual state transitions are BullMQ-compatible ..." -----------------------------

TRANSITIONS: list[tuple[str, dict[str, Any]]] = [
    ("ACK", {"result": {"success": True}}),  # moveJobToCompleted
    ("FAIL", {"error": "reason"}),  # moveJobToFailed
    ("MoveToWait", {}),  # moveJobToWait
    ("MoveToDelayed", {"delay": 60_000}),  # moveJobToDelayed
    ("MoveToWaitingChildren", {}),  # moveJobToWaitingChildren
]


async def test_a_locked_job_moves_only_with_its_current_token(client: RawClient) -> None:
    for i, (cmd, args) in enumerate(TRANSITIONS):
        queue = f"g13-{i}"
        child = (await client.ok("PUSH", queue=f"{queue}-c", name="c", data={}))["id"]
        job_id = (await client.ok("PUSH", queue=queue, name="n", data={}))["id"]
        pulled = await client.ok("PULL", queue=queue, owner="worker-1")
        await client.ok("UpdateParent", childId=child, parentId=job_id)
        missing = await client.call(cmd, id=job_id, **args)
        assert missing["error"] == f"Lock token required for job {job_id}", cmd
        wrong = await client.call(cmd, id=job_id, token="not-the-token", **args)
        assert wrong["error"] == f"Invalid or expired lock token for job {job_id}", cmd
        assert (await client.ok("GetState", id=job_id))["state"] == "active"
        await client.ok(cmd, id=job_id, token=pulled["token"], **args)
        assert (await client.ok("GetState", id=job_id))["state"] != "active", cmd


async def test_a_job_processed_without_a_lock_moves_without_a_token(
        client: RawClient) -> None:
    expected = ["completed", "failed", "waiting", "delayed", "waiting-children"]
    for i, (cmd, args) in enumerate(TRANSITIONS):
        queue = f"g14-{i}"
        child = (await client.ok("PUSH", queue=f"{queue}-c", name="c", data={}))["id"]
        job_id = (await client.ok("PUSH", queue=queue, name="n", data={},
                                  maxAttempts=1))["id"]
        await client.ok("PULL", queue=queue)  # no owner: no lock
        await client.ok("UpdateParent", childId=child, parentId=job_id)
        await client.ok(cmd, id=job_id, token="ignored-without-a-lock", **args)
        assert (await client.ok("GetState", id=job_id))["state"] == expected[i], cmd
