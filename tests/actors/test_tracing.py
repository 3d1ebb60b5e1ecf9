"""The broker's OpenTelemetry spans (actors/tracing.py), over real TCP connections.

With a tracer provider set for the test: PUSH/PUSHB, PULL/PULLB and ACK/ACKB each make a
span named for its operation and queue, carrying the job id(s); a pushed job's
traceContext parents the push span, and the pull and ack spans of that job link to it.
Off (the default) nothing is traced and OpenTelemetry is never imported; asked for
without the package, ``serve`` stops with one line.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trioqueue import cli
from trioqueue.actors.tracing import OTEL_MISSING
from trioqueue.testing import RawClient
from trioqueue.testing.process import BrokerProcess

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
OTHER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


async def traced_client(start_server: Callable[..., Any]) -> RawClient:
    server = await start_server(memory=True, otel_enabled=True)
    return await RawClient.connect(server.tcp_port)


def spans_named(exporter: Any, name: str) -> list[Any]:
    return [span for span in exporter.get_finished_spans() if span.name == name]


def trace_hex(span_context: Any) -> str:
    return format(span_context.trace_id, "032x")


async def test_push_pull_ack_spans_carry_the_job_and_queue(
        start_server: Callable[..., Any], span_exporter: Any) -> None:
    client = await traced_client(start_server)
    pushed = await client.ok("PUSH", queue="emails", name="n", data={},
                             traceContext={"traceparent": PARENT})
    pulled = await client.ok("PULL", queue="emails", owner="w1")
    await client.ok("ACK", id=pushed["id"], token=pulled["token"])

    (send,) = spans_named(span_exporter, "send emails")
    (receive,) = spans_named(span_exporter, "receive emails")
    (settle,) = spans_named(span_exporter, "settle emails")
    for span, operation, cmd in ((send, "send", "PUSH"), (receive, "receive", "PULL"),
                                 (settle, "settle", "ACK")):
        assert span.attributes["messaging.system"] == "trioqueue"
        assert span.attributes["messaging.destination.name"] == "emails"
        assert span.attributes["messaging.message.id"] == pushed["id"]
        assert span.attributes["messaging.operation.type"] == operation
        assert span.attributes["messaging.operation.name"] == cmd
    # the push is a step of the producer's trace; the pull and ack link to it
    assert send.parent is not None and trace_hex(send.parent) == TRACE_ID
    assert send.context.trace_id == send.parent.trace_id
    for span in (receive, settle):
        assert [trace_hex(link.context) for link in span.links] == [TRACE_ID]
    # the pulled job brings its context back to the worker
    assert pulled["job"]["traceContext"] == {"traceparent": PARENT}
    await client.aclose()


async def test_batch_spans_list_their_jobs(start_server: Callable[..., Any],
                                           span_exporter: Any) -> None:
    client = await traced_client(start_server)
    jobs = [{"name": "a", "traceContext": {"traceparent": PARENT}},
            {"name": "b", "traceContext": {"traceparent": OTHER, "tracestate": "k=v"}},
            {"name": "c"}]
    ids = (await client.ok("PUSHB", queue="q", jobs=jobs))["ids"]
    pulled = await client.ok("PULLB", queue="q", count=10, owner="w1")
    await client.ok("ACKB", ids=ids, tokens=pulled["tokens"])

    for name in ("send q", "receive q", "settle q"):
        (span,) = spans_named(span_exporter, name)
        assert list(span.attributes["trioqueue.job.ids"]) == ids
        assert span.attributes["messaging.batch.message_count"] == 3
        assert "messaging.message.id" not in span.attributes
        # two producers' contexts: linked, not a parent
        assert span.parent is None
        assert sorted(trace_hex(link.context) for link in span.links) == sorted(
            [TRACE_ID, OTHER.split("-")[1]])
    assert [job.get("traceContext") for job in pulled["jobs"]] == [
        {"traceparent": PARENT}, {"traceparent": OTHER, "tracestate": "k=v"}, None]
    await client.aclose()


async def test_a_refused_command_ends_its_span_as_an_error(
        start_server: Callable[..., Any], span_exporter: Any) -> None:
    from opentelemetry.trace import StatusCode

    client = await traced_client(start_server)
    reply = await client.call("PUSH", queue="q", name="n", data={},
                              traceContext={"traceparent": 7})
    assert reply["ok"] is False
    (span,) = spans_named(span_exporter, "send q")
    assert span.status.status_code == StatusCode.ERROR
    assert span.status.description == reply["error"]
    assert span.parent is None
    # an ack of a job nobody knows still ends its span (no queue to name)
    await client.call("ACK", id="nope", token="t")
    assert spans_named(span_exporter, "settle")
    await client.aclose()


async def test_off_by_default_no_spans(start_server: Callable[..., Any],
                                       span_exporter: Any) -> None:
    server = await start_server(memory=True)
    assert server.broker.router.tracing is None
    client = await RawClient.connect(server.tcp_port)
    await client.ok("PUSH", queue="q", name="n", data={},
                    traceContext={"traceparent": PARENT})
    pulled = await client.ok("PULL", queue="q")
    assert pulled["job"]["traceContext"] == {"traceparent": PARENT}  # carried all the same
    assert span_exporter.get_finished_spans() == ()
    await client.aclose()


async def test_the_context_is_kept_with_the_job_through_a_kill_9(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    await broker.start()
    try:
        client = await RawClient.connect(broker.tcp_port)
        context = {"traceparent": PARENT, "tracestate": "k=v"}
        pushed = await client.ok("PUSH", queue="q", name="n", data={},
                                 traceContext=context)
        await client.ok("PUSHF", jobs=[{"id": "flow-1", "queue": "q", "input": {
            "name": "f", "data": {}, "traceContext": context}}])
        await broker.kill(signal.SIGKILL)
        await client.aclose()
        await broker.start()
        client = await RawClient.connect(broker.tcp_port)
        for job_id in (pushed["id"], "flow-1"):
            job = (await client.ok("GetJob", id=job_id))["job"]
            assert job["traceContext"] == context
        await client.aclose()
    finally:
        await broker.stop()


# A broker with its defaults, pushing, pulling and acking, in a fresh interpreter: does
# anything import OpenTelemetry?
_UNTRACED = """
import sys, trio
from trioqueue.config import Config
from trioqueue.testing.served import served

async def main():
    async with served(Config(tcp_port=0, ws_port=0, memory=True)) as client:
        job_id = (await client.ok("PUSH", queue="q", name="n", data={}))["id"]
        token = (await client.ok("PULL", queue="q", owner="w"))["token"]
        await client.ok("ACK", id=job_id, token=token)

trio.run(main)
print(sorted(name for name in sys.modules if name.startswith("opentelemetry")))
"""


def test_off_by_default_opentelemetry_is_never_imported() -> None:
    out = subprocess.run([sys.executable, "-c", _UNTRACED], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(("argv", "env"), [(["--otel"], {}), ([], {"TRIOQUEUE_OTEL": "1"})])
def test_enabled_without_the_package_stops_with_one_line(
        monkeypatch: pytest.MonkeyPatch, argv: list[str], env: dict[str, str]) -> None:
    # As if opentelemetry-api were not installed: importing it fails.
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    with pytest.raises(SystemExit) as stopped:
        cli.main(["serve", "--memory", *argv], env=env)
    assert stopped.value.code == OTEL_MISSING
    assert "pip install 'trioqueue[otel]'" in OTEL_MISSING


def test_the_switch_reads_flag_and_variable() -> None:
    parser = cli.build_parser()
    assert cli.config_from(parser.parse_args(["serve"]), {}).otel_enabled is False
    assert cli.config_from(parser.parse_args(["serve", "--otel"]), {}).otel_enabled is True
    assert cli.config_from(parser.parse_args(["serve"]),
                           {"TRIOQUEUE_OTEL": "on"}).otel_enabled is True
    with pytest.raises(SystemExit, match="TRIOQUEUE_OTEL"):
        cli.config_from(parser.parse_args(["serve"]), {"TRIOQUEUE_OTEL": "maybe"})
