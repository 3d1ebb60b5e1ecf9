"""The shape of a REST route: what a route is given, what it answers, how it is found.

A route is a method, a path pattern (``/jobs/{id}/state``: each ``{name}`` one
URL-decoded segment) and an async handler ``(Call, RunCommand) -> Response``. Most
handlers build one command message and answer its reply (:func:`command`); a few run
several commands (a summary of every queue). The table of bunqueue's routes is
:mod:`.routes`; the ASGI app (:mod:`..app`) does auth, limits and errors
around it.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol
from urllib.parse import unquote

from ....core.large_values.graveyard import Graveyard
from ...large.json_text import decode_large_json
from ...wire.codec import JSON, DecodeError


class RunCommand(Protocol):
    """Runs one command message; ``size_bytes``: the request body it came in (what
    admission counts a new job's record by, as a TCP frame's size); ``json_bound``: an
    upper bound of that body's JSON text, if measured (as a large TCP frame's)."""

    def __call__(self, msg: dict[str, Any], size_bytes: int = 0,
                 json_bound: int | None = None) -> Awaitable[dict[str, Any]]: ...


INVALID_JSON = "Invalid JSON body"
_NOT_DECODED: Any = object()


class InvalidBody(Exception):
    """The request's body is not the JSON the route needs (answered 400)."""

    def __init__(self, message: str = INVALID_JSON) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class Call:
    """One request as a route sees it."""

    method: str
    path: str
    params: dict[str, str]  # the pattern's {names}, URL-decoded
    query: dict[str, list[str]]  # every value of each query parameter, in order
    body: bytes = b""
    # A large body, decoded before the route runs (in slices, see decoded_call): its
    # value (a DecodeError if it is not JSON) and the bound of its JSON text.
    decoded: Any = _NOT_DECODED
    json_bound: int | None = None

    def arg(self, name: str) -> str | None:
        """The first value of query parameter ``name`` (None when absent)."""
        values = self.query.get(name)
        return values[0] if values else None

    def json(self) -> Any:
        """The body as JSON; :class:`InvalidBody` when it is empty or malformed."""
        if self.decoded is not _NOT_DECODED:
            if isinstance(self.decoded, DecodeError):
                raise InvalidBody()
            return self.decoded
        try:
            return JSON.decode(self.body)  # validated as a WebSocket text message is
        except DecodeError as exc:
            raise InvalidBody() from exc

    def object(self, *, optional: bool = False) -> dict[str, Any]:
        """The body as a JSON object; with ``optional`` an empty body is ``{}``."""
        if optional and not self.body.strip():
            return {}
        value = self.json()
        if not isinstance(value, dict):
            raise InvalidBody()
        return value


async def decoded_call(call: Call, *, large_bytes: int, bound_up_to: int,
                       graveyard: Graveyard | None = None) -> Call:
    """``call`` with its body decoded, when it is at least ``large_bytes`` long: in
    slices, other connections served between two, as a large TCP frame is (one json
    call over megabytes of small values would hold the event loop), and with the bound
    of its JSON text, which lets the core skip measuring job data that fits. What a
    malformed body made goes to ``graveyard``."""
    if not large_bytes or len(call.body) < large_bytes:
        return call
    try:
        value, bound = await decode_large_json(call.body, bound_up_to=bound_up_to,
                                               graveyard=graveyard)
    except DecodeError as exc:
        # (fresh: the raised one's traceback holds what the walk made)
        return replace(call, decoded=exc.fresh())
    return replace(call, decoded=value, json_bound=bound)


def error_body(message: str) -> dict[str, Any]:
    """The body of every refusal on the HTTP port, as a command's: ``ok: false``."""
    return {"ok": False, "error": message}


@dataclass(slots=True)
class Response:
    status: int
    body: Any  # JSON-encodable; bytes or str are sent as they are
    content_type: str = "application/json"
    headers: list[tuple[str, str]] = field(default_factory=list)


Handler = Callable[[Call, RunCommand], Awaitable[Response]]


def reply_status(reply: dict[str, Any], *, lookup: bool = False) -> int:
    """bunqueue's statuses for a command's reply: 200, 400 on ``ok: false``, and 404
    for a lookup whose refusal says ``not found``."""
    if reply.get("ok", True) is not False:
        return 200
    error = reply.get("error")
    if lookup and isinstance(error, str) and "not found" in error.lower():
        return 404
    return 400


def command(build: Callable[[Call], dict[str, Any]], *, lookup: bool = False,
            always_ok: bool = False) -> Handler:
    """A route that runs the one command ``build`` makes of the request and answers
    its reply: 200, or 400 on ``ok: false`` (404 for a lookup's ``not found``);
    ``always_ok`` answers 200 whatever the reply says (bunqueue's PULL routes)."""

    async def handle(call: Call, run: RunCommand) -> Response:
        reply = await run(build(call), len(call.body), call.json_bound)
        return Response(200 if always_ok else reply_status(reply, lookup=lookup), reply)

    return handle


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    pattern: str
    handler: Handler
    # A GET that changes state (a pull claims a job): checked as a write against
    # cross-site pages (transport/http/origin.py), though browsers send it unasked.
    changes_state: bool = False


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


_PARAM = re.compile(r"\{([a-zA-Z_]+)\}")


class RouteTable:
    """Routes found by method and path: literal paths by one dict lookup, patterns
    tried in declaration order (a literal path declared before a pattern that would
    also match it wins: ``/queues/summary`` before ``/queues/{queue}``)."""

    def __init__(self, routes: Iterable[Route]) -> None:
        self._exact: dict[tuple[str, str], Handler] = {}
        self._patterns: list[tuple[str, re.Pattern[str], Handler]] = []
        # the safe-method routes that change state: few, so looking first is cheap
        self._unsafe_reads: list[tuple[str, re.Pattern[str]]] = []
        for route in routes:
            regex = re.compile("^" + _PARAM.sub(
                lambda m: f"(?P<{m.group(1)}>[^/]+)",
                re.escape(route.pattern).replace(r"\{", "{").replace(r"\}", "}")) + "$")
            if route.changes_state and route.method in SAFE_METHODS:
                self._unsafe_reads.append((route.method, regex))
            if "{" not in route.pattern:
                self._exact.setdefault((route.method, route.pattern), route.handler)
                continue
            self._patterns.append((route.method, regex, route.handler))

    def changes_state(self, method: str, path: str) -> bool:
        """Whether a request may change state: any method but GET, HEAD and OPTIONS,
        and a route declared ``changes_state``."""
        if method not in SAFE_METHODS:
            return True
        return any(route_method == method and regex.match(path)
                   for route_method, regex in self._unsafe_reads)

    def find(self, method: str, path: str) -> tuple[Handler, dict[str, str]] | None:
        handler = self._exact.get((method, path))
        if handler is not None:
            return handler, {}
        for route_method, regex, route_handler in self._patterns:
            if route_method != method:
                continue
            found = regex.match(path)
            if found is not None:
                return route_handler, {k: unquote(v) for k, v in found.groupdict().items()}
        return None
