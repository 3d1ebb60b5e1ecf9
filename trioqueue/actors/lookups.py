"""What the router looks up before it routes a batch, on one broker or several.

The ids a batch names that the live index lacks are read from the store first (off the
trio thread), so that routing itself stays synchronous; and a request whose queue moved
to another broker meanwhile (:class:`Moving`) is routed again.
"""

from __future__ import annotations

from collections.abc import Container
from typing import Any

from ..core.commands.registry import BROKER, BY_IDS, BY_QUEUE, FLOW, SESSION, Command
from ..core.errors import Refused
from .request import Request

PUSHES = frozenset(("PUSH", "PUSHB"))


class Moving(Exception):
    """A request that cannot be routed now, because a queue it needs was handed over
    while its batch waited (for a claim, a look-up, a handover): the router routes it
    again once the handover is done, from a fresh look-up."""


def ids_to_look_up(routed: list[tuple[Command, Request]], known: Container[str],
                   *, multi: bool) -> list[str]:
    """The job ids the batch names that ``known`` (the live index) lacks: single-id
    commands, a flow's client-given ids, and (``multi``: in a cluster, where another
    broker's queues hold most jobs) the ids of multi-id commands. A cluster's pushes
    and flows are looked up later, with their claims (cluster/routes.py)."""
    ids: list[str] = []
    for command, req in routed:
        how = command.route
        if multi and (how == FLOW or req.cmd in PUSHES):
            continue
        if how == FLOW:  # a flow's ids are the client's: they may exist already
            jobs = req.msg.get("jobs")
            named: list[Any] = [j.get("id") for j in jobs if type(j) is dict] if (
                type(jobs) is list) else []
        elif how == BY_IDS:
            if not multi or command.multi is None:
                continue
            try:
                named = list(command.multi.ids(req.msg))
            except Refused:  # (refused again, with its reply, when it is routed)
                continue
        elif how in (BY_QUEUE, BROKER, SESSION):
            continue
        else:
            named = [req.msg.get(how)]
        ids.extend(i for i in named if type(i) is str and i and i not in known)
    return ids
