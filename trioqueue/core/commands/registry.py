"""The command registry: each command declared once, and refused when half-declared.

A :class:`Command` says everything the layers need to know about one command: how it
finds what it acts on (its *route*), what answers it, and the facts the router, the
session and the queue actor use around that handler: the reply for an id no queue
knows, the argument rules of a multi-id command, whether it may create jobs (a nearly
full store refuses those), whether it is a pull (its deliveries belong to the
connection), whether a session takes it before authentication. A
:class:`CommandTable` checks each declaration against what its route needs and refuses
one that lacks a piece, or carries a piece its route never reads (a sign it was given
the wrong route), so a half-declared command fails when the module that declares it is
imported, not as a ``KeyError`` in a session's task.

The tables the layers read (:attr:`CommandTable.routes`,
:attr:`~CommandTable.queue_handlers`, :attr:`~CommandTable.missing_job`, ...) are views
built once from the declarations: dict lookups on the hot path, as before.

The route vocabulary lives here, below both the session and the router that route by it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import Any

from ..errors import Refused

Reply = dict[str, Any]

# How a command names what it acts on. For the three id routes the route is also the
# name of the message field that holds the id.
BY_QUEUE = "queue"  # the ``queue`` field
BY_ID = "id"  # a job id: the router finds its queue
BY_CUSTOM_ID = "customId"
BY_PARENT_ID = "parentId"  # UpdateParent runs in the parent's queue
BY_IDS = "ids"  # a list of job ids, maybe in several queues: split, then merged
SESSION = "session"  # answered by the connection's session itself
BROKER = "broker"  # broker-wide state the router owns (workers, queues, memory)
FLOW = "flow"  # PUSHF: admitted by the router itself, across queues, in one commit
INTERNAL = "internal"  # sent by the broker to a queue; never accepted from a client

BY_ONE_ID = frozenset({BY_ID, BY_CUSTOM_ID, BY_PARENT_ID})
# Routes whose commands a queue actor applies with a handler of commands.jobs' shape.
QUEUE_ROUTES = BY_ONE_ID | {BY_QUEUE, BY_IDS, INTERNAL}

# Per route: the facets a declaration must have, and the optional ones it may have.
# ``handler`` is a queue handler (QueueState, msg, Ctx) on the queue routes, a session
# handler (session, msg, replier) on SESSION and a broker handler (scope, msg, now,
# conn) on BROKER (scope: maintenance.BrokerScope, the router's state; it answers
# a reply, or a FanOut to every queue). FLOW has one handler, the router's own.
_NEEDS: dict[str, frozenset[str]] = {
    BY_QUEUE: frozenset({"handler"}),
    BY_ID: frozenset({"handler", "missing"}),
    BY_CUSTOM_ID: frozenset({"handler", "missing"}),
    BY_PARENT_ID: frozenset({"handler", "missing"}),
    BY_IDS: frozenset({"handler", "multi"}),
    INTERNAL: frozenset({"handler"}),
    SESSION: frozenset({"handler"}),
    BROKER: frozenset({"handler"}),
    FLOW: frozenset(),
}
_MAY: dict[str, frozenset[str]] = {
    BY_QUEUE: frozenset({"admits", "pull"}),
    BY_ID: frozenset({"admits", "retained"}),
    BY_CUSTOM_ID: frozenset(),
    BY_PARENT_ID: frozenset(),
    BY_IDS: frozenset(),
    INTERNAL: frozenset({"admits"}),
    SESSION: frozenset({"before_auth"}),
    BROKER: frozenset({"admits", "sized"}),
    FLOW: frozenset(),
}

MissingReply = Callable[[str], Reply]
Merge = Callable[[list[str], list[tuple[list[int], Reply]], list[int]], Reply]


class IncompleteCommand(ValueError):
    """A declaration lacks what its route needs, or has what its route never reads."""


@dataclass(frozen=True, slots=True)
class MultiId:
    """How a command on a list of ``ids`` is split across queues and answered.

    ``args`` checks the arguments exactly as the handler will and returns them with the
    ids first (the router runs it before splitting, so a bad command is refused whole);
    ``parallel`` names the arrays that run parallel to ``ids``; ``merge`` combines the
    queues' sub-replies (and the positions no queue knows) into one reply.
    """

    args: Callable[[dict[str, Any]], tuple[Any, ...]]
    parallel: tuple[str, ...]
    merge: Merge

    def ids(self, msg: dict[str, Any]) -> list[str]:
        ids: list[str] = self.args(msg)[0]
        return ids

    def slice(self, msg: dict[str, Any], positions: list[int]) -> dict[str, Any]:
        """The part of the command that concerns ``positions`` of its ``ids``.

        An array of the wrong length is passed through unchanged, so the handler
        refuses it with the same error as for an unsplit command.
        """
        ids = msg["ids"]
        part: dict[str, Any] = {"ids": [ids[i] for i in positions]}
        for key in self.parallel:
            value = msg.get(key)
            if isinstance(value, list) and len(value) == len(ids):
                part[key] = [value[i] for i in positions]
            elif value is not None:
                part[key] = value
        return part


@dataclass(frozen=True, slots=True)
class Command:
    """One command, declared once. See the module docstring for what each facet is for.

    ``missing`` answers an id-routed command for an id no queue holds (nor storage);
    ``retained`` answers it from the retained result of a job removed on completion;
    ``admits`` counts the jobs the command may create, from its message; ``sized``:
    a broker handler that also takes the request's frame size and JSON bound (job data
    it checks as a push's, not measured again where the transport bounded it).
    """

    name: str
    route: str
    handler: Callable[..., Any] | None = None
    missing: MissingReply | None = None
    retained: Callable[[bool, Any], Reply] | None = None
    multi: MultiId | None = None
    admits: Callable[[dict[str, Any]], int] | None = None
    pull: bool = False
    before_auth: bool = False
    sized: bool = False


_FACETS = tuple(f.name for f in fields(Command) if f.name not in ("name", "route"))


def check(command: Command) -> None:
    """Refuse a declaration that does not fit its route (see :data:`_NEEDS`)."""
    name, route = command.name, command.route
    if not name:
        raise IncompleteCommand("a command needs a name")
    if route not in _NEEDS:
        raise IncompleteCommand(f"{name}: unknown route {route!r}")
    for facet in _FACETS:
        value = getattr(command, facet)
        present = value is not None and value is not False
        if facet in _NEEDS[route] and not present:
            raise IncompleteCommand(f"{name}: a {route!r}-routed command needs {facet}")
        if present and facet not in _NEEDS[route] | _MAY[route]:
            raise IncompleteCommand(f"{name}: a {route!r}-routed command has no {facet}")


class CommandTable:
    """Commands by name, each checked as it is added, and the views the layers read."""

    def __init__(self, commands: Iterable[Command]) -> None:
        self.commands: dict[str, Command] = {}
        for command in commands:
            check(command)
            if command.name in self.commands:
                raise IncompleteCommand(f"{command.name}: declared twice")
            self.commands[command.name] = command
        declared = self.commands.values()
        # What a client may send (the session's lookup, one per request).
        self.wire = {c.name: c for c in declared if c.route != INTERNAL}
        self.routes = {c.name: c.route for c in self.wire.values()}
        # A plain dict the queue actor dispatches through (tests and scripts/stages.py
        # wrap entries of it), so it holds the handler functions themselves.
        self.queue_handlers: dict[str, Callable[..., Any]] = {
            c.name: c.handler for c in declared
            if c.route in QUEUE_ROUTES and c.handler is not None}
        self.missing_job = {c.name: c.missing for c in declared if c.missing is not None}
        self.multi_ids = {c.name: c.multi for c in declared if c.multi is not None}
        # (a queue's: a broker command that admits is asked by the router itself)
        self.admits = {c.name: c.admits for c in declared
                       if c.admits is not None and c.route in QUEUE_ROUTES}
        self.admitting = frozenset(self.admits)
        self.pulls = frozenset(c.name for c in declared if c.pull)

    def extended(self, commands: Iterable[Command]) -> CommandTable:
        """This table plus ``commands`` (another layer's), checked the same way."""
        return CommandTable([*self.commands.values(), *commands])


_JOB_ID = object()  # stands for the job id in a ``not_found`` reply


def not_found(error: str | None = None, **reply: Any) -> MissingReply:
    """A missing-job answer: refuse with ``error`` (``{id}`` is the job id), or reply
    ``reply``, where the value :data:`JOB_ID` stands for the job id."""

    def answer(job_id: str) -> Reply:
        if error is not None:
            raise Refused(error.format(id=job_id))
        return {k: (job_id if v is _JOB_ID else v) for k, v in reply.items()}

    return answer


JOB_ID: Any = _JOB_ID
