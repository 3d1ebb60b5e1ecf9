"""Every backbone command over real TCP, with both codecs (the ``codec`` fixture)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from trioqueue.config import Config
from trioqueue.testing import RawClient
from trioqueue.testing.served import served


async def wait_until(predicate: Callable[[], Any], timeout_s: float = 5.0) -> None:
    """Poll an async predicate until it holds, failing after a deadline."""
    with trio.fail_after(timeout_s):
        while not await predicate():
            await trio.sleep(0.01)


# ------------------------------------------------------------------ session


async def test_hello_ping(client: RawClient) -> None:
    hello = await client.ok("Hello", protocolVersion=2)
    assert hello["protocolVersion"] == 3
    assert hello["capabilities"] == ["pipelining", "separate-job-name"]
    ping = await client.ok("Ping")
    assert ping["data"]["pong"] is True and isinstance(ping["data"]["time"], float)


async def test_req_id_is_echoed_as_sent(client: RawClient) -> None:
    await client.send_raw(client.frame({"cmd": "Ping", "reqId": 42}))
    reply = await client.receive()
    assert reply["reqId"] == 42
    await client.send_raw(client.frame({"cmd": "Ping"}))
    reply = await client.receive()
    assert reply["ok"] is True and "reqId" not in reply


# ------------------------------------------------------------------ producing


async def test_push_and_get_job(client: RawClient) -> None:
    pushed = await client.ok("PUSH", queue="emails", name="send", data={"to": "a@b.c"})
    job = (await client.ok("GetJob", id=pushed["id"]))["job"]
    assert job["id"] == pushed["id"]
    assert job["queue"] == "emails" and job["name"] == "send"
    assert job["data"] == {"to": "a@b.c"}
    assert job["state"] == "waiting"
    assert job["attempts"] == 0 and job["maxAttempts"] == 3 and job["backoff"] == 1000
    assert isinstance(job["createdAt"], float) and job["runAt"] == job["createdAt"]
    assert job["timeline"][0]["state"] == "waiting"


async def test_push_legacy_name_and_default(client: RawClient) -> None:
    legacy = await client.ok("PUSH", queue="q", data={"name": "legacy", "x": 1})
    job = (await client.ok("GetJob", id=legacy["id"]))["job"]
    assert job["name"] == "legacy" and job["data"] == {"x": 1}
    plain = await client.ok("PUSH", queue="q", data={"x": 2})
    assert (await client.ok("GetJob", id=plain["id"]))["job"]["name"] == "default"


async def test_push_options_shape_state(client: RawClient) -> None:
    p = await client.ok("PUSH", queue="q", name="p", data=1, priority=5)
    d = await client.ok("PUSH", queue="q", name="d", data=1, delay=60_000)
    assert (await client.ok("GetState", id=p["id"]))["state"] == "prioritized"
    assert (await client.ok("GetState", id=d["id"]))["state"] == "delayed"
    job = (await client.ok("GetJob", id=d["id"]))["job"]
    assert job["runAt"] - job["createdAt"] == 60_000


async def test_push_validation_errors(client: RawClient) -> None:
    cases = [
        ({"queue": ""}, "Queue name is required"),
        ({"queue": "x" * 257}, "Queue name too long (max 256 characters)"),
        ({"queue": "bad name!"}, "Queue name contains invalid characters"),
        ({"queue": "q", "priority": "high"}, "priority must be a number"),
        ({"queue": "q", "name": None}, "Job name must be a non-empty string"),
    ]
    for fields, expected in cases:
        reply = await client.call("PUSH", data={}, **fields)
        assert reply["ok"] is False
        assert reply["error"].startswith(expected), reply


async def test_pushb_returns_ids_in_order_and_rejects_whole_batch(client: RawClient) -> None:
    reply = await client.ok("PUSHB", queue="b", jobs=[{"name": "a", "data": i} for i in range(5)])
    ids = reply["ids"]
    assert len(ids) == 5 and len(set(ids)) == 5
    for i, job_id in enumerate(ids):
        assert (await client.ok("GetJob", id=job_id))["job"]["data"] == i
    bad = await client.call("PUSHB", queue="b2", jobs=[{"name": "a"}, {"name": "b", "delay": "x"}])
    assert bad["ok"] is False and bad["error"].startswith("jobs[1]: delay")
    assert (await client.ok("Count", queue="b2"))["count"] == 0
    # A large batch is validated in slices: a bad job in its last slice refuses it all.
    jobs: list[dict[str, Any]] = [{"name": "a", "data": i} for i in range(1_000)]
    jobs[990] = {"name": "a", "priority": "high"}
    bad = await client.call("PUSHB", queue="b3", jobs=jobs)
    assert bad["ok"] is False and bad["error"].startswith("jobs[990]: priority"), bad
    assert (await client.ok("Count", queue="b3"))["count"] == 0
    jobs[990] = {"name": "a", "data": 990, "customId": "c990"}  # (one step, after)
    with trio.fail_after(30):  # (its admission reads the store first: it hung once)
        ok = await client.ok("PUSHB", queue="b3", jobs=jobs)
    assert len(ok["ids"]) == 1_000 and ok["ids"][990] == "c990"
    assert (await client.ok("Count", queue="b3"))["count"] == 1_000


async def test_custom_id_is_idempotent_broker_wide(client: RawClient) -> None:
    first = await client.ok("PUSH", queue="a", name="n", data=1, jobId="order-1")
    assert first["id"] == "order-1"
    again = await client.ok("PUSH", queue="other", name="n", data=2, jobId="order-1")
    assert again["id"] == "order-1"
    job = (await client.ok("GetJobByCustomId", customId="order-1"))["job"]
    assert job["queue"] == "a" and job["data"] == 1 and job["customId"] == "order-1"
    batch = await client.ok("PUSHB", queue="a", jobs=[{"name": "n", "customId": "order-1"}])
    assert batch["ids"] == ["order-1"]
    assert (await client.ok("Count", queue="a"))["count"] == 1


async def test_custom_id_of_finished_job_is_replaced(client: RawClient) -> None:
    await client.ok("PUSH", queue="a", name="n", data="old", jobId="c1")
    pulled = await client.ok("PULL", queue="a")
    await client.ok("ACK", id="c1", result="r")
    await client.ok("PUSH", queue="a", name="n", data="new", jobId="c1")
    job = (await client.ok("GetJob", id="c1"))["job"]
    assert job["data"] == "new" and job["state"] == "waiting"
    assert "result" not in await client.ok("GetResult", id="c1")
    assert pulled["job"]["data"] == "old"


async def test_unique_key_dedup_policies(client: RawClient) -> None:
    a = await client.ok("PUSH", queue="d", name="n", data=1, uniqueKey="k")
    b = await client.ok("PUSH", queue="d", name="n", data=2, uniqueKey="k")
    assert a["id"] == b["id"]
    # still held while the owner is active
    await client.ok("PULL", queue="d")
    c = await client.ok("PUSH", queue="d", name="n", data=3, uniqueKey="k")
    assert c["id"] == a["id"]
    # released on completion
    await client.ok("ACK", id=a["id"])
    d = await client.ok("PUSH", queue="d", name="n", data=4, uniqueKey="k")
    assert d["id"] != a["id"]
    # replace: a pending owner is removed, the new job takes the key
    e = await client.ok("PUSH", queue="d", name="n", data=5, uniqueKey="k",
                        dedup={"replace": True})
    assert e["id"] != d["id"]
    assert (await client.ok("GetState", id=d["id"]))["state"] == "unknown"
    assert (await client.ok("Count", queue="d"))["count"] == 1
    # dedup without uniqueKey does nothing
    f = await client.ok("PUSH", queue="d", name="n", data=6, dedup={"ttl": 1000})
    g = await client.ok("PUSH", queue="d", name="n", data=6, dedup={"ttl": 1000})
    assert f["id"] != g["id"]


# ------------------------------------------------------------------ consuming


async def test_pull_ack_with_lock_token(client: RawClient) -> None:
    pushed = await client.ok("PUSH", queue="w", name="n", data={"v": 1})
    pulled = await client.ok("PULL", queue="w", owner="worker-1")
    assert pulled["job"]["id"] == pushed["id"] and pulled["token"]
    assert (await client.ok("GetState", id=pushed["id"]))["state"] == "active"
    missing = await client.call("ACK", id=pushed["id"])
    assert missing["error"] == f"Lock token required for job {pushed['id']}"
    wrong = await client.call("ACK", id=pushed["id"], token="nope")
    assert wrong["error"] == f"Invalid or expired lock token for job {pushed['id']}"
    await client.ok("ACK", id=pushed["id"], token=pulled["token"], result={"sum": 3})
    assert (await client.ok("GetState", id=pushed["id"]))["state"] == "completed"
    assert (await client.ok("GetResult", id=pushed["id"]))["result"] == {"sum": 3}
    again = await client.call("ACK", id=pushed["id"], token=pulled["token"])
    assert again["error"] == f"Job not found or not in processing state: {pushed['id']}"


async def test_pull_without_owner_has_no_token_key(client: RawClient) -> None:
    empty = await client.ok("PULL", queue="nothing")
    assert empty["job"] is None and "token" not in empty
    await client.ok("PUSH", queue="w2", name="n", data=1)
    pulled = await client.ok("PULL", queue="w2")
    assert "token" not in pulled
    await client.ok("ACK", id=pulled["job"]["id"])


async def test_get_result_keeps_null_distinct_from_none(client: RawClient) -> None:
    ids = (await client.ok("PUSHB", queue="r", jobs=[{"name": "a"}, {"name": "b"}]))["ids"]
    for _ in ids:
        job = (await client.ok("PULL", queue="r"))["job"]
        if job["id"] == ids[0]:
            await client.ok("ACK", id=job["id"], result=None)
        else:
            await client.ok("ACK", id=job["id"])
    with_null = await client.ok("GetResult", id=ids[0])
    assert "result" in with_null and with_null["result"] is None
    without = await client.ok("GetResult", id=ids[1])
    assert "result" not in without


async def test_pullb_ackb(client: RawClient) -> None:
    await client.ok("PUSHB", queue="bb", jobs=[{"name": "n", "data": i} for i in range(10)])
    pulled = await client.ok("PULLB", queue="bb", count=4, owner="w")
    assert len(pulled["jobs"]) == 4 and len(pulled["tokens"]) == 4
    assert [j["data"] for j in pulled["jobs"]] == [0, 1, 2, 3]
    ids = [j["id"] for j in pulled["jobs"]]
    bad = await client.call("ACKB", ids=ids, tokens=pulled["tokens"][:2])
    assert bad["error"] == "ACKB tokens length must match ids length"
    await client.ok("ACKB", ids=ids, tokens=pulled["tokens"], results=[1, 2, 3, 4])
    assert (await client.ok("GetResult", id=ids[2]))["result"] == 3
    dup = await client.ok("ACKB", ids=ids[:1], tokens=pulled["tokens"][:1])
    assert dup["data"] == {"ignoredIds": ids[:1], "ignoredIndices": [0]}
    counts = (await client.ok("GetJobCounts", queue="bb"))["counts"]
    assert counts["completed"] == 4 and counts["waiting"] == 6
    nobody = await client.ok("PULLB", queue="bb", count=10)
    assert len(nobody["jobs"]) == 6 and "tokens" not in nobody


async def test_pull_bounds(client: RawClient) -> None:
    assert (await client.call("PULLB", queue="q", count=1001))["error"] == (
        "count must be at most 1000")
    assert (await client.call("PULL", queue="q", timeout=60_001))["error"] == (
        "timeout must be at most 60000")
    assert (await client.call("PULL", queue="q", timeout="10"))["ok"] is False
    assert (await client.call("PULL", queue="q", lockTtl=float("nan")))["error"] == (
        "lockTtl must be a finite number")


async def test_fail_retries_with_backoff_then_dead_letters(client: RawClient) -> None:
    pushed = await client.ok("PUSH", queue="f", name="n", data=1, maxAttempts=2, backoff=0)
    job_id = pushed["id"]
    await client.ok("PULL", queue="f")
    await client.ok("FAIL", id=job_id, error="boom", stack=["line 1", " ", "line 2"])
    job = (await client.ok("GetJob", id=job_id))["job"]
    assert job["attempts"] == 1 and job["state"] == "waiting"
    assert job["stacktrace"] == ["line 1", "line 2"]
    await client.ok("PULL", queue="f")
    await client.ok("FAIL", id=job_id, error="boom again")
    assert (await client.ok("GetState", id=job_id))["state"] == "failed"
    counts = (await client.ok("GetJobCounts", queue="f"))["counts"]
    assert counts["failed"] == 1 and counts["waiting"] == 0


async def test_fail_backoff_delays_retry(client: RawClient) -> None:
    pushed = await client.ok("PUSH", queue="fb", name="n", data=1, backoff=10_000)
    await client.ok("PULL", queue="fb")
    await client.ok("FAIL", id=pushed["id"], error="x")
    job = (await client.ok("GetJob", id=pushed["id"]))["job"]
    assert job["state"] == "delayed"
    # exponential: base * 2^attempts * U(0.5, 1.5) with attempts = 1
    assert 10_000 <= job["runAt"] - job["timeline"][-1]["timestamp"] <= 30_000


async def test_fail_unrecoverable_and_remove_on_fail(client: RawClient) -> None:
    a = await client.ok("PUSH", queue="u", name="n", data=1, maxAttempts=5)
    await client.ok("PULL", queue="u")
    await client.ok("FAIL", id=a["id"], error="fatal", unrecoverable=True)
    assert (await client.ok("GetState", id=a["id"]))["state"] == "failed"
    b = await client.ok("PUSH", queue="u", name="n", data=1, maxAttempts=1, removeOnFail=True)
    await client.ok("PULL", queue="u")
    await client.ok("FAIL", id=b["id"], error="gone")
    assert (await client.ok("GetState", id=b["id"]))["state"] == "unknown"


async def test_remove_on_complete(client: RawClient) -> None:
    a = await client.ok("PUSH", queue="rc", name="n", data=1, removeOnComplete=True)
    await client.ok("PULL", queue="rc")
    await client.ok("ACK", id=a["id"], result=5)
    assert (await client.ok("GetState", id=a["id"]))["state"] == "unknown"
    assert (await client.call("GetJob", id=a["id"]))["error"] == "Job not found"


async def test_extend_lock_and_heartbeats(client: RawClient) -> None:
    ids = (await client.ok("PUSHB", queue="h", jobs=[{"name": "n"}, {"name": "n"}]))["ids"]
    pulled = await client.ok("PULLB", queue="h", count=2, owner="w", lockTtl=60_000)
    t0, t1 = pulled["tokens"]
    await client.ok("ExtendLock", id=ids[0], token=t0, duration=30_000)
    assert (await client.call("ExtendLock", id=ids[0], token="x", duration=1))["error"] == (
        "Lock not found or invalid token")
    ext = await client.ok("ExtendLocks", ids=ids, tokens=[t0, "bad"], durations=[1000, 1000])
    assert ext["count"] == 1
    hb = await client.ok("JobHeartbeat", id=ids[1], token=t1)
    assert hb["data"] == {"ok": True}
    hbb = await client.ok("JobHeartbeatB", ids=ids, tokens=[t0, t1])
    assert hbb["data"] == {"ok": True, "count": 2}
    nope = await client.call("JobHeartbeat", id="missing")
    assert nope["error"] == "Job not found or not active (or invalid token)"


async def test_lock_expiry_requeues_and_charges(client: RawClient) -> None:
    pushed = await client.ok("PUSH", queue="le", name="n", data=1)
    first = await client.ok("PULL", queue="le", owner="w", lockTtl=50)

    async def requeued() -> bool:
        return (await client.ok("GetState", id=pushed["id"]))["state"] == "waiting"

    await wait_until(requeued)
    job = (await client.ok("GetJob", id=pushed["id"]))["job"]
    assert job["attempts"] == 1 and job["stallCount"] == 1
    stale = await client.call("ACK", id=pushed["id"], token=first["token"])
    # bunqueue completes the queued copy on a late ACK after lock expiry
    assert stale["ok"] is True
    assert (await client.ok("GetState", id=pushed["id"]))["state"] == "completed"


async def test_long_poll_pull_is_woken_by_push(connect: Callable[..., Any]) -> None:
    worker: RawClient = await connect()
    producer: RawClient = await connect()
    req = await worker.send("PULL", queue="lp", timeout=5000, owner="w")
    # the parked pull must not hold up other commands on the same connection
    assert (await worker.ok("Ping"))["ok"] is True
    pushed = await producer.ok("PUSH", queue="lp", name="n", data="hi")
    reply = await worker.reply_to(req)
    assert reply["ok"] is True and reply["job"]["id"] == pushed["id"] and reply["token"]


async def test_long_poll_times_out_empty(client: RawClient) -> None:
    reply = await client.ok("PULLB", queue="empty", count=5, timeout=50)
    assert reply["jobs"] == []


async def test_disconnect_releases_pulled_jobs(connect: Callable[..., Any]) -> None:
    worker: RawClient = await connect()
    watcher: RawClient = await connect()
    pushed = await watcher.ok("PUSH", queue="dc", name="n", data=1)
    await worker.ok("PULL", queue="dc", owner="w")
    assert (await watcher.ok("GetState", id=pushed["id"]))["state"] == "active"
    await worker.aclose()

    async def back() -> bool:
        return (await watcher.ok("GetState", id=pushed["id"]))["state"] == "waiting"

    await wait_until(back)
    job = (await watcher.ok("GetJob", id=pushed["id"]))["job"]
    assert job["attempts"] == 0


# ------------------------------------------------------------------ queries


async def test_get_jobs_order_pagination_and_states(client: RawClient) -> None:
    jobs = [{"name": "n", "data": i, "timestamp": 1_000_000 + i} for i in range(6)]
    ids = (await client.ok("PUSHB", queue="gj", jobs=jobs))["ids"]
    page = await client.ok("GetJobs", queue="gj", state="waiting", limit=2, offset=1)
    assert [j["id"] for j in page["jobs"]] == ids[1:3]
    desc = await client.ok("GetJobs", queue="gj", state=["waiting"], limit=2, asc=False)
    assert [j["id"] for j in desc["jobs"]] == [ids[5], ids[4]]
    pulled = await client.ok("PULL", queue="gj")
    await client.ok("ACK", id=pulled["job"]["id"])
    done = await client.ok("GetJobs", queue="gj", state="completed")
    assert [j["id"] for j in done["jobs"]] == [ids[0]]
    assert done["jobs"][0]["state"] == "completed"
    both = await client.ok("GetJobs", queue="gj", state=["completed", "waiting"], limit=3)
    assert [j["id"] for j in both["jobs"]] == ids[:3]


async def test_pause_resume_and_paused_counts(client: RawClient) -> None:
    await client.ok("PUSHB", queue="pz", jobs=[{"name": "n"}, {"name": "n", "priority": 3}])
    await client.ok("Pause", queue="pz")
    assert (await client.ok("IsPaused", queue="pz"))["paused"] is True
    counts = (await client.ok("GetJobCounts", queue="pz"))["counts"]
    assert counts["paused"] == 2 and counts["waiting"] == 0 and counts["prioritized"] == 0
    assert (await client.ok("PULL", queue="pz"))["job"] is None
    assert (await client.ok("GetJobs", queue="pz", state="waiting"))["jobs"] == []
    assert len((await client.ok("GetJobs", queue="pz", state="paused"))["jobs"]) == 2
    await client.ok("Resume", queue="pz")
    counts = (await client.ok("GetJobCounts", queue="pz"))["counts"]
    assert counts == {"waiting": 1, "prioritized": 1, "delayed": 0, "active": 0,
                      "completed": 0, "failed": 0, "waiting-children": 0, "paused": 0}
    assert (await client.ok("PULL", queue="pz"))["job"]["priority"] == 3


async def test_counts_per_priority_and_count(client: RawClient) -> None:
    jobs = [{"name": "n", "priority": p} for p in (0, 0, 5, 10)] + [{"name": "n", "delay": 9e6}]
    await client.ok("PUSHB", queue="cp", jobs=jobs)
    reply = await client.ok("GetCountsPerPriority", queue="cp")
    assert reply["queue"] == "cp" and reply["counts"] == {"0": 3, "5": 1, "10": 1}
    assert (await client.ok("Count", queue="cp"))["count"] == 5


async def test_priority_then_fifo_and_lifo_order(client: RawClient) -> None:
    jobs = [
        {"name": "low", "data": "a"},
        {"name": "low", "data": "b"},
        {"name": "high", "data": "c", "priority": 9},
        {"name": "lifo", "data": "d", "lifo": True},
    ]
    await client.ok("PUSHB", queue="ord", jobs=jobs)
    got = [(await client.ok("PULL", queue="ord"))["job"]["data"] for _ in range(4)]
    assert got == ["c", "d", "a", "b"]


async def test_progress_and_logs(client: RawClient) -> None:
    pushed = await client.ok("PUSH", queue="pl", name="n", data=1)
    job_id = pushed["id"]
    not_active = await client.call("Progress", id=job_id, progress=10)
    assert not_active["error"] == "Job is not active (current state: waiting)"
    await client.ok("PULL", queue="pl")
    await client.ok("Progress", id=job_id, progress=150, message="step 1")
    progress = await client.ok("GetProgress", id=job_id)
    assert progress["progress"] == 100 and progress["message"] == "step 1"
    for i in range(3):
        assert (await client.ok("AddLog", id=job_id, message=f"m{i}"))["data"] == {"added": True}
    logs = (await client.ok("GetLogs", id=job_id, start=1, end=2))["data"]
    assert logs["count"] == 3 and [e["message"] for e in logs["logs"]] == ["m1", "m2"]
    await client.ok("ClearLogs", id=job_id, keepLogs=1)
    logs = (await client.ok("GetLogs", id=job_id))["data"]
    assert [e["message"] for e in logs["logs"]] == ["m2"]
    assert (await client.call("AddLog", id="nope", message="x"))["error"] == "Job not found"
    assert (await client.call("GetProgress", id="nope"))["error"] == "Job not found"


async def test_unknown_ids(client: RawClient) -> None:
    assert (await client.call("GetJob", id="nope"))["error"] == "Job not found"
    assert (await client.call("GetJobByCustomId", customId="nope"))["error"] == "Job not found"
    assert (await client.ok("GetState", id="nope"))["state"] == "unknown"
    assert "result" not in await client.ok("GetResult", id="nope")
    assert (await client.ok("GetChildrenValues", id="nope"))["data"] == {"values": {}}
    assert (await client.call("ACK", id="nope"))["error"] == (
        "Job not found or not in processing state: nope")


async def test_pipelined_replies_match_req_ids(client: RawClient) -> None:
    frames = b"".join(
        client.frame({"cmd": "PUSH", "queue": "pipe", "name": "n", "data": i, "reqId": f"p{i}"})
        for i in range(200)
    )
    await client.send_raw(frames)
    seen = {}
    for _ in range(200):
        reply = await client.receive()
        assert reply["ok"] is True
        seen[reply["reqId"]] = reply["id"]
    assert len(seen) == 200 and len(set(seen.values())) == 200
    assert (await client.ok("Count", queue="pipe"))["count"] == 200


async def test_read_only_limit_and_dedup_queries(client: RawClient) -> None:
    pushed = await client.ok("PUSH", queue="rq", name="n", data=1, uniqueKey="order-7")
    owner = await client.ok("GetDeduplicationJobId", queue="rq", deduplicationId="order-7")
    assert owner["data"] == {"jobId": pushed["id"]}
    none = await client.ok("GetDeduplicationJobId", queue="rq", deduplicationId="other")
    assert none["data"] == {"jobId": None}
    await client.ok("PULL", queue="rq")
    await client.ok("ACK", id=pushed["id"])
    released = await client.ok("GetDeduplicationJobId", queue="rq", deduplicationId="order-7")
    assert released["data"] == {"jobId": None}
    limits = await client.ok("GetQueueLimits", queue="rq")
    assert limits["data"]["limits"] == {"rateLimit": None, "rateLimitTtl": -2,
                                        "concurrencyLimit": None, "maxed": False}


async def test_workers_registry_is_tied_to_the_connection(connect: Callable[..., Any]) -> None:
    worker: RawClient = await connect()
    watcher: RawClient = await connect()
    reg = await worker.ok("RegisterWorker", name="w", queues=["emails"], concurrency=3)
    worker_id = reg["data"]["workerId"]
    assert reg["data"]["status"] == "active"
    assert (await worker.ok("Heartbeat", id=worker_id, processed=5))["data"] == {"ok": True}
    listed = (await watcher.ok("ListWorkers"))["data"]
    assert [w["id"] for w in listed["workers"]] == [worker_id]
    assert listed["workers"][0]["processedJobs"] == 5
    await worker.aclose()

    async def gone() -> bool:
        return (await watcher.ok("ListWorkers"))["data"]["workers"] == []

    await wait_until(gone)
    assert (await watcher.call("Heartbeat", id=worker_id))["error"] == "Worker not found"


async def test_releasing_a_deduplication_key(client: RawClient) -> None:
    first = await client.ok("PUSH", queue="dk", name="n", data=1, uniqueKey="order-1")
    # a push with the held key answers the holder
    again = await client.ok("PUSH", queue="dk", name="n", data=2, uniqueKey="order-1")
    assert again["id"] == first["id"]
    removed = await client.ok("RemoveDeduplicationKey", queue="dk", deduplicationId="order-1")
    assert removed["data"] == {"count": 1}
    assert (await client.ok("GetDeduplicationJobId", queue="dk",
                            deduplicationId="order-1"))["data"] == {"jobId": None}
    gone = await client.ok("RemoveDeduplicationKey", queue="dk", deduplicationId="order-1")
    assert gone["data"] == {"count": 0}
    # the holder is still there; the key is free for a new job
    assert (await client.ok("GetJob", id=first["id"]))["job"]["data"] == 1
    second = await client.ok("PUSH", queue="dk", name="n", data=3, uniqueKey="order-1")
    assert second["id"] != first["id"]
    # by job: only the job that holds the key releases it
    assert (await client.ok("RemoveJobDeduplicationKey", id=first["id"]))["data"] == {
        "removed": False}
    assert (await client.ok("RemoveJobDeduplicationKey", id=second["id"]))["data"] == {
        "removed": True}
    assert (await client.ok("RemoveJobDeduplicationKey", id="no-such-job"))["data"] == {
        "removed": False}
    third = await client.ok("PUSH", queue="dk", name="n", data=4, uniqueKey="order-1")
    assert third["id"] not in (first["id"], second["id"])
    assert (await client.ok("Count", queue="dk"))["count"] == 3
    missing = await client.call("RemoveDeduplicationKey", queue="dk")
    assert missing["ok"] is False and missing["error"] == "deduplicationId is required"


async def test_a_released_deduplication_key_stays_released_after_a_restart(
    configure: Callable[..., Config],
) -> None:
    config = configure()  # LMDB, in this test's directory
    async with served(config) as client:
        held = await client.ok("PUSH", queue="dk", name="n", data=1, uniqueKey="k")
        await client.ok("RemoveDeduplicationKey", queue="dk", deduplicationId="k")
    async with served(config) as client:
        assert (await client.ok("GetDeduplicationJobId", queue="dk",
                                deduplicationId="k"))["data"] == {"jobId": None}
        new = await client.ok("PUSH", queue="dk", name="n", data=2, uniqueKey="k")
        assert new["id"] != held["id"]
