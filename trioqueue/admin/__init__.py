"""The admin commands of ``trioqueue`` (queues, jobs, add, pause, ..., export, backup):
each talks to a running broker over TCP with our client, prints a table or (``--json``)
one JSON document, and fails with one line on stderr and an exit status
(:mod:`.output`), never a traceback.

``trioqueue.cli`` parses the command line; :func:`add_commands` adds these subcommands
to its parser and :func:`run` runs the one chosen. Each area's module adds its own
subcommands (``register``) with their coroutine as ``run`` (``set_defaults``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from contextlib import AsyncExitStack
from typing import Any

import trio

from ..client.errors import AuthenticationError, CommandError, ConnectionLost
from . import backup, broker, crons, jobs, queues, transfer
from .connection import Session, common_parser, quiet_client_log
from .output import EXIT_FAILED, EXIT_NOT_DONE, CliError, Output

__all__ = ["add_commands", "run"]

_AREAS = (queues, jobs, crons, broker, transfer, backup)
# Said after the broker's own text, so the operator knows where a token comes from.
_TOKEN_SOURCES = "--token, TRIOQUEUE_TOKEN, BQ_TOKEN or BUNQUEUE_TOKEN"
EXIT_INTERRUPTED = 130  # the shell's status for a Ctrl-C


def add_commands(sub: Any) -> None:
    """Add the admin subcommands to ``trioqueue``'s subparsers."""
    common = common_parser()
    for area in _AREAS:
        area.register(sub, common)


def is_admin(args: argparse.Namespace) -> bool:
    return hasattr(args, "run")


def run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """Run the admin command ``args`` names; its exit status."""
    out = Output(args.json)
    with quiet_client_log():
        try:
            return trio.run(_run, args, env, out)
        except KeyboardInterrupt:
            out.fail("interrupted")
            return EXIT_INTERRUPTED
        except BrokenPipeError:
            _silence_stdout()  # `trioqueue export q - | head`: the reader left
            return EXIT_FAILED
        except BaseException as exc:  # noqa: BLE001 - only the failures we can name
            failure = _failure(exc)
            if failure is None:
                raise
            line, status = failure
            out.fail(line)
            return status


async def _run(args: argparse.Namespace, env: Mapping[str, str], out: Output) -> int:
    async with AsyncExitStack() as stack:
        status: int = await args.run(Session(args, env, out, stack))
        return status


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush does not complain
    about the pipe a reader closed."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass  # not a real file (a test's capture): nothing will complain


def _failure(exc: BaseException) -> tuple[str, int] | None:
    """The line and exit status of a failure a person can act on; None for a bug."""
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return _failure(exc.exceptions[0])
    if isinstance(exc, CliError):
        return exc.line, exc.status
    if isinstance(exc, AuthenticationError):
        if exc.message == "Invalid token":
            return f"Invalid token: the broker refused the token given ({_TOKEN_SOURCES})", \
                EXIT_FAILED
        return f"{exc.message}: the broker wants a token ({_TOKEN_SOURCES})", EXIT_FAILED
    if isinstance(exc, ConnectionLost):
        return str(exc), EXIT_NOT_DONE
    if isinstance(exc, CommandError):
        return exc.message, EXIT_FAILED
    if isinstance(exc, OSError):
        return str(exc), EXIT_FAILED
    return None
