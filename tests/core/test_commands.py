"""The command registry: every command declared once, and a half-declared one refused.

The first test is the check the review ran by hand (its §5e prototype): the views the
layers read agree with each other. The rest build declarations that lack a piece, or
carry one their route never reads, and show the registry refuses them when they are
registered, which for the real tables is when their module is imported.
"""

from __future__ import annotations

from typing import Any

import pytest

from trioqueue.core.commands import jobs
from trioqueue.core.commands import table as core_table
from trioqueue.core.commands.registry import (
    BROKER,
    BY_CUSTOM_ID,
    BY_ID,
    BY_IDS,
    BY_ONE_ID,
    BY_PARENT_ID,
    BY_QUEUE,
    FLOW,
    INTERNAL,
    QUEUE_ROUTES,
    SESSION,
    Command,
    CommandTable,
    IncompleteCommand,
    MultiId,
    not_found,
)
from trioqueue.transport.wire.commands import COMMANDS, PULLS, ROUTES


def handler(*args: Any) -> dict[str, Any]:
    return {}


def merge(ids: list[str], parts: list[Any], unknown: list[int]) -> dict[str, Any]:
    return {}


MULTI = MultiId(lambda msg: (msg["ids"],), ("tokens",), merge)
MISSING = not_found("Job not found")


def test_every_routed_command_is_declared_in_every_table_it_needs() -> None:
    queue_routed = {c for c, r in ROUTES.items() if r not in (SESSION, BROKER, FLOW)}
    internal = {c.name for c in COMMANDS.commands.values() if c.route == INTERNAL}
    assert queue_routed | internal == core_table.QUEUE_HANDLERS.keys()
    by_id = {c for c, r in ROUTES.items() if r in (BY_ID, BY_CUSTOM_ID, BY_PARENT_ID)}
    assert by_id == core_table.MISSING_JOB.keys()
    by_ids = {c for c, r in ROUTES.items() if r == BY_IDS}
    assert by_ids == core_table.MULTI_ARGS.keys() == core_table.PARALLEL_ARRAYS.keys()
    assert core_table.ADMITTING <= core_table.QUEUE_HANDLERS.keys()
    assert PULLS <= core_table.QUEUE_HANDLERS.keys()
    assert PULLS == {"PULL", "PULLB"}


def test_every_wire_command_has_what_its_route_needs() -> None:
    """Read back from the declarations: no routed command lacks a piece."""
    for name, command in COMMANDS.wire.items():
        assert ROUTES[name] == command.route
        assert command.handler is not None or command.route == FLOW, name
        if command.route in BY_ONE_ID:
            assert command.missing is not None, name
        if command.route == BY_IDS:
            assert command.multi is not None and command.multi.parallel, name
    assert {c.route for c in COMMANDS.commands.values()} == QUEUE_ROUTES | {
        SESSION, BROKER, FLOW}


def test_internal_commands_are_not_on_the_wire() -> None:
    assert core_table.RELEASE_CONNECTION in core_table.QUEUE_HANDLERS
    assert core_table.RELEASE_CONNECTION not in ROUTES
    assert core_table.RELEASE_CONNECTION not in COMMANDS.wire


def test_the_tables_are_views_of_the_one_table() -> None:
    # The queue actor dispatches through this very dict (tests and scripts wrap it).
    for name, command in core_table.CORE_COMMANDS.commands.items():
        if command.route in QUEUE_ROUTES:
            assert core_table.QUEUE_HANDLERS[name] is command.handler


def test_the_tables_have_one_home() -> None:
    # The jobs' handlers answer no table names: callers import them from the table.
    for name in ("QUEUE_HANDLERS", "MISSING_JOB", "MULTI_ARGS", "PARALLEL_ARRAYS",
                 "ADMITTING"):
        assert not hasattr(jobs, name), name


@pytest.mark.parametrize(("command", "complaint"), [
    (Command("X", BY_QUEUE), "needs handler"),
    (Command("X", BY_ID, handler), "needs missing"),
    (Command("X", BY_CUSTOM_ID, handler), "needs missing"),
    (Command("X", BY_PARENT_ID, handler), "needs missing"),
    (Command("X", BY_IDS, handler), "needs multi"),
    (Command("X", SESSION), "needs handler"),
    (Command("X", BROKER), "needs handler"),
    (Command("X", INTERNAL), "needs handler"),
], ids=lambda value: value.route if isinstance(value, Command) else "")
def test_a_command_missing_a_piece_its_route_needs_is_refused(command: Command,
                                                              complaint: str) -> None:
    with pytest.raises(IncompleteCommand, match=complaint):
        CommandTable([command])


@pytest.mark.parametrize(("command", "complaint"), [
    # a missing-job reply on a command no id addresses: the wrong route, most likely
    (Command("X", BY_QUEUE, handler, missing=MISSING), "has no missing"),
    (Command("X", BY_QUEUE, handler, multi=MULTI), "has no multi"),
    (Command("X", BY_ID, handler, missing=MISSING, pull=True), "has no pull"),
    (Command("X", BY_IDS, handler, multi=MULTI, admits=lambda msg: 1), "has no admits"),
    (Command("X", BY_QUEUE, handler, before_auth=True), "has no before_auth"),
    (Command("X", BY_QUEUE, handler, retained=lambda has, value: {}), "has no retained"),
    (Command("X", FLOW, handler), "has no handler"),
    (Command("X", SESSION, handler, admits=lambda msg: 1), "has no admits"),
], ids=lambda value: value.route if isinstance(value, Command) else "")
def test_a_piece_its_route_never_reads_is_refused(command: Command, complaint: str) -> None:
    with pytest.raises(IncompleteCommand, match=complaint):
        CommandTable([command])


def test_names_are_declared_once_and_routes_are_known() -> None:
    with pytest.raises(IncompleteCommand, match="declared twice"):
        CommandTable([Command("X", BY_QUEUE, handler), Command("X", BROKER, handler)])
    with pytest.raises(IncompleteCommand, match="unknown route"):
        CommandTable([Command("X", "by-magic", handler)])
    with pytest.raises(IncompleteCommand, match="needs a name"):
        CommandTable([Command("", BY_QUEUE, handler)])
    # Another layer cannot re-declare one of the core's commands either.
    with pytest.raises(IncompleteCommand, match="PUSH: declared twice"):
        core_table.CORE_COMMANDS.extended([Command("PUSH", SESSION, handler)])


def test_a_complete_declaration_reaches_every_view() -> None:
    table = CommandTable([
        Command("Q", BY_QUEUE, handler, admits=lambda msg: 2, pull=True),
        Command("I", BY_ID, handler, missing=MISSING),
        Command("M", BY_IDS, handler, multi=MULTI),
        Command("S", SESSION, handler, before_auth=True),
        Command("N", INTERNAL, handler),
    ])
    assert table.routes == {"Q": BY_QUEUE, "I": BY_ID, "M": BY_IDS, "S": SESSION}
    assert table.queue_handlers.keys() == {"Q", "I", "M", "N"}
    assert table.missing_job == {"I": MISSING}
    assert table.multi_ids == {"M": MULTI}
    assert table.admitting == {"Q"} and table.admits["Q"]({}) == 2
    assert table.pulls == {"Q"}


def test_a_multi_id_command_splits_its_parallel_arrays() -> None:
    msg = {"ids": ["a", "b", "c"], "tokens": ["ta", "tb", "tc"], "extra": 1}
    assert MULTI.ids(msg) == ["a", "b", "c"]
    assert MULTI.slice(msg, [0, 2]) == {"ids": ["a", "c"], "tokens": ["ta", "tc"]}
    # a wrong-length array goes through whole, for the handler to refuse as usual
    short = {"ids": ["a", "b"], "tokens": ["ta"]}
    assert MULTI.slice(short, [1]) == {"ids": ["b"], "tokens": ["ta"]}
