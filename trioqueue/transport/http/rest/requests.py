"""How a REST route turns its request into a command message.

bunqueue's routes name, one by one, the body fields each forwards to its command (a
key it does not name is ignored) and read query numbers with JavaScript's
``parseInt``. :func:`forward` builds such a message from a route's declaration, so the
route table reads as the list of what each route sends; :func:`parse_int` is that
``parseInt``, so a query string the reference accepts is accepted here and anything
else reaches the command as bunqueue's ``NaN`` does, for the command to refuse.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from .api import Call

Build = Callable[[Call], dict[str, Any]]

# JavaScript's parseInt(text, 10): optional leading whitespace and sign, then digits,
# anything after the digits ignored.
_LEADING_INT = re.compile(r"\s*([+-]?\d+)")


def parse_int(text: str) -> float:
    """``parseInt(text, 10)``: the leading integer of ``text``, or NaN without one."""
    found = _LEADING_INT.match(text)
    return int(found.group(1)) if found else math.nan


def query_ints(call: Call, names: tuple[str, ...]) -> dict[str, Any]:
    """The query parameters ``names`` that are present and not empty, ``parseInt``-ed
    (bunqueue reads an empty value as absent)."""
    out: dict[str, Any] = {}
    for name in names:
        raw = call.arg(name)
        if raw:
            out[name] = parse_int(raw)
    return out


def picked(body: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """The fields ``names`` that ``body`` has (an absent field stays absent, so the
    command applies its own default, as bunqueue's ``undefined`` does)."""
    return {name: body[name] for name in names if name in body}


def forward(cmd: str, param: str | None = None, *, key: str | None = None,
            body: tuple[str, ...] = (), ints: tuple[str, ...] = ()) -> Build:
    """A builder of ``{"cmd": cmd, ...}``: the path parameter ``param`` (sent as
    ``key``, by default its own name), the body fields ``body`` (an empty body is
    ``{}``; a body that is not a JSON object is 400 ``Invalid JSON body``) and the
    query numbers ``ints``."""

    def build(call: Call) -> dict[str, Any]:
        msg: dict[str, Any] = {"cmd": cmd}
        if param is not None:
            msg[key or param] = call.params[param]
        if body:
            msg.update(picked(call.object(optional=True), body))
        msg.update(query_ints(call, ints))
        return msg

    return build
