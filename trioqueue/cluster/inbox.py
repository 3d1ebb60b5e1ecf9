"""Reading a cluster's inboxes: the messages other brokers committed for the queues this
broker serves (core/cluster_handlers.py says what they are and how a queue applies
them), read in a worker thread and handed to each queue as one internal command.

Read when a sender pokes (ClusterPoke, right after its commit) and at every beat of
the cluster, so a poke lost with its sender costs a beat of latency, never a message:
the rows stay until the queue's own commit deletes them. A message being applied is
not handed over again by a read that overlaps (``_applying``), so each is applied once.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any, Protocol

import trio

from ..actors.request import Request
from ..core.cluster_handlers import ADOPT_MESSAGE, CLUSTER_INBOX, DEPEND_MESSAGE
from .messages import RemoteJobs

log = logging.getLogger("trioqueue.cluster")

INBOX_PAGE = 1000  # messages read per round trip


class InboxStore(Protocol):
    def inbox(self, queues: Sequence[str], limit: int) -> list[tuple[int, str, Any]]: ...


# Send requests to a queue's actor (the router's send, its actor made if needed).
SendTo = Callable[[str, list[Request]], Awaitable[None]]
# Claim the queues this broker should serve and does not yet (Cluster.prepare), with
# those it was asked for (claimed when their lease is free).
Claim = Callable[[Sequence[str], Collection[str]], Awaitable[None]]


class ClusterInbox:
    def __init__(self, store: InboxStore, owned: Collection[str], send: SendTo,
                 parents: RemoteJobs, claim: Claim) -> None:
        self._store = store
        self._owned = owned
        self._send = send
        self._parents = parents
        self._claim = claim
        self._applying: set[int] = set()
        self.applied = 0  # messages applied since the start

    async def poked(self, queues: Sequence[str], then: Request | None = None) -> None:
        """Messages were just committed for ``queues`` (a ClusterPoke from their
        sender, answered by ``then``, or a cron firing committed here): apply them now,
        a queue this broker should serve and does not yet claimed first."""
        await self._claim(queues, queues)
        await self.take(queues)
        if then is not None:
            then.ok({})

    async def take(self, queues: Sequence[str] | None = None) -> None:
        """Apply the waiting messages of ``queues`` (None: every queue served here),
        a page at a time, and return once their queues have committed them."""
        while True:
            names = [q for q in (self._owned if queues is None else queues)
                     if q in self._owned]
            if not names:
                return
            rows = await trio.to_thread.run_sync(self._store.inbox, names, INBOX_PAGE)
            fresh = [row for row in rows if row[0] not in self._applying]
            if not fresh:
                return
            await self._apply(fresh)
            if len(rows) < INBOX_PAGE:
                return

    async def _apply(self, rows: list[tuple[int, str, Any]]) -> None:
        by_queue: dict[str, list[list[Any]]] = {}
        for seq, queue, message in rows:
            self._applying.add(seq)
            if message[0] == ADOPT_MESSAGE:  # whom its children will tell, elsewhere
                for _, parent_id, parent_queue in message[2]:
                    self._parents.note(parent_id, parent_queue)
            elif message[0] == DEPEND_MESSAGE:
                self._parents.note(message[2], message[3])
            by_queue.setdefault(queue, []).append([seq, message])
        done = _Countdown(len(by_queue))
        try:
            for queue, messages in by_queue.items():
                await self._send(queue, [Request(CLUSTER_INBOX, {"messages": messages},
                                                 done)])
            await done.finished.wait()
        finally:
            # (committed and deleted, or failed and left for a later read to retry)
            self._applying.difference_update(seq for seq, _, _ in rows)
        self.applied += len(rows)


class _Countdown:
    """The replier of a read's commands: set once each queue answered (after its
    commit: replies leave only then)."""

    def __init__(self, expected: int) -> None:
        self._left = expected
        self.finished = trio.Event()
        if expected == 0:
            self.finished.set()

    def deliver(self, reply: dict[str, Any]) -> None:
        if not reply.get("ok"):
            log.warning("a queue could not apply its inbox messages: %s", reply.get("error"))
        self._left -= 1
        if self._left <= 0:
            self.finished.set()
