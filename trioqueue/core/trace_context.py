"""The ``traceContext`` job option: a W3C Trace Context carried with a job.

A producer that traces its work puts the context of its span in the job's options
(``traceContext: {traceparent, tracestate?}``, the two W3C headers as a map, which is
what OpenTelemetry's propagators read and write); the broker keeps it with the job,
returns it on the Job object (``traceContext``, only when set) and its own spans, when
tracing is on, link to it; a worker makes its processing span a child of it.

BullMQ carries the same thing as ``opts.telemetry.metadata``, a JSON text of the carrier
(stored as ``tm``); bunqueue has no such option. A map of the headers themselves needs
no second decoding and no JSON in the broker, so that is the shape kept here.

The bounds are the format's, not a tuning knob (like a job name's 256 characters): a
``traceparent`` is 55 characters in version 00, and later versions may only append
fields, so 128 leave room; the W3C asks that ``tracestate`` be propagated up to 512
characters, and that is the most kept. Anything else in the map is refused rather than
dropped, so a client learns at once that it was not kept.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .errors import Refused

MAX_TRACEPARENT_CHARS = 128
MAX_TRACESTATE_CHARS = 512

# version-traceid-parentid-flags, lower-case hex, and whatever a later version appends
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-[ -~]*)?\Z")

NOT_A_MAP = "traceContext must be an object with a traceparent"
BAD_KEYS = "traceContext holds only traceparent and tracestate"
BAD_TRACEPARENT = (f"traceContext.traceparent must be a W3C traceparent of at most "
                   f"{MAX_TRACEPARENT_CHARS} characters")
BAD_TRACESTATE = (f"traceContext.tracestate must be a string of at most "
                  f"{MAX_TRACESTATE_CHARS} printable ASCII characters")


def trace_context(value: Any) -> dict[str, str]:
    """The ``traceContext`` option checked and copied (the client's map is not kept)."""
    if not isinstance(value, Mapping) or "traceparent" not in value:
        raise Refused(NOT_A_MAP)
    if len(value) > 2 or any(key not in ("traceparent", "tracestate") for key in value):
        raise Refused(BAD_KEYS)
    parent = value["traceparent"]
    if (not isinstance(parent, str) or len(parent) > MAX_TRACEPARENT_CHARS
            or _TRACEPARENT.match(parent) is None):
        raise Refused(BAD_TRACEPARENT)
    kept = {"traceparent": parent}
    state = value.get("tracestate")
    if state is not None:
        if (not isinstance(state, str) or len(state) > MAX_TRACESTATE_CHARS
                or not (state.isascii() and state.isprintable())):
            raise Refused(BAD_TRACESTATE)
        if state:
            kept["tracestate"] = state
    return kept
