"""OpenTelemetry in the client: a producer's trace context carried to the job's worker.

Opt-in, per object: ``Queue(name, conn, telemetry=True)`` puts the context current at
``add`` / ``add_bulk`` (the app's span) in each job's ``traceContext`` option, unless
the job has one (the ``trace_context`` option); ``Worker(..., telemetry=True)`` runs
each job's processor in a CONSUMER span ``process <queue>`` whose parent is that
context, so the worker's span is part of the producer's trace. Opt-in rather than
"whenever a span is current": without it this module never imports OpenTelemetry, and
an app that traces other things does not start sending contexts through its jobs
unasked.

The format on the wire is W3C Trace Context (:mod:`trioqueue.core.trace_context`),
written and read with OpenTelemetry's W3C propagator whatever the app's global one is,
since the broker and other clients read that format. A worker's span when the job has
no context has the worker's current context as parent (usually none: a new trace).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..core.errors import Refused
from ..core.trace_context import trace_context
from .errors import ValidationError

if TYPE_CHECKING:
    from .job import Job

OTEL_MISSING = ("telemetry=True needs opentelemetry-api: pip install 'trioqueue[otel]'")
SYSTEM = "trioqueue"
TRACER_NAME = "trioqueue.client"


def check_trace_context(name: str, value: Any) -> dict[str, str]:
    """The ``trace_context`` job option (``{"traceparent", "tracestate"?}``): the broker's
    own rule (bounded W3C headers), refused here, naming the argument."""
    try:
        return trace_context(value)
    except Refused as exc:
        raise ValidationError(f"{name}: {exc.message}") from None


@functools.cache
def _otel() -> tuple[Any, Any]:
    """``opentelemetry.trace`` and a W3C propagator, imported on first use."""
    try:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import (
            TraceContextTextMapPropagator,
        )
    except ImportError:
        raise ImportError(OTEL_MISSING) from None
    return trace, TraceContextTextMapPropagator()


def require() -> None:
    """Fail now (ImportError with the install line) when OpenTelemetry is missing."""
    _otel()


def inject(wire: dict[str, Any]) -> None:
    """Put the current trace context in a job's wire options (kept if it has one; left
    out when no valid span is current)."""
    if "traceContext" in wire:
        return
    carrier: dict[str, str] = {}
    _otel()[1].inject(carrier)
    if carrier:
        wire["traceContext"] = carrier


def traced(processor: Callable[[Job], Any], queue_name: str) -> Callable[[Job], Any]:
    """``processor`` run inside the job's consumer span (async stays async; a plain
    function stays plain, so the worker still runs it in a thread, span and all)."""
    from .pulling import is_async_callable

    tracer = _otel()[0].get_tracer(TRACER_NAME)
    if is_async_callable(processor):
        async def run_async(job: Job) -> Any:
            with _process_span(tracer, queue_name, job):
                return await processor(job)

        return run_async

    def run(job: Job) -> Any:
        with _process_span(tracer, queue_name, job):
            return processor(job)

    return run


@contextmanager
def _process_span(tracer: Any, queue_name: str, job: Job) -> Iterator[Any]:
    trace, propagator = _otel()
    carrier = job.trace_context
    parent = propagator.extract(carrier) if carrier else None
    attributes = {"messaging.system": SYSTEM, "messaging.operation.type": "process",
                  "messaging.destination.name": queue_name, "messaging.message.id": job.id}
    # (an exception is recorded on the span and sets its status: the default)
    with tracer.start_as_current_span(f"process {queue_name}", context=parent,
                                      kind=trace.SpanKind.CONSUMER,
                                      attributes=attributes) as span:
        yield span
