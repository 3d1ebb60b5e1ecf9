"""``export QUEUE FILE`` / ``import FILE``: an export imported into an empty broker
recreates the jobs that had not finished, with the fields trioqueue.admin.transfer
lists; finished ones are skipped and counted."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trioqueue.server.run import Server
from trioqueue.testing import RawClient

from .conftest import Cli

# What a re-pushed job keeps (trioqueue/admin/transfer.py's docstring).
KEPT = ("id", "queue", "name", "data", "priority", "createdAt", "runAt", "maxAttempts",
        "backoff", "backoffConfig", "ttl", "timeout", "uniqueKey", "tags", "groupId",
        "lifo", "removeOnComplete", "removeOnFail", "stallTimeout", "stackTraceLimit")


async def _fill(broker: Server) -> None:
    """A queue with a job in each state an export meets."""
    client = await RawClient.connect(broker.tcp_port or 0)
    await client.ok("PUSH", queue="q", name="plain", data={"n": 1}, jobId="w1")
    await client.ok("PUSH", queue="q", name="urgent", data=[1, 2], priority=9, jobId="p1",
                    tags=["a"], maxAttempts=7, backoff={"type": "fixed", "delay": 250},
                    ttl=3_600_000, timeout=5000, uniqueKey="u1", lifo=True,
                    removeOnComplete=True)
    await client.ok("PUSH", queue="q", name="later", data="x", delay=3_600_000, jobId="d1")
    await client.ok("PUSH", queue="q", name="done", data=None, jobId="c1")
    await client.ok("PUSH", queue="q", name="bad", data=None, jobId="f1", maxAttempts=1)
    await client.ok("PUSH", queue="q", name="busy", data=None, jobId="a1")
    for job_id, act in (("c1", "ACK"), ("f1", "FAIL")):
        await client.ok("ChangePriority", id=job_id, priority=100)
        pulled = (await client.ok("PULL", queue="q"))["job"]
        assert pulled["id"] == job_id
        await client.ok(act, id=job_id)
    await client.ok("ChangePriority", id="a1", priority=100)
    assert (await client.ok("PULL", queue="q", detach=True))["job"]["id"] == "a1"
    await client.aclose()


async def test_export_then_import_recreates_the_unfinished_jobs(
        cli: Cli, broker: Server, start_server: Callable[..., Any], tmp_path: Path) -> None:
    await _fill(broker)
    path = tmp_path / "q.jsonl"
    exported = (await cli("export", "q", str(path), "--page-size", "2", "--json")).json()
    assert exported["jobs"] == 6
    assert exported["states"] == {"waiting": 1, "prioritized": 1, "delayed": 1,
                                  "active": 1, "completed": 1, "failed": 1}
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted(job["id"] for job in lines) == ["a1", "c1", "d1", "f1", "p1", "w1"]
    before = {job["id"]: job for job in lines}

    empty: Server = await start_server(memory=True)
    imported = (await cli("import", str(path), "--json", broker_port=empty.tcp_port)).json()
    assert imported == {"file": str(path), "read": 6, "pushed": 4,
                        "skipped": {"completed": 1, "failed": 1}}
    after = (await cli("jobs", "q", "--json", broker_port=empty.tcp_port)).json()["jobs"]
    assert sorted(job["id"] for job in after) == ["a1", "d1", "p1", "w1"]
    for job in after:
        assert {k: job[k] for k in KEPT} == {k: before[job["id"]][k] for k in KEPT}
    states = {job["id"]: job["state"] for job in after}
    # the active one is queued again (with the priority it was pulled first by)
    assert states == {"w1": "waiting", "p1": "prioritized", "d1": "delayed",
                      "a1": "prioritized"}

    again = (await cli("import", str(path), "--json", broker_port=empty.tcp_port)).json()
    assert again["pushed"] == 4  # the same ids: nothing added twice
    assert len((await cli("jobs", "q", "--json", broker_port=empty.tcp_port)).json()[
        "jobs"]) == 4


async def test_export_to_stdout_and_import_into_another_queue(
        cli: Cli, broker: Server, tmp_path: Path) -> None:
    for i in range(7):
        await cli("add", "src", "n", "--data", str(i), "--job-id", f"s{i}")
    streamed = await cli("export", "src", "-", "--page-size", "3")
    assert streamed.status == 0
    assert [json.loads(line)["id"] for line in streamed.out.splitlines()] == [
        f"s{i}" for i in range(7)]
    assert streamed.err == "exported 7 jobs of src to - (waiting 7)\n"
    path = tmp_path / "src.jsonl"
    path.write_text(streamed.out)
    await cli("obliterate", "src", "--yes")
    done = await cli("import", str(path), "--queue", "dst", "--batch-size", "2")
    assert done.out.strip() == f"imported 7 of 7 jobs from {path}"
    moved = (await cli("jobs", "dst", "--json")).json()["jobs"]
    assert [job["data"] for job in moved] == list(range(7))


async def test_import_stops_at_a_line_that_is_not_json(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "ok1", "queue": "q", "name": "n", "state": "waiting"}\n'
                    '{"id": \n')
    failed = await cli("import", str(path), "--batch-size", "1")
    assert (failed.status, failed.out) == (1, "")
    assert failed.err == (f"error: {path} line 2 is not JSON (Expecting value: line 1 "
                          f"column 7 (char 6)); 1 jobs were pushed before it\n")


async def test_export_to_an_unwritable_file(cli: Cli, tmp_path: Path) -> None:
    target = tmp_path / "missing" / "q.jsonl"
    failed = await cli("export", "q", str(target))
    assert (failed.status, failed.err) == (
        1, f"error: cannot open {target}: No such file or directory\n")
