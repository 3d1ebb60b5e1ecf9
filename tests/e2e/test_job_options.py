"""One job-options validator behind every entry point: the same bad option is refused
with the same text over TCP (msgpack, as bunqueue's clients speak it), WebSocket, REST
(its top-level fields and its ``opts``) and the ``trioqueue add`` command; and what one
of them admits, the others admit too, stored alike."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import open_websocket_url

from trioqueue.cli import main
from trioqueue.server.run import Server
from trioqueue.testing import RawClient

from .test_websocket import next_json


@pytest.fixture
async def broker(start_server: Callable[..., Any]) -> Server:
    srv: Server = await start_server(memory=True)
    return srv


@pytest.fixture
async def http(broker: Server) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{broker.ws_port}",
                                 timeout=10.0) as client:
        yield client


async def tcp_push(broker: Server, **fields: Any) -> dict[str, Any]:
    assert broker.tcp_port is not None
    client = await RawClient.connect(broker.tcp_port, "msgpack")
    try:
        return await client.call("PUSH", queue="opts", name="n", data={}, **fields)
    finally:
        await client.aclose()


async def ws_push(broker: Server, **fields: Any) -> dict[str, Any]:
    async with open_websocket_url(f"ws://127.0.0.1:{broker.ws_port}/ws") as ws:
        await ws.send_message(json.dumps({"cmd": "PUSH", "queue": "opts", "name": "n",
                                          "data": {}, "reqId": "1", **fields}))
        reply: dict[str, Any] = await next_json(ws)
        return reply


async def rest_push(http: httpx.AsyncClient, **body: Any) -> httpx.Response:
    return await http.post("/queues/opts/jobs", json={"name": "n", "data": {}, **body})


async def run_cli(broker: Server, capsys: pytest.CaptureFixture[str], *argv: str
                  ) -> tuple[int, str, str]:
    """``trioqueue ARGV`` against ``broker``, as a person types it: status, out, err."""
    env = {"TRIOQUEUE_TCP_PORT": str(broker.tcp_port)}
    capsys.readouterr()
    with trio.fail_after(20):
        try:
            status = await trio.to_thread.run_sync(main, list(argv), env)
        except SystemExit as exc:  # argparse refusing the command line
            status = int(exc.code or 0)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


async def get_job(http: httpx.AsyncClient, job_id: str) -> dict[str, Any]:
    job: dict[str, Any] = (await http.get(f"/jobs/{job_id}")).json()["job"]
    return job


# (PUSH fields, REST ``opts`` in bunqueue's SDK names, `trioqueue add` flags, the text)
BAD_OPTIONS = [
    ({"delay": "soon"}, {"delay": "soon"}, ("--delay", "soon"), "delay must be a number"),
    ({"maxAttempts": "many"}, {"attempts": "many"}, ("--attempts", "many"),
     "maxAttempts must be a number"),
    ({"priority": "1e3"}, {"priority": "1e3"}, ("--priority", "1e3"),
     "priority must be a number"),
    ({"timeout": -1}, {"timeout": -1}, ("--timeout", "-1"), "timeout must be at least 0"),
    ({"backoff": {"delay": 10, "maxDelay": 86_400_001}},
     {"backoff": {"delay": 10, "maxDelay": 86_400_001}},
     ("--backoff", "10", "--backoff-max-delay", "86400001"),
     "backoff.maxDelay must be at most 86400000"),
]


@pytest.mark.parametrize(("fields", "opts", "flags", "text"), BAD_OPTIONS,
                         ids=[case[3].split()[0] for case in BAD_OPTIONS])
async def test_the_same_bad_option_is_refused_with_the_same_text_everywhere(
        broker: Server, http: httpx.AsyncClient, capsys: pytest.CaptureFixture[str],
        fields: dict[str, Any], opts: dict[str, Any], flags: tuple[str, ...], text: str
) -> None:
    over_tcp = await tcp_push(broker, **fields)
    over_ws = await ws_push(broker, **fields)
    top_level = await rest_push(http, **fields)
    nested = await rest_push(http, opts=opts)
    status, out, err = await run_cli(broker, capsys, "add", "opts", "n", *flags)
    assert (over_tcp["ok"], over_tcp["error"]) == (False, text)
    assert (over_ws["ok"], over_ws["error"]) == (False, text)
    assert (top_level.status_code, top_level.json()) == (400, {"ok": False, "error": text})
    assert (nested.status_code, nested.json()) == (400, {"ok": False, "error": text})
    # the command says the broker's words, on one line, with a refusal's status
    assert (status, out, err) == (1, "", f"error: {text}\n")
    assert (await get_job_counts(http))["waiting"] == 0  # nothing was pushed anywhere


async def get_job_counts(http: httpx.AsyncClient) -> dict[str, int]:
    counts: dict[str, int] = (await http.get("/queues/opts/counts")).json()["counts"]
    return counts


async def test_rest_push_takes_the_sdk_options_in_opts(http: httpx.AsyncClient) -> None:
    pushed = await rest_push(http, opts={
        "jobId": "order-7", "delay": 60_000, "priority": 4, "attempts": 5,
        "backoff": {"type": "fixed", "delay": 250, "maxDelay": 1000},
        "removeOnComplete": True, "tags": ["t"], "ttl": 90_000, "timeout": 3000,
        "deduplication": {"id": "once", "ttl": 5000}, "lifo": True})
    assert pushed.status_code == 200, pushed.text
    job_id = pushed.json()["id"]
    job = await get_job(http, job_id)
    assert job["customId"] == "order-7" and job["state"] == "delayed"
    assert job["runAt"] - job["createdAt"] == 60_000
    assert (job["priority"], job["maxAttempts"], job["backoff"]) == (4, 5, 250)
    assert job["backoffConfig"] == {"type": "fixed", "delay": 250, "maxDelay": 1000}
    assert job["removeOnComplete"] is True and job["lifo"] is True
    assert (job["tags"], job["ttl"], job["timeout"]) == (["t"], 90_000, 3000)
    assert job["uniqueKey"] == "once" and job["deduplicationTtl"] == 5000
    # jobId makes the push idempotent, over REST as over TCP
    again = await rest_push(http, opts={"jobId": "order-7"})
    assert again.json()["id"] == job_id
    # bunqueue's own top-level fields keep their meaning and win over opts
    both = await rest_push(http, priority=9, opts={"priority": 1, "attempts": 2})
    job = await get_job(http, both.json()["id"])
    assert (job["priority"], job["maxAttempts"]) == (9, 2)
    not_a_map = await rest_push(http, opts=[1])
    assert not_a_map.json() == {"ok": False, "error": "opts must be an object"}


async def test_rest_bulk_push_takes_opts_per_job(http: httpx.AsyncClient) -> None:
    pushed = await http.post("/queues/opts/jobs/bulk", json={"jobs": [
        {"name": "a", "data": 1, "opts": {"jobId": "bulk-a", "attempts": 7}},
        {"name": "b", "data": 2, "opts": {"delay": 60_000}}]})
    assert pushed.status_code == 200, pushed.text
    first, second = [await get_job(http, i) for i in pushed.json()["ids"]]
    assert (first["customId"], first["maxAttempts"]) == ("bulk-a", 7)
    assert second["state"] == "delayed"
    refused = await http.post("/queues/opts/jobs/bulk", json={"jobs": [
        {"name": "a", "opts": {"attempts": "x"}}]})
    assert refused.json() == {"ok": False, "error": "jobs[0]: maxAttempts must be a number"}


async def test_the_add_command_admits_what_the_broker_admits(
        broker: Server, http: httpx.AsyncClient, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fraction of a millisecond, attempts of 0 (runs once) or 2.5 (three runs), a
    numeric string with spaces: bunqueue's validator admits them on every entry point,
    and the command stores each as a PUSH of the same values over TCP does."""
    status, out, err = await run_cli(
        broker, capsys, "add", "opts", "n", "--delay", "1.5", "--attempts", "2.5",
        "--priority", " 3 ", "--job-id", "cli", "--json")
    assert (status, err) == (0, ""), err
    assert json.loads(out)["id"] == "cli"
    over_tcp = await tcp_push(broker, delay=1.5, maxAttempts=2.5, priority=3, jobId="tcp")
    from_cli, from_tcp = await get_job(http, "cli"), await get_job(http, over_tcp["id"])
    for job in (from_cli, from_tcp):
        assert (job["maxAttempts"], job["priority"]) == (3, 3)
        assert job["runAt"] - job["createdAt"] == 1  # run times are whole ms
    status, _, err = await run_cli(broker, capsys, "add", "opts", "once", "--attempts", "0")
    assert status == 0, err
    jobs = (await http.get("/queues/opts/jobs/list")).json()["jobs"]
    assert [job["maxAttempts"] for job in jobs if job["name"] == "once"] == [1]
