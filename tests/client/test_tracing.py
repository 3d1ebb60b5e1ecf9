"""OpenTelemetry in the client (client/tracing.py): a job added inside the app's span is
processed in a worker span of the same trace, parented on it, on every connection mode
and on trio and asyncio."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from trioqueue.client import Connection, Job, Queue, Worker
from trioqueue.client.errors import ValidationError
from trioqueue.client.tracing import OTEL_MISSING

from .test_worker import started, wait_job

pytestmark = pytest.mark.anyio

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def process_spans(exporter: Any, queue: str) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if s.name == f"process {queue}"]


@pytest.mark.parametrize("threaded", [False, True])
async def test_worker_span_is_in_the_producers_trace(conn: Connection, span_exporter: Any,
                                                     threaded: bool) -> None:
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind

    name = f"t-trace-{threaded}"
    queue = Queue(name, conn, telemetry=True)
    with trace.get_tracer("app").start_as_current_span("checkout") as app_span:
        job = await queue.add("charge", {"n": 1})
        bulk = await queue.add_bulk([{"name": "b", "data": i} for i in range(2)])
    app = app_span.get_span_context()
    assert job.trace_context is not None and bulk[0].trace_context == job.trace_context

    def work(job: Job) -> int:
        return int(job.data["n"] if isinstance(job.data, dict) else job.data)

    async def work_async(job: Job) -> int:
        return work(job)

    worker = Worker(name, work if threaded else work_async, conn, concurrency=3,
                    telemetry=True)
    async with started(worker):
        for job_id in [job.id] + [b.id for b in bulk]:
            assert (await wait_job(conn, job_id))["completed"] is True
        await worker.close()
    spans = process_spans(span_exporter, name)
    assert sorted(s.attributes["messaging.message.id"] for s in spans) == sorted(
        [job.id] + [b.id for b in bulk])
    for span in spans:
        assert span.kind == SpanKind.CONSUMER
        assert span.context.trace_id == app.trace_id
        assert span.parent is not None and span.parent.span_id == app.span_id
        assert span.attributes["messaging.destination.name"] == name
        assert span.attributes["messaging.system"] == "trioqueue"


async def test_a_failing_processor_marks_its_span(conn: Connection,
                                                  span_exporter: Any) -> None:
    from opentelemetry.trace import StatusCode

    queue = Queue("t-trace-fail", conn)
    job = await queue.add("x", None, attempts=1,
                          trace_context={"traceparent": PARENT, "tracestate": "k=v"})
    assert job.trace_context == {"traceparent": PARENT, "tracestate": "k=v"}

    async def boom(job: Job) -> None:
        raise RuntimeError("no luck")

    worker = Worker("t-trace-fail", boom, conn, telemetry=True)
    async with started(worker):
        assert (await wait_job(conn, job.id))["completed"] is False
        await worker.close()
    (span,) = process_spans(span_exporter, "t-trace-fail")
    assert span.status.status_code == StatusCode.ERROR
    assert format(span.context.trace_id, "032x") == PARENT.split("-")[1]
    assert [event.name for event in span.events] == ["exception"]


async def test_without_telemetry_nothing_is_carried_or_traced(
        conn: Connection, span_exporter: Any) -> None:
    from opentelemetry import trace

    queue = Queue("t-trace-off", conn)
    with trace.get_tracer("app").start_as_current_span("checkout"):
        job = await queue.add("x", 1)
    assert job.trace_context is None
    assert (await queue.get_job(job.id)).trace_context is None  # type: ignore[union-attr]

    async def work(job: Job) -> None:
        return None

    worker = Worker("t-trace-off", work, conn)
    async with started(worker):
        assert (await wait_job(conn, job.id))["completed"] is True
        await worker.close()
    assert process_spans(span_exporter, "t-trace-off") == []


async def test_no_current_span_no_context(conn: Connection, span_exporter: Any) -> None:
    job = await Queue("t-trace-none", conn, telemetry=True).add("x", 1)
    assert job.trace_context is None


async def test_a_bad_trace_context_is_refused_before_sending(conn: Connection) -> None:
    with pytest.raises(ValidationError, match="trace_context: traceContext.traceparent"):
        await Queue("t-trace-bad", conn).add("x", 1, trace_context={"traceparent": "nope"})


async def test_telemetry_without_the_package_says_how_to_install(
        monkeypatch: pytest.MonkeyPatch, conn: Connection) -> None:
    from trioqueue.client import tracing

    tracing._otel.cache_clear()
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    try:
        with pytest.raises(ImportError, match="trioqueue\\[otel\\]") as missing:
            Queue("t-trace-missing", conn, telemetry=True)
        assert str(missing.value) == OTEL_MISSING
        with pytest.raises(ImportError, match="trioqueue\\[otel\\]"):
            Worker("t-trace-missing", print, conn, telemetry=True)
    finally:
        tracing._otel.cache_clear()
