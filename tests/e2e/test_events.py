"""TCP event subscriptions: {type: "event", event} frames, no reqId, one queue each."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from trioqueue.testing import RawClient


async def next_event(client: RawClient) -> dict[str, Any]:
    with trio.fail_after(5):
        while True:
            if client.events:
                return client.events.pop(0)
            msg = await client.receive()
            if msg.get("type") == "event":
                return msg["event"]


async def test_subscriber_sees_the_lifecycle_of_its_queue(connect: Callable[..., Any]) -> None:
    listener: RawClient = await connect()
    worker: RawClient = await connect()
    assert (await listener.ok("SubscribeEvents", queue="ev")) == {"ok": True,
                                                                  "reqId": "r1"}
    await worker.ok("PUSH", queue="other", name="n", data=0)  # not this queue
    pushed = await worker.ok("PUSH", queue="ev", name="n", data=1, maxAttempts=2, backoff=0)
    await worker.ok("PULL", queue="ev")
    await worker.ok("FAIL", id=pushed["id"], error="boom")
    await worker.ok("PULL", queue="ev")
    await worker.ok("Progress", id=pushed["id"], progress=50)
    await worker.ok("ACK", id=pushed["id"], result={"n": 1})
    seen = []
    for _ in range(9):
        event = await next_event(listener)
        # drained is about the queue (its last ready job was just taken), not a job
        job_id = "" if event["eventType"] == "drained" else pushed["id"]
        assert event["queue"] == "ev" and event["jobId"] == job_id
        assert "reqId" not in event and isinstance(event["timestamp"], float)
        seen.append(event)
    assert [e["eventType"] for e in seen] == [
        "pushed", "pulled", "drained", "failed", "retried", "pulled", "drained",
        "progress", "completed"]
    failed = seen[3]
    assert failed["terminal"] is False and failed["error"] == "boom"
    assert seen[7]["progress"] == 50
    assert seen[8]["data"] == {"n": 1}


async def test_unsubscribe_stops_event_frames(connect: Callable[..., Any]) -> None:
    listener: RawClient = await connect()
    producer: RawClient = await connect()
    await listener.ok("SubscribeEvents", queue="ev2")
    first = await producer.ok("PUSH", queue="ev2", name="n", data=1)
    assert (await next_event(listener))["jobId"] == first["id"]
    await listener.ok("UnsubscribeEvents")
    await producer.ok("PUSH", queue="ev2", name="n", data=2)
    # a round trip after the push: any event frame would have arrived before this reply
    await listener.ok("Ping")
    assert listener.events == []
    assert (await listener.call("SubscribeEvents", queue="bad name"))["error"] == (
        "Queue name contains invalid characters")


async def test_a_subscriber_that_never_reads_is_cut_not_waited_for(
    start_server: Callable[..., Any],
) -> None:
    server = await start_server(max_write_queue_bytes=512 * 1024, overflow_notice_s=30)
    sleeper = await RawClient.connect(server.tcp_port)
    producer = await RawClient.connect(server.tcp_port)
    await sleeper.ok("SubscribeEvents", queue="slow")
    # Each completion event carries a 60 KB result; the subscriber reads nothing.
    big = "r" * 60_000
    with trio.fail_after(20):
        for _ in range(300):
            pushed = await producer.ok("PUSH", queue="slow", name="n", data=1)
            await producer.ok("PULL", queue="slow")
            await producer.ok("ACK", id=pushed["id"], result=big)
        # the producer was never slowed down to the sleeper's pace; the sleeper, once
        # it reads, finds what it had, then the overflow notice, then the end
        frames = await sleeper.drain_until_closed()
    assert frames[-1]["type"] == "event"
    assert frames[-1]["event"]["eventType"] == "overflow"
    assert "max_write_queue_bytes" in frames[-1]["event"]["error"]
    assert len(frames) < 300  # most completion events were dropped, not buffered
