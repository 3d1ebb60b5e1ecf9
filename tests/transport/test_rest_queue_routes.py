"""The ``/queues`` REST routes over real HTTP: push and pull, listing, counts, queue
control, the DLQ, limits and settings, with bunqueue's statuses (the push, DLQ, limit
and settings routes 400 on a refusal; pull, listing, counts and control always 200)."""

from __future__ import annotations

import httpx

from .rest_client import http_fixture, pull, push

http = http_fixture()


async def test_push_forwards_only_bunqueues_fields(http: httpx.AsyncClient) -> None:
    pushed = await http.post("/queues/q/jobs", json={
        "data": {"x": 1}, "attempts": 5, "priority": 3, "tags": ["t"], "unknown": 1})
    assert pushed.status_code == 200
    job = (await http.get(f"/jobs/{pushed.json()['id']}")).json()["job"]
    assert job["name"] == "default" and job["maxAttempts"] == 5
    assert job["priority"] == 3 and job["tags"] == ["t"]
    refused = await http.post("/queues/q/jobs", json={"name": "n", "delay": "soon"})
    assert refused.status_code == 400 and refused.json()["ok"] is False
    assert (await http.post("/queues/q/jobs", content=b"{x")).json() == {
        "ok": False, "error": "Invalid JSON body"}


async def test_bulk_push_and_pull_batch(http: httpx.AsyncClient) -> None:
    pushed = await http.post("/queues/q/jobs/bulk", json={"jobs": [
        {"name": "a", "data": 1}, {"data": 2}]})
    assert pushed.status_code == 200 and len(pushed.json()["ids"]) == 2
    named = [(await http.get(f"/jobs/{i}")).json()["job"]["name"]
             for i in pushed.json()["ids"]]
    assert named == ["a", "default"]
    refused = await http.post("/queues/q/jobs/bulk", json={"jobs": [{"delay": "x"}]})
    assert refused.status_code == 400
    assert (await http.post("/queues/q/jobs/bulk", content=b"]")).status_code == 400
    batch = await http.post("/queues/q/jobs/pull-batch", json={"count": 5})
    assert batch.status_code == 200 and len(batch.json()["jobs"]) == 2
    # bunqueue's pull routes answer 200 even when the pull is refused.
    bad = await http.post("/queues/q/jobs/pull-batch", json={"count": 0})
    assert bad.status_code == 200 and bad.json()["ok"] is False


async def test_pull_answers_200_with_or_without_a_job(http: httpx.AsyncClient) -> None:
    empty = await http.get("/queues/q/jobs")
    assert empty.status_code == 200 and empty.json() == {"ok": True, "job": None}
    job_id = await push(http)
    got = await http.get("/queues/q/jobs?timeout=0")
    assert got.status_code == 200 and got.json()["job"]["id"] == job_id
    refused = await http.get("/queues/q/jobs?timeout=999999")
    assert refused.status_code == 200 and refused.json()["ok"] is False
    unparsed = await http.get("/queues/q/jobs?timeout=soon")  # parseInt: NaN
    assert unparsed.status_code == 200 and unparsed.json()["ok"] is False


async def test_list_jobs_by_states_limit_and_offset(http: httpx.AsyncClient) -> None:
    waiting = [await push(http) for _ in range(3)]
    delayed = await push(http, delay=60_000)
    listed = (await http.get("/queues/q/jobs/list?state=waiting")).json()["jobs"]
    assert [job["id"] for job in listed] == waiting
    both = (await http.get("/queues/q/jobs/list?status=waiting,delayed")).json()["jobs"]
    assert {job["id"] for job in both} == {*waiting, delayed}
    split = (await http.get("/queues/q/jobs/list?states=delayed&state=waiting")).json()
    assert len(split["jobs"]) == 4
    page = (await http.get("/queues/q/jobs/list?state=waiting&limit=1&offset=1x")).json()
    assert [job["id"] for job in page["jobs"]] == waiting[1:2]  # parseInt("1x") is 1
    bad = await http.get("/queues/q/jobs/list?limit=-1")
    assert bad.status_code == 200 and bad.json()["ok"] is False


async def test_queue_listing_summary_and_counts(http: httpx.AsyncClient) -> None:
    await push(http, "a")
    await push(http, "a", priority=2)
    await push(http, "b", delay=60_000)
    assert (await http.post("/queues/b/pause")).status_code == 200
    queues = (await http.get("/queues")).json()
    assert queues["ok"] is True and sorted(queues["queues"]) == ["a", "b"]
    summary = (await http.get("/queues/summary")).json()
    by_name = {item["name"]: item for item in summary}
    assert by_name["a"]["paused"] is False and by_name["b"]["paused"] is True
    assert by_name["a"]["counts"]["waiting"] == 1
    assert by_name["a"]["counts"]["prioritized"] == 1
    assert by_name["b"]["counts"]["delayed"] == 1
    counts = await http.get("/queues/a/counts")
    assert counts.status_code == 200 and counts.json()["counts"] == by_name["a"]["counts"]
    assert (await http.get("/queues/a/count")).json()["count"] == 2
    per_priority = (await http.get("/queues/a/priority-counts")).json()
    assert per_priority["counts"] == {"0": 1, "2": 1}
    assert (await http.get("/queues/b/paused")).json()["paused"] is True
    assert (await http.post("/queues/b/resume")).status_code == 200
    assert (await http.get("/queues/b/paused")).json()["paused"] is False
    bad_name = await http.get("/queues/" + "x" * 300 + "/counts")
    assert bad_name.status_code == 200 and bad_name.json()["ok"] is False


async def test_drain_clean_obliterate(http: httpx.AsyncClient) -> None:
    await push(http)
    await push(http)
    drained = await http.post("/queues/q/drain")
    assert drained.status_code == 200 and drained.json()["count"] == 2
    first = await push(http)
    cleaned = await http.post("/queues/q/clean", json={"grace": 0, "state": "waiting"})
    assert cleaned.status_code == 200 and cleaned.json()["ids"] == [first]
    assert (await http.post("/queues/q/clean")).json()["count"] == 0  # grace 0 default
    await push(http)
    assert (await http.post("/queues/q/obliterate")).status_code == 200
    assert (await http.get("/queues/q/count")).json()["count"] == 0
    assert (await http.post("/queues/q/clean", content=b"{")).status_code == 400


async def test_promote_jobs_and_retry_completed(http: httpx.AsyncClient) -> None:
    delayed = [await push(http, delay=60_000) for _ in range(3)]
    promoted = await http.post("/queues/q/promote-jobs", json={"count": 2})
    assert promoted.status_code == 200 and promoted.json()["count"] == 2
    assert (await http.get(f"/jobs/{delayed[2]}/state")).json()["state"] == "delayed"
    job_id, token = await pull(http)
    await http.post(f"/jobs/{job_id}/ack", json={"token": token})
    retried = await http.post("/queues/q/retry-completed", json={"id": job_id})
    assert retried.status_code == 200 and retried.json()["count"] == 1
    assert (await http.get(f"/jobs/{job_id}/state")).json()["state"] == "waiting"


async def test_queue_workers_lists_the_active_workers_of_the_queue(
        http: httpx.AsyncClient) -> None:
    await http.post("/workers", json={"name": "w1", "queues": ["q", "r"]})
    await http.post("/workers", json={"name": "w2", "queues": ["r"]})
    listed = await http.get("/queues/q/workers")
    assert listed.status_code == 200
    workers = listed.json()["workers"]
    assert [worker["name"] for worker in workers] == ["w1"]
    assert set(workers[0]) == {"id", "name", "queues", "concurrency", "registeredAt",
                               "lastSeen", "activeJobs", "processedJobs", "failedJobs"}
    assert (await http.get("/queues/none/workers")).json() == {"ok": True, "workers": []}


async def test_dlq_stats_list_retry_purge(http: httpx.AsyncClient) -> None:
    ids = [await push(http, attempts=1) for _ in range(3)]
    for job_id in ids:
        await http.post(f"/jobs/{job_id}/discard")
    stats = await http.get("/queues/q/dlq/stats")
    assert stats.status_code == 200 and stats.json()["data"]["stats"]["total"] == 3
    page = (await http.get("/queues/q/dlq?limit=2&offset=1")).json()
    assert len(page["jobs"]) == 2 and len(page["entries"]) == 2
    assert len((await http.get("/queues/q/dlq")).json()["jobs"]) == 3
    retried = await http.post("/queues/q/dlq/retry", json={"jobId": ids[0]})
    assert retried.status_code == 200 and retried.json()["count"] == 1
    purged = await http.post("/queues/q/dlq/purge")
    assert purged.status_code == 200 and purged.json()["count"] == 2
    bad = await http.post("/queues/q/dlq/retry", json={"count": "many"})
    assert bad.status_code == 400


async def test_dlq_listing_filters_by_reason_and_age(http: httpx.AsyncClient) -> None:
    discarded = await push(http, attempts=3)
    await http.post(f"/jobs/{discarded}/discard")
    failed = await push(http, attempts=1)
    failed_id, token = await pull(http)
    assert failed_id == failed
    await http.post(f"/jobs/{failed}/fail", json={"token": token, "error": "boom"})
    reasons = (await http.get("/queues/q/dlq/stats")).json()["data"]["stats"]["byReason"]
    assert set(reasons) == {"unknown", "max_attempts_exceeded"}
    for reason, job_id in (("unknown", discarded), ("max_attempts_exceeded", failed)):
        page = (await http.get(f"/queues/q/dlq?reason={reason}")).json()
        assert [entry["job"]["id"] for entry in page["entries"]] == [job_id]
    assert (await http.get("/queues/q/dlq?olderThan=1")).json()["entries"] == []
    assert len((await http.get("/queues/q/dlq?reason=")).json()["entries"]) == 2


async def test_rate_limit_and_concurrency(http: httpx.AsyncClient) -> None:
    assert (await http.put("/queues/q/rate-limit",
                           json={"limit": 5, "duration": 1000})).status_code == 200
    assert (await http.put("/queues/q/rate-limit", json={"limit": "x"})).status_code == 400
    assert (await http.delete("/queues/q/rate-limit")).status_code == 200
    assert (await http.put("/queues/q/concurrency", json={"concurrency": 2})).status_code == 200
    assert (await http.put("/queues/q/concurrency", json={"limit": 3})).status_code == 200
    assert (await http.put("/queues/q/concurrency", json={})).status_code == 400
    assert (await http.delete("/queues/q/concurrency")).status_code == 200
    assert (await http.put("/queues/q/concurrency", content=b"{")).status_code == 400


async def test_stall_and_dlq_config(http: httpx.AsyncClient) -> None:
    set_stall = await http.put("/queues/q/stall-config", json={"config": {"maxStalls": 7}})
    assert set_stall.status_code == 200
    stall = (await http.get("/queues/q/stall-config")).json()["config"]
    assert stall["maxStalls"] == 7
    assert (await http.put("/queues/q/stall-config", json={"stallInterval": 9000})
            ).status_code == 200  # the settings as the body
    assert (await http.get("/queues/q/stall-config")).json()["config"]["stallInterval"] == 9000
    assert (await http.put("/queues/q/dlq-config",
                           json={"config": {"maxEntries": 10}})).status_code == 200
    assert (await http.get("/queues/q/dlq-config")).json()["config"]["maxEntries"] == 10
    assert (await http.put("/queues/q/stall-config", content=b"[")).status_code == 400
    assert (await http.get("/queues/" + "x" * 300 + "/dlq-config")).status_code == 400
