"""``trioqueue worker module:function``: run a Worker on a function of yours until a
signal, on trio or asyncio.

::

    trioqueue worker emails:send --queue emails --concurrency 10 [--backend asyncio]

``module`` is imported as ``python -m`` would find it (the current directory first);
``function`` is ``async def f(job)`` or a plain ``def f(job)`` (run in a thread).

What it says, on stderr (one line each): a failed connection attempt at once
(``cannot connect to HOST:PORT: ... retrying in N s``), with backoff until the broker
answers; ``ready`` once registered and pulling; each step of a shutdown
(:mod:`.shutdown`); ``stopped`` with what it did. Exit status 0 after a shutdown by
signal; 1, with the reason, for a function that cannot be imported.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import math
import os
import sys
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc

from .channels import backoff_s
from .connection import Connection, open_connection
from .errors import ConnectionLost
from .lease import log
from .shutdown import DEFAULT_GRACE_S, SIGNALS, react
from .worker import Worker


def load_processor(target: str) -> Callable[..., Any]:
    """The function named ``module:function`` (``function`` may be dotted); SystemExit
    with a readable reason when it cannot be had."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise SystemExit(f"trioqueue worker: expected module:function, not {target!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` and uvicorn do
    try:
        found: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise SystemExit(f"trioqueue worker: cannot import {module_name!r}: {exc}") from None
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise SystemExit(f"trioqueue worker: {module_name!r} has no {attribute!r}"
                             ) from None
    if not callable(found):
        raise SystemExit(f"trioqueue worker: {target} is not callable")
    return found  # type: ignore[no-any-return]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="module:function",
                        help="the processor: async def f(job) or def f(job)")
    parser.add_argument("--queue", required=True, help="the queue to take jobs from")
    parser.add_argument("--concurrency", type=int, default=1,
                        help="jobs processed at once (default 1)")
    parser.add_argument("--backend", choices=("trio", "asyncio"), default="trio",
                        help="the event loop (default trio)")
    parser.add_argument("--host", default=os.environ.get("TRIOQUEUE_HOST", "127.0.0.1"),
                        help="the broker's host (default $TRIOQUEUE_HOST or 127.0.0.1)")
    parser.add_argument("--port", type=int,
                        default=int(os.environ.get("TRIOQUEUE_PORT", "6789")),
                        help="the broker's TCP port (default $TRIOQUEUE_PORT or 6789)")
    parser.add_argument("--token", default=os.environ.get("TRIOQUEUE_TOKEN"),
                        help="auth token (default $TRIOQUEUE_TOKEN)")
    parser.add_argument("--grace-s", type=float, default=DEFAULT_GRACE_S,
                        help="after the first SIGTERM/Ctrl-C, how long running jobs may "
                             f"take to finish (default {DEFAULT_GRACE_S:g}); a second "
                             "signal hands them back at once")
    parser.add_argument("--codec", choices=("cbor", "msgpack"), default="cbor")
    parser.add_argument("--log-level", default="info", help="debug, info, warning, error")


def main(args: argparse.Namespace) -> int:
    if args.concurrency < 1:
        raise SystemExit("trioqueue worker: --concurrency must be at least 1")
    if not (args.grace_s >= 0 and math.isfinite(args.grace_s)):
        raise SystemExit("trioqueue worker: --grace-s must be a number of seconds >= 0")
    processor = load_processor(args.target)
    logging.basicConfig(level=getattr(logging, args.log_level.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    return anyio.run(serve, args, processor, backend=args.backend)


async def serve(args: argparse.Namespace, processor: Callable[..., Any]) -> int:
    """Connect (retrying with backoff), run the worker until a signal, return 0."""
    with anyio.open_signal_receiver(*SIGNALS) as received:
        async with open_connection(args.host, args.port, token=args.token,
                                   codec=args.codec) as conn:
            async with anyio.create_task_group() as tasks:
                reached = anyio.Event()
                tasks.start_soon(_stop_before_ready, received, tasks.cancel_scope)
                await _reach(conn)
                reached.set()
                tasks.cancel_scope.cancel()  # connected: the signals go to react() now
            if not reached.is_set():
                log.info("stopped before the broker answered")
                return 0
            worker = Worker(args.queue, processor, conn, concurrency=args.concurrency)
            async with anyio.create_task_group() as tasks:
                await tasks.start(_run_then_cancel, worker, tasks.cancel_scope)
                log.info("worker %s ready: queue %s, concurrency %d, broker %s:%s, %s",
                         worker.name, args.queue, args.concurrency, args.host, args.port,
                         args.backend)
                await react(worker, received, args.grace_s)
    log.info("worker %s stopped: %d processed, %d failed", worker.name,
             worker.processed_count, worker.failed_count)
    return 0


async def _reach(conn: Connection) -> None:
    """Until the broker answers a Ping. The connection opens its socket here with no
    ``connect_timeout_s`` window, so its backoff keeps growing while the broker stays
    away and each failed attempt is logged at once with the delay really waited (a
    window would cut that sleep short and start the backoff over); the first success
    after failures logs ``connected to HOST:PORT``. Never waits in silence."""
    window = conn.connect_timeout_s
    conn.connect_timeout_s = math.inf
    try:
        attempt = 0
        while True:
            try:
                await conn.call("Ping")
                return
            except ConnectionLost as exc:  # opened, then lost before the reply
                delay = backoff_s(attempt)
                log.warning("broker %s:%s: %s (retrying in %.1f s)", conn.host, conn.port,
                            exc, delay)
                await anyio.sleep(delay)
                attempt += 1
    finally:
        conn.connect_timeout_s = window


async def _stop_before_ready(received: Any, scope: anyio.CancelScope) -> None:
    """A signal while still connecting ends the run at once (nothing is leased)."""
    async for _signum in received:
        scope.cancel()
        return


async def _run_then_cancel(worker: Worker, scope: anyio.CancelScope, *,
                           task_status: anyio.abc.TaskStatus[None]) -> None:
    # The worker's end (a close by signal) ends the signal reader too.
    try:
        await worker.run(task_status=task_status)
    finally:
        scope.cancel()

