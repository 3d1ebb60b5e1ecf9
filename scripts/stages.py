#!/usr/bin/env python3
"""Where one request's time goes inside the broker: PUSH, or PULL then ACK, in process.

A broker on a temporary LMDB store is driven through a real ``Session`` (no sockets, no
client), one request per call as a one-at-a-time client would send them, with timers
around the stages of the path: the session, the router, the queue actor's step, its
apply and finish, the commit, LMDB's write transaction, the handler, the reply.
Stages nest, so their times add up along one path, not across the table.

    python scripts/stages.py [--n 5000] [--what push|pull-ack]
"""

from __future__ import annotations

import argparse
import collections
import inspect
import tempfile
import time
from collections.abc import Callable
from typing import Any

import trio

from trioqueue.actors import queue_actor, router, writer
from trioqueue.actors.broker import Broker
from trioqueue.config import Config
from trioqueue.core.commands.table import QUEUE_HANDLERS
from trioqueue.storage.lmdb import store as lmdb_store
from trioqueue.transport import session
from trioqueue.transport.wire.codec import MSGPACK

spent: collections.Counter[str] = collections.Counter()
clock = time.perf_counter_ns


def timed(owner: Any, name: str, label: str) -> None:
    """Wrap ``owner.name`` (sync or async) so its time adds up under ``label``."""
    original = getattr(owner, name)
    if inspect.iscoroutinefunction(original):
        async def wrapped_async(*args: Any, **kwargs: Any) -> Any:
            start = clock()
            try:
                return await original(*args, **kwargs)
            finally:
                spent[label] += clock() - start
        setattr(owner, name, wrapped_async)
        return

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        start = clock()
        try:
            return original(*args, **kwargs)
        finally:
            spent[label] += clock() - start
    setattr(owner, name, wrapped)


def time_handler(cmd: str) -> None:
    original: Callable[..., Any] = QUEUE_HANDLERS[cmd]

    def wrapped(*args: Any) -> Any:
        start = clock()
        try:
            return original(*args)
        finally:
            spent[f"handler {cmd}"] += clock() - start
    QUEUE_HANDLERS[cmd] = wrapped


async def drive(n: int, what: str) -> None:
    broker = Broker(Config(data_dir=tempfile.mkdtemp(prefix="stages-")))
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        replies: list[dict[str, Any]] = []

        def send_now(out: list[dict[str, Any]]) -> str:
            replies.extend(out)
            MSGPACK.encode(out[-1])  # what the socket path would encode
            return session.SENT

        sess = session.Session(broker, send_now=send_now)

        async def call(msg: dict[str, Any], label: str) -> dict[str, Any] | None:
            payload = MSGPACK.encode(msg)
            replies.clear()
            start = clock()
            await sess.handle([(MSGPACK.decode(payload), len(payload), None)])
            spent[label] += clock() - start
            return replies[-1] if replies else None

        # batches of 200: a larger PUSHB is long work, answered after the call returns
        jobs = [{"name": "n", "data": {"i": i}} for i in range(200)]
        for _ in range(-(-n // 200) + 1):
            await call({"cmd": "PUSHB", "queue": "q", "jobs": jobs, "reqId": "w"}, "warm")
        await trio.sleep(0.05)  # let the new queue's actor park, as in a running broker
        spent.clear()
        start = clock()
        for i in range(n):
            if what == "push":
                await call({"cmd": "PUSH", "queue": "q", "data": {"i": i}, "reqId": "p"},
                           "request PUSH")
            else:
                got = await call({"cmd": "PULL", "queue": "q", "owner": "w", "timeout": 0,
                                  "lockTtl": 30_000, "reqId": "p"}, "request PULL")
                assert got is not None, "the idle actor answers in the same call"
                await call({"cmd": "ACK", "id": got["job"]["id"], "token": got["token"],
                            "reqId": "a"}, "request ACK")
        total = clock() - start
        print(f"{what}: {total / n / 1000:.1f} us per iteration (in process, LMDB), by stage:")
        for label, ns in spent.most_common():
            print(f"  {label:28s} {ns / n / 1000:7.2f} us")
        nursery.cancel_scope.cancel()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--what", choices=("push", "pull-ack"), default="push")
    args = ap.parse_args()
    timed(session.Session, "_prepare", "session: request built")
    timed(router.Router, "dispatch", "router: dispatch")
    timed(queue_actor.QueueActor, "_step", "actor: step")
    timed(queue_actor.QueueActor, "_apply_backlog", "actor: apply")
    timed(queue_actor.QueueActor, "_finish_batch", "actor: finish (commit, reply)")
    timed(writer.StorageWriter, "commit_now", "writer: commit")
    timed(lmdb_store.LmdbStorage, "_write", "lmdb: write transaction")
    timed(session.Session, "deliver_many", "session: reply out")
    for cmd in ("PUSH", "PULL", "ACK"):
        time_handler(cmd)
    trio.run(drive, args.n, args.what)


if __name__ == "__main__":
    main()
