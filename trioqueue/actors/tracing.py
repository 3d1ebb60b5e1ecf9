"""The broker's OpenTelemetry spans, made only when ``Config.otel_enabled`` is on.

Off (the default) this module is not even imported: the router holds ``tracing = None``
and pays one ``is not None`` per batch. On, :func:`broker_tracing` imports
``opentelemetry-api`` (refusing to start, with one line, when it is missing) and the
router hands every batch it takes to :meth:`BrokerTracing.take`, which starts one span
per PUSH/PUSHB, PULL/PULLB and ACK/ACKB request and wraps the request's replier so the
span ends when the reply is delivered (whatever answers it: the router, a queue actor,
a join of a split ACKB, the writer after a commit).

Names follow OpenTelemetry's messaging conventions: ``send <queue>`` (PUSH, PUSHB),
``receive <queue>`` (PULL, PULLB), ``settle <queue>`` (ACK, ACKB), kind SERVER (the
broker is neither the producer nor the consumer), with ``messaging.system`` =
``trioqueue``, ``messaging.destination.name`` = the queue, ``messaging.operation.type``
and ``messaging.operation.name`` (the command). One span per request, not per job, as
the conventions ask of batch operations: a single job's id is ``messaging.message.id``,
a batch's ids are ``trioqueue.job.ids`` with ``messaging.batch.message_count``; a span
per job would multiply what the exporter carries by the batch size for nothing a
reader could not get from the ids.

Trace context (core/trace_context.py): a push whose job(s) carry one context is its
child (a PUSHB whose jobs carry several links to each); a pull links to the context of
every job it delivers (known only with the reply, hence ``Span.add_link``, API 1.23),
an ack to the stored context of every job it settles (read from the queue's live jobs
as the router takes the batch, before the ack can remove them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core.errors import Refused
from ..core.trace_context import trace_context
from .request import OnReply, Request

if TYPE_CHECKING:
    from ..core.commands.registry import Command
    from .router import Router

OTEL_MISSING = ("OpenTelemetry is enabled (--otel / TRIOQUEUE_OTEL) but opentelemetry-api "
                "is not installed: pip install 'trioqueue[otel]'")
SYSTEM = "trioqueue"
# command -> the operation type of its span
OPERATIONS = {"PUSH": "send", "PUSHB": "send", "PULL": "receive", "PULLB": "receive",
              "ACK": "settle", "ACKB": "settle"}


class TracingUnavailable(RuntimeError):
    """Tracing was asked for and opentelemetry-api cannot be imported."""


def broker_tracing() -> BrokerTracing:
    """The broker's tracing, importing OpenTelemetry now (TracingUnavailable if absent)."""
    try:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import (
            TraceContextTextMapPropagator,
        )
    except ImportError:
        raise TracingUnavailable(OTEL_MISSING) from None
    return BrokerTracing(trace, TraceContextTextMapPropagator())


class BrokerTracing:
    def __init__(self, trace: Any, propagator: Any) -> None:
        self._trace = trace
        # W3C only, whatever the process's global propagator is: the option is W3C's.
        self._propagator = propagator
        self._tracer = trace.get_tracer("trioqueue.broker")

    def take(self, routed: list[tuple[Command, Request]], router: Router) -> None:
        """Start the span of every traced request of a batch the router takes."""
        for _, req in routed:
            operation = OPERATIONS.get(req.cmd)
            if operation is not None:
                self._start(operation, req, router)

    def _start(self, operation: str, req: Request, router: Router) -> None:
        msg = req.msg
        queue, ids, contexts = (_push(req.cmd, msg) if operation == "send" else
                                _settle(msg, router) if operation == "settle" else
                                (msg.get("queue"), None, []))
        spans = [self._span_context(c) for c in contexts]
        spans = [s for s in spans if s is not None]
        parent = None
        if operation == "send" and spans and all(s == spans[0] for s in spans):
            # the producer's context: this push is a step of its trace
            parent = self._trace.set_span_in_context(self._trace.NonRecordingSpan(spans[0]))
        links = [] if parent is not None else [self._trace.Link(s) for s in _unique(spans)]
        name = f"{operation} {queue}" if isinstance(queue, str) else operation
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM, "messaging.operation.type": operation,
            "messaging.operation.name": req.cmd}
        if isinstance(queue, str):
            attributes["messaging.destination.name"] = queue
        span = self._tracer.start_span(name, context=parent, kind=self._trace.SpanKind.SERVER,
                                       attributes=attributes, links=links)
        if ids is not None:
            _set_ids(span, ids)
        req.replier = OnReply(req.replier, _Ending(self, span, operation).seen)

    def _span_context(self, carrier: Any) -> Any:
        """The span context a stored or pushed ``traceContext`` names (None: none)."""
        if carrier is None:
            return None
        context = self._propagator.extract(carrier)
        span_context = self._trace.get_current_span(context).get_span_context()
        return span_context if span_context.is_valid else None


class _Ending:
    """Ends a request's span when its reply is delivered."""

    __slots__ = ("_tracing", "_span", "_operation")

    def __init__(self, tracing: BrokerTracing, span: Any, operation: str) -> None:
        self._tracing = tracing
        self._span = span
        self._operation = operation

    def seen(self, reply: dict[str, Any]) -> None:
        span = self._span
        if not reply.get("ok"):
            trace = self._tracing._trace
            span.set_status(trace.Status(trace.StatusCode.ERROR, str(reply.get("error"))))
        elif self._operation == "send":
            _set_ids(span, reply["ids"] if "ids" in reply else [reply.get("id")])
        elif self._operation == "receive":
            given = reply["jobs"] if "jobs" in reply else [reply.get("job")]
            jobs: list[dict[str, Any]] = [job for job in given if isinstance(job, dict)]
            _set_ids(span, [job.get("id") for job in jobs])
            linked = [self._tracing._span_context(job.get("traceContext")) for job in jobs]
            for span_context in _unique([s for s in linked if s is not None]):
                span.add_link(span_context)
        span.end()


def _set_ids(span: Any, ids: list[Any]) -> None:
    ids = [job_id for job_id in ids if isinstance(job_id, str)]
    if len(ids) == 1:
        span.set_attribute("messaging.message.id", ids[0])
    elif ids:
        span.set_attribute("messaging.batch.message_count", len(ids))
        span.set_attribute("trioqueue.job.ids", ids)


def _checked(value: Any) -> dict[str, str] | None:
    """A pushed job's ``traceContext`` if it is valid (an invalid one refuses the push,
    which the queue reports; the span just has no parent)."""
    if value is None:
        return None
    try:
        return trace_context(value)
    except Refused:
        return None


def _push(cmd: str, msg: dict[str, Any]) -> tuple[Any, None, list[Any]]:
    jobs = msg.get("jobs")
    items = jobs if cmd == "PUSHB" and isinstance(jobs, list) else [msg]
    contexts = [_checked(item.get("traceContext")) for item in items if isinstance(item, dict)]
    return msg.get("queue"), None, contexts


def _settle(msg: dict[str, Any], router: Router) -> tuple[Any, list[Any], list[Any]]:
    """The queue, ids and stored contexts of the jobs an ACK/ACKB settles."""
    ids = msg.get("ids") if "ids" in msg else [msg.get("id")]
    if not isinstance(ids, list):
        return None, [], []
    queue = None
    contexts = []
    for job_id in ids:
        name = router.locate(job_id) if isinstance(job_id, str) else None
        if name is None:
            continue
        queue = queue or name
        job = router.actors[name].state.jobs.get(job_id)
        if job is not None:
            contexts.append(job.trace_context)
    return queue, ids, contexts


def _unique(spans: list[Any]) -> list[Any]:
    seen: dict[tuple[int, int], Any] = {}
    for span in spans:
        seen.setdefault((span.trace_id, span.span_id), span)
    return list(seen.values())
