"""Which broker an admin command talks to, and the one connection it talks over.

Host, port and token come from flags, else from the environment ``serve`` reads, so a
command run beside the broker with the broker's environment finds it:

- host: ``-H/--host``, ``TRIOQUEUE_HOST``, ``HOST``, else 127.0.0.1;
- port: ``-p/--port``, ``TRIOQUEUE_TCP_PORT``, ``TCP_PORT``, else 6789;
- token: ``-t/--token``, ``TRIOQUEUE_TOKEN``, ``BQ_TOKEN``, ``BUNQUEUE_TOKEN`` (bunqueue's
  client-side names), else the first of the broker's own ``TRIOQUEUE_AUTH_TOKENS`` /
  ``AUTH_TOKENS``: a convenience for the common case of an operator on the broker's
  host, which never sends a token a broker without auth did not ask for, since only
  a set variable is read.

The connection is opened on the first command sent (so a refused command line costs no
connection, and ``backup --data-dir`` none at all) and closed when the command ends.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Iterator, Mapping
from contextlib import AsyncExitStack, contextmanager
from typing import Any

from ..client.connection import DEFAULT_PORT, Connection, open_connection
from ..client.errors import CommandError, ConnectionLost
from ..environment import SHARED_ENV_NAMES, first_set, parse_port, parse_tokens
from .output import EXIT_NOT_DONE, CliError, Output

DEFAULT_HOST = "127.0.0.1"
# An admin command fails fast on a broker that is not there: a person is waiting.
DEFAULT_CONNECT_TIMEOUT_S = 2.0
TOKEN_ENV_NAMES = ("TRIOQUEUE_TOKEN", "BQ_TOKEN", "BUNQUEUE_TOKEN")
# The reply's envelope, dropped from what a command prints.
_ENVELOPE = ("ok", "reqId")


def common_parser() -> argparse.ArgumentParser:
    """The flags every admin command takes (a parent parser of each subcommand)."""
    parent = argparse.ArgumentParser(add_help=False)
    broker = parent.add_argument_group("broker")
    broker.add_argument("-H", "--host", help="broker host (default: TRIOQUEUE_HOST, HOST, "
                                             "else 127.0.0.1)")
    broker.add_argument("-p", "--port", help="broker TCP port (default: TRIOQUEUE_TCP_PORT, "
                                             "TCP_PORT, else 6789)")
    broker.add_argument("-t", "--token", help="auth token (default: TRIOQUEUE_TOKEN, "
                                              "BQ_TOKEN, BUNQUEUE_TOKEN, else the first of "
                                              "AUTH_TOKENS)")
    broker.add_argument("--connect-timeout-s", type=float, default=DEFAULT_CONNECT_TIMEOUT_S,
                        metavar="SECONDS",
                        help="give up on an unreachable broker after this long "
                             f"(default {DEFAULT_CONNECT_TIMEOUT_S:g})")
    parent.add_argument("--json", action="store_true",
                        help="print one JSON document for scripts, no table")
    return parent


class Target:
    """The broker's address and the token to present."""

    def __init__(self, args: argparse.Namespace, env: Mapping[str, str]) -> None:
        self.host: str = args.host or _env_value(env, "host") or DEFAULT_HOST
        raw_port = args.port if args.port is not None else _env_value(env, "tcp_port")
        try:
            self.port = DEFAULT_PORT if raw_port is None else parse_port(str(raw_port), "port")
            self.token = _token(args.token, env)
        except SystemExit as exc:  # the serve parsers' one-line refusals
            raise CliError(str(exc.code), EXIT_NOT_DONE) from None
        self.connect_timeout_s: float = args.connect_timeout_s


def _token(flag: str | None, env: Mapping[str, str]) -> str | None:
    if flag:
        return flag
    for name in TOKEN_ENV_NAMES:
        if env.get(name):
            return env[name]
    found = first_set(env, SHARED_ENV_NAMES["auth_tokens"])
    return parse_tokens(found[1], found[0])[0] if found is not None else None


def _env_value(env: Mapping[str, str], setting: str) -> str | None:
    found = first_set(env, SHARED_ENV_NAMES[setting])
    return None if found is None else found[1]


class Session:
    """What a command runs with: its arguments, its output, and the broker (connected
    on first use)."""

    def __init__(self, args: argparse.Namespace, env: Mapping[str, str], out: Output,
                 stack: AsyncExitStack) -> None:
        self.args = args
        self.env = env
        self.out = out
        self._stack = stack
        self._connection: Connection | None = None
        self._answered = False  # whether the broker has answered a command yet

    @property
    def target(self) -> Target:
        return Target(self.args, self.env)

    async def connection(self) -> Connection:
        if self._connection is None:
            target = self.target
            self._connection = await self._stack.enter_async_context(open_connection(
                target.host, target.port, token=target.token, pool_size=1,
                connect_timeout_s=target.connect_timeout_s))
        return self._connection

    async def call(self, cmd: str, **fields: Any) -> dict[str, Any]:
        """One command; its reply without the envelope, or its refusal raised."""
        connection = await self.connection()
        try:
            reply = await connection.call(cmd, **fields)
        except ConnectionLost as exc:
            if self._answered or not str(exc).startswith("cannot connect"):
                raise
            raise CliError(f"cannot connect to the broker at {connection.host}:"
                           f"{connection.port} (tried for {connection.connect_timeout_s:g} s;"
                           f" is it running? --host/--port say where)",
                           EXIT_NOT_DONE) from None
        except CommandError:
            self._answered = True
            raise
        self._answered = True
        return {key: value for key, value in reply.items() if key not in _ENVELOPE}


@contextmanager
def quiet_client_log() -> Iterator[None]:
    """Mute the client's connection warnings (one per failed attempt) while a command
    runs: an admin command says an unreachable broker once, in its failure line."""
    logger = logging.getLogger("trioqueue.client")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
