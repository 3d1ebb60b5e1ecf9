"""The ``/jobs`` REST routes over real HTTP: each runs its command, answers 200 on
success, 400 on a refusal and 404 when a GET finds no such job."""

from __future__ import annotations

import httpx
import trio

from .rest_client import http_fixture, pull, push

http = http_fixture()


async def test_get_job_by_id_and_by_custom_id(http: httpx.AsyncClient) -> None:
    job_id = await push(http, data={"a": 1}, jobId="order-7")
    got = await http.get(f"/jobs/{job_id}")
    assert got.status_code == 200 and got.json()["job"]["data"] == {"a": 1}
    by_custom = await http.get("/jobs/custom/order-7")
    assert by_custom.status_code == 200 and by_custom.json()["job"]["id"] == job_id
    assert (await http.get("/jobs/nope")).status_code == 404
    missing = await http.get("/jobs/custom/nope")
    assert missing.status_code == 404
    assert missing.json() == {"ok": False, "error": "Job not found"}


async def test_a_percent_encoded_id_is_decoded(http: httpx.AsyncClient) -> None:
    job_id = await push(http, jobId="a b/c")
    got = await http.get("/jobs/a%20b%2Fc")
    assert got.status_code == 200 and got.json()["job"]["id"] == job_id


async def test_state_result_progress_children(http: httpx.AsyncClient) -> None:
    job_id = await push(http)
    state = await http.get(f"/jobs/{job_id}/state")
    assert state.status_code == 200 and state.json()["state"] == "waiting"
    # Progress is only for active jobs: refused, and not as "not found".
    assert (await http.get(f"/jobs/{job_id}/progress")).status_code == 400
    assert (await http.get("/jobs/nope/progress")).status_code == 404
    children = await http.get(f"/jobs/{job_id}/children")
    assert children.status_code == 200 and children.json()["data"]["values"] == {}
    pulled, token = await pull(http)
    assert pulled == job_id
    ack = await http.post(f"/jobs/{job_id}/ack", json={"result": {"r": 1}, "token": token})
    assert ack.status_code == 200, ack.text
    result = await http.get(f"/jobs/{job_id}/result")
    assert result.status_code == 200 and result.json()["result"] == {"r": 1}
    state = await http.get(f"/jobs/{job_id}/state")
    assert state.json()["state"] == "completed"


async def test_cancel_removes_a_queued_job(http: httpx.AsyncClient) -> None:
    job_id = await push(http)
    assert (await http.delete(f"/jobs/{job_id}")).status_code == 200
    assert (await http.get(f"/jobs/{job_id}")).status_code == 404
    again = await http.delete(f"/jobs/{job_id}")
    assert again.status_code == 400 and again.json()["ok"] is False


async def test_ack_needs_the_lock_token(http: httpx.AsyncClient) -> None:
    job_id = await push(http)
    _, token = await pull(http)
    refused = await http.post(f"/jobs/{job_id}/ack", json={})
    assert refused.status_code == 400 and "token" in refused.json()["error"].lower()
    assert (await http.post(f"/jobs/{job_id}/ack", json={"token": token})).status_code == 200
    # An empty body is no fields at all; the job is no longer active.
    assert (await http.post(f"/jobs/{job_id}/ack")).status_code == 400


async def test_fail_retries_then_dead_letters(http: httpx.AsyncClient) -> None:
    job_id = await push(http, attempts=1)
    _, token = await pull(http)
    failed = await http.post(f"/jobs/{job_id}/fail", json={"error": "boom", "token": token})
    assert failed.status_code == 200, failed.text
    state = await http.get(f"/jobs/{job_id}/state")
    assert state.json()["state"] == "failed"
    assert (await http.post("/jobs/nope/fail", json={"error": "x"})).status_code == 400


async def test_progress_heartbeat_and_extend_lock(http: httpx.AsyncClient) -> None:
    job_id = await push(http)
    _, token = await pull(http)
    progress = await http.post(f"/jobs/{job_id}/progress",
                               json={"progress": 50, "message": "half"})
    assert progress.status_code == 200
    read = await http.get(f"/jobs/{job_id}/progress")
    assert read.json()["progress"] == 50 and read.json()["message"] == "half"
    beat = await http.post(f"/jobs/{job_id}/heartbeat", json={"token": token})
    assert beat.status_code == 200 and beat.json()["data"] == {"ok": True}
    assert (await http.post("/jobs/nope/heartbeat", json={})).status_code == 400
    extended = await http.post(f"/jobs/{job_id}/extend-lock",
                               json={"duration": 60_000, "token": token})
    assert extended.status_code == 200
    wrong = await http.post(f"/jobs/{job_id}/extend-lock",
                            json={"duration": 60_000, "token": "not-it"})
    assert wrong.status_code == 400
    assert (await http.post("/jobs/nope/progress", json={"progress": 1})).status_code == 400


async def test_batches_ack_extend_and_heartbeat(http: httpx.AsyncClient) -> None:
    first, second = await push(http), await push(http)
    pulled = (await http.post("/queues/q/jobs/pull-batch",
                              json={"count": 2, "owner": "w"})).json()
    ids, tokens = [job["id"] for job in pulled["jobs"]], pulled["tokens"]
    assert sorted(ids) == sorted([first, second])
    beats = await http.post("/jobs/heartbeat-batch", json={"ids": ids, "tokens": tokens})
    assert beats.status_code == 200 and beats.json()["data"]["count"] == 2
    extended = await http.post("/jobs/extend-locks", json={
        "ids": ids, "tokens": tokens, "durations": [60_000, 60_000]})
    assert extended.status_code == 200 and extended.json()["count"] == 2
    bad = await http.post("/jobs/extend-locks", json={
        "ids": ids, "tokens": tokens, "durations": ["x", 1]})
    assert bad.status_code == 400
    mismatched = await http.post("/jobs/ack-batch", json={"ids": ids, "tokens": tokens[:1]})
    assert mismatched.status_code == 400
    acked = await http.post("/jobs/ack-batch", json={"ids": ids, "tokens": tokens})
    assert acked.status_code == 200, acked.text
    for job_id in ids:
        assert (await http.get(f"/jobs/{job_id}/state")).json()["state"] == "completed"
    assert (await http.post("/jobs/ack-batch", content=b"[")).status_code == 400


async def test_promote_and_change_delay(http: httpx.AsyncClient) -> None:
    job_id = await push(http, delay=60_000)
    assert (await http.get(f"/jobs/{job_id}/state")).json()["state"] == "delayed"
    assert (await http.post(f"/jobs/{job_id}/promote")).status_code == 200
    assert (await http.get(f"/jobs/{job_id}/state")).json()["state"] == "waiting"
    assert (await http.post(f"/jobs/{job_id}/promote")).status_code == 400
    assert (await http.put(f"/jobs/{job_id}/delay", json={"delay": 60_000})).status_code == 200
    assert (await http.get(f"/jobs/{job_id}/state")).json()["state"] == "delayed"
    assert (await http.put(f"/jobs/{job_id}/delay", json={})).status_code == 400


async def test_update_data_and_priority(http: httpx.AsyncClient) -> None:
    job_id = await push(http, data={"a": 1})
    assert (await http.put(f"/jobs/{job_id}/data", json={"data": {"b": 2}})).status_code == 200
    assert (await http.get(f"/jobs/{job_id}")).json()["job"]["data"] == {"b": 2}
    assert (await http.put("/jobs/nope/data", json={"data": 1})).status_code == 400
    raised = await http.put(f"/jobs/{job_id}/priority", json={"priority": 5})
    assert raised.status_code == 200
    assert (await http.get(f"/jobs/{job_id}/state")).json()["state"] == "prioritized"
    bad = await http.put(f"/jobs/{job_id}/priority", json={"priority": "high"})
    assert bad.status_code == 400
    assert (await http.put(f"/jobs/{job_id}/data", content=b"{nope")).json() == {
        "ok": False, "error": "Invalid JSON body"}


async def test_move_to_delayed_move_to_wait_and_discard(http: httpx.AsyncClient) -> None:
    job_id = await push(http)
    _, token = await pull(http)
    assert (await http.post(f"/jobs/{job_id}/move-to-delayed",
                            json={"token": token})).status_code == 400  # delay is required
    moved = await http.post(f"/jobs/{job_id}/move-to-delayed",
                            json={"delay": 60_000, "token": token})
    assert moved.status_code == 200, moved.text
    assert (await http.get(f"/jobs/{job_id}/state")).json()["state"] == "delayed"
    assert (await http.post(f"/jobs/{job_id}/move-to-wait", json={})).status_code == 200
    assert (await http.get(f"/jobs/{job_id}/state")).json()["state"] == "waiting"
    assert (await http.post("/jobs/nope/move-to-wait", json={})).status_code == 400
    assert (await http.post(f"/jobs/{job_id}/discard", json={})).status_code == 200
    assert (await http.get(f"/jobs/{job_id}/state")).json()["state"] == "failed"
    assert (await http.post("/jobs/nope/discard")).status_code == 400


async def test_wait_answers_when_the_job_completes(http: httpx.AsyncClient) -> None:
    job_id = await push(http)
    answers: list[httpx.Response] = []

    async def wait() -> None:
        answers.append(await http.post(f"/jobs/{job_id}/wait", json={"timeout": 10_000}))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        _, token = await pull(http)
        await http.post(f"/jobs/{job_id}/ack", json={"token": token, "result": 42})
    assert answers[0].status_code == 200
    assert answers[0].json() == {"ok": True, "completed": True, "result": 42}
    assert (await http.post("/jobs/nope/wait", json={"timeout": 10})).status_code == 400


async def test_logs_add_read_and_clear(http: httpx.AsyncClient) -> None:
    job_id = await push(http)
    for message in ("one", "two"):
        added = await http.post(f"/jobs/{job_id}/logs", json={"message": message})
        assert added.status_code == 200 and added.json()["data"] == {"added": True}
    logs = (await http.get(f"/jobs/{job_id}/logs")).json()["data"]
    assert [entry["message"] for entry in logs["logs"]] == ["one", "two"]
    page = (await http.get(f"/jobs/{job_id}/logs?start=1&end=1")).json()["data"]
    assert [entry["message"] for entry in page["logs"]] == ["two"] and page["count"] == 2
    assert (await http.delete(f"/jobs/{job_id}/logs")).status_code == 200
    assert (await http.get(f"/jobs/{job_id}/logs")).json()["data"]["logs"] == []
    assert (await http.post("/jobs/nope/logs", json={"message": "x"})).status_code == 400
    assert (await http.post(f"/jobs/{job_id}/logs", content=b"{")).status_code == 400
