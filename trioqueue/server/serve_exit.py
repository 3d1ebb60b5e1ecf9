"""How ``trioqueue serve`` ends: its exit statuses, and one line instead of a traceback
for the ways a broker cannot run (a port taken, a store that cannot be opened, a store
that failed, a store another broker serves)."""

from __future__ import annotations

import errno
import logging
import socket
import sys
from collections.abc import Iterator
from typing import Any

import trio

from ..config import Config
from ..storage.port import StorageOpenError, StoreInUse

EXIT_STORAGE_FAILURE = 3
EXIT_CANNOT_LISTEN = 1
EXIT_CANNOT_OPEN_STORAGE = 4
EXIT_LOST_OWNERSHIP = 5
EXIT_STORE_IN_USE = 6


def run_serve(config: Config, broker: Any = None) -> int:
    """Serve until a signal; the exit status says how it ended.

    A failed commit or fsync stops the broker (nothing after it may be acknowledged):
    that is exit status 3 with one log line, not a traceback, so a supervisor can tell
    a storage failure from a crash and restart on the committed state (a PostgreSQL
    store gone for longer than ``pg_outage_s`` ends the same way). A store that cannot
    be opened at all (PostgreSQL unreachable at startup, a schema newer than this
    trioqueue) is status 4; a port in use, 1. A store another broker serves is status
    6, with one line naming that broker: a store has one owner (on PostgreSQL, one
    broker without ``--cluster``, or brokers that all run with it), and a supervisor
    that restarts on 6 only waits for the other one to stop. In a cluster, a broker
    that finds itself dead to the others (its heartbeat went stale) or fenced off a
    queue (a commit refused because another broker took the queue) stops with status
    5: it must not answer from state it no longer owns, and a supervisor restarts it as
    a new member. So does a broker whose PostgreSQL store another broker took while
    its connection was down (``StoreLost``, a kind of ``Fenced``).
    """
    from ..actors.writer import StorageFailure
    from ..cluster.view import LostMembership
    from .run import serve

    try:
        trio.run(serve, config, broker)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        _cannot_listen(config, exc)
        return EXIT_CANNOT_LISTEN
    except StoreInUse as exc:
        sys.stderr.write(f"error: {exc}\n")
        return EXIT_STORE_IN_USE
    except StorageOpenError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return EXIT_CANNOT_OPEN_STORAGE
    except (StorageFailure, LostMembership) as exc:
        logging.getLogger("trioqueue").error("stopped: %s", exc)
        return _status(exc)
    except BaseExceptionGroup as group:
        # Nurseries wrap it; only a group of nothing but storage failures is one.
        in_use, others = group.split(_address_in_use)
        if in_use is not None and others is None:
            _cannot_listen(config, next(_leaves(in_use)))
            return EXIT_CANNOT_LISTEN
        failures, rest = group.split((StorageFailure, LostMembership))
        if failures is None or rest is not None:
            raise
        leaves = list(_leaves(failures))
        first = next((f for f in leaves if not getattr(f, "repeated", False)), leaves[0])
        logging.getLogger("trioqueue").error("stopped: %s", first)
        return _status(first)
    return 0


def _status(exc: BaseException) -> int:
    from ..cluster.view import LostMembership
    from ..storage.port import Fenced

    if isinstance(exc, (LostMembership, Fenced)) or isinstance(exc.__cause__, Fenced):
        return EXIT_LOST_OWNERSHIP
    return EXIT_STORAGE_FAILURE


def _address_in_use(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE


def _cannot_listen(config: Config, exc: BaseException) -> None:
    """One line for a port taken by another program, naming the port: the error
    itself does not say which of the two listeners failed, so each is tried."""
    taken = [f"{kind} port {port}" for kind, port in (("tcp", config.tcp_port),
                                                      ("websocket", config.ws_port))
             if port and _port_taken(config.host, port)]
    where = " and ".join(taken) if taken else f"ports {config.tcp_port}/{config.ws_port}"
    sys.stderr.write(f"error: cannot listen on {config.host} {where}: address already in "
                     f"use (another broker running? pick other ports with --tcp-port / "
                     f"--ws-port)\n")


def _port_taken(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def _leaves(group: BaseException) -> Iterator[BaseException]:
    """The exceptions inside (nested) groups, in order."""
    if isinstance(group, BaseExceptionGroup):
        for exc in group.exceptions:
            yield from _leaves(exc)
    else:
        yield group


