"""``add``, ``jobs``, ``job`` and ``dlq list|retry|purge`` against a real broker."""

from __future__ import annotations

from trioqueue.server.run import Server
from trioqueue.testing import RawClient

from .conftest import Cli


async def test_add_with_options(cli: Cli) -> None:
    added = (await cli("add", "mail", "send", "--data", '{"to": "a@b.c", "n": [1, 2]}',
                       "--delay", "60000", "--priority", "7", "--attempts", "5",
                       "--job-id", "order-1", "--json")).json()
    assert added == {"queue": "mail", "id": "order-1"}
    shown = (await cli("job", "order-1", "--json")).json()
    job = shown["job"]
    assert (job["name"], job["data"], job["priority"], job["maxAttempts"]) == (
        "send", {"to": "a@b.c", "n": [1, 2]}, 7, 5)
    assert job["runAt"] - job["createdAt"] == 60000
    assert shown["state"] == "delayed"
    again = await cli("add", "mail", "send", "--job-id", "order-1")
    assert (again.status, again.out.strip()) == (0, "added order-1 to mail")


async def test_add_refuses_bad_json_with_one_line(cli: Cli) -> None:
    refused = await cli("add", "mail", "send", "--data", "{to: 1}")
    assert refused.status == 2 and refused.out == ""
    assert refused.err == ("error: --data is not valid JSON: Expecting property name "
                           "enclosed in double quotes: line 1 column 2 (char 1)\n")
    assert (await cli("queues", "--json")).json() == {"queues": []}


async def test_add_says_the_brokers_refusal(cli: Cli) -> None:
    refused = await cli("add", "bad queue!", "n")
    assert (refused.status, refused.out) == (1, "")
    assert refused.err == "error: Queue name contains invalid characters\n"


async def test_jobs_pages_and_filters(cli: Cli) -> None:
    for i in range(5):
        await cli("add", "q", f"n{i}", "--job-id", f"j{i}")
    await cli("add", "q", "later", "--delay", "60000", "--job-id", "d")
    page = (await cli("jobs", "q", "--state", "waiting", "--limit", "2", "--offset", "1",
                      "--json")).json()["jobs"]
    assert [job["id"] for job in page] == ["j1", "j2"]
    delayed = (await cli("jobs", "q", "--state", "delayed", "--json")).json()["jobs"]
    assert [job["id"] for job in delayed] == ["d"]
    both = (await cli("jobs", "q", "--state", "delayed", "--state", "waiting",
                      "--json")).json()["jobs"]
    assert len(both) == 6
    table = await cli("jobs", "q", "--limit", "2")
    assert "j0" in table.out and "j1" in table.out and "j2" not in table.out
    assert table.out.rstrip().endswith("2 jobs from offset 0; more with --offset 2")


async def test_job_shows_result_logs_and_progress(cli: Cli, broker: Server) -> None:
    client = await RawClient.connect(broker.tcp_port or 0)
    await cli("add", "q", "work", "--data", "3", "--job-id", "w")
    await client.ok("PULL", queue="q")
    await client.ok("Progress", id="w", progress=40, message="halfway")
    await client.ok("AddLog", id="w", message="started", level="info")
    active = (await cli("job", "w", "--json")).json()
    assert active["state"] == "active"
    assert active["progress"]["progress"] == 40 and active["progress"]["message"] == "halfway"
    assert [log["message"] for log in active["logs"]] == ["started"]
    await client.ok("ACK", id="w", result={"sum": 6})
    done = (await cli("job", "w", "--json")).json()
    assert (done["state"], done["result"], done["progress"]) == ("completed", {"sum": 6}, None)
    table = await cli("job", "w")
    assert '{"sum":6}' in table.out and "started" in table.out and "completed" in table.out
    await client.aclose()


async def test_job_not_found(cli: Cli) -> None:
    missing = await cli("job", "nope")
    assert (missing.status, missing.out, missing.err) == (1, "", "error: Job not found\n")


async def test_dlq_list_retry_purge(cli: Cli, broker: Server) -> None:
    client = await RawClient.connect(broker.tcp_port or 0)

    async def fail_one() -> None:
        job = (await client.ok("PULL", queue="q"))["job"]
        await client.ok("FAIL", id=job["id"], error="boom")

    await cli("add", "q", "flaky", "--attempts", "1", "--job-id", "f")
    await fail_one()
    entries = (await cli("dlq", "list", "q", "--json")).json()["entries"]
    assert [(e["job"]["id"], e["error"]) for e in entries] == [("f", "boom")]
    assert "boom" in (await cli("dlq", "list", "q")).out
    assert (await cli("dlq", "retry", "q", "--json")).json() == {"queue": "q", "count": 1}
    assert (await cli("job", "f", "--json")).json()["state"] == "waiting"
    await fail_one()
    refused = await cli("dlq", "purge", "q")
    assert refused.status == 2
    assert (await cli("dlq", "purge", "q", "--yes", "--json")).json() == {"queue": "q",
                                                                            "count": 1}
    assert (await cli("dlq", "list", "q")).out.strip() == "the DLQ of q is empty"
    await client.aclose()
