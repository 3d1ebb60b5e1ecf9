"""A queue actor's notices: those other queues (and its own jobs) sent it, applied
before its commands, and the replies held until other queues have applied what this
queue sent them.

Notices are the only way one queue's change reaches another queue's jobs (a child
settles its parent, a parent asks its children's queue to remove them). They travel in
unbounded deques rather than the inboxes, so a queue never blocks on another's full
inbox (two queues notifying each other could deadlock); they are few, one per
dependency edge. Two rules keep what a client reads consistent with the replies it saw:

- Notices a step makes for the queue's own jobs are applied in that step's notice
  rounds, before any command: a removed child releases its parent at once.
- A command whose effect goes round other queues and back (``AfterQueues``) is answered
  only when each of those queues has answered an echo posted after the command's
  notices. Each queue applies its notices in order and posts what they made before it
  answers the echo, so by the time the echo comes back, the notices it made for this
  queue are here and applied first.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from itertools import count
from typing import Any

from ..core.queue import AfterQueues, QueueState
from .ports import NoticePoster
from .request import Replier

# Rounds of same-queue notices one step applies (each round's may make the next: a
# removed child releases its parent); more than a flow's depth needs. What is left
# waits for the next step, still ahead of its commands.
NOTICE_ROUNDS = 16

ECHO = "echo"  # (origin queue, token): answer once everything before it is applied
ECHO_BACK = "echo_back"  # (token,): one of the queues a held reply waits for answered

# Post a notice to a queue by name; False when there is no such queue.
QueuePoster = Callable[[str, tuple[Any, ...]], bool]
Deliveries = list[tuple[Replier, dict[str, Any]]]


class Notices:
    def __init__(self, name: str, post_notices: NoticePoster, post_to: QueuePoster) -> None:
        self._name = name
        self._post_notices, self._post_to = post_notices, post_to
        # Looked at by the actor's loop on every step: a plain deque's truth is a C call.
        self.pending: deque[tuple[Any, ...]] = deque()
        # Held replies by token: [replier, reply, queues still to answer].
        self._held: dict[int, list[Any]] = {}
        self._echoes: list[tuple[str, int]] = []  # to post after this step's notices
        self._tokens = count()

    def append(self, notice: tuple[Any, ...]) -> None:
        self.pending.append(notice)

    def apply(self, q: QueueState, now: int, deliveries: Deliveries) -> None:
        """Apply what arrived, then the notices that made for this queue, in rounds."""
        pending = self.pending
        for _ in range(NOTICE_ROUNDS):
            while pending:
                notice = pending.popleft()
                kind = notice[0]
                if kind == ECHO:
                    if q.notices:  # what came before the echo goes first
                        self._post_notices(q.take_notices())
                    self._post_to(notice[1], (ECHO_BACK, notice[2]))
                elif kind == ECHO_BACK:
                    self._answered(notice[1], deliveries)
                else:
                    q.apply_notice(notice, now)
            if not q.notices:
                break
            self._post_notices(q.take_notices())  # this queue's land in ``pending``

    def hold(self, replier: Replier, reply: dict[str, Any], after: AfterQueues) -> None:
        token = next(self._tokens)
        self._held[token] = [replier, reply, len(after.queues)]
        self._echoes.extend((queue, token) for queue in sorted(after.queues))

    def send(self, q: QueueState, deliveries: Deliveries) -> None:
        """At the end of a step: post its notices, then the echoes of its held replies
        (a queue that does not exist has nothing to apply: answered at once)."""
        if q.notices:  # (looked at first: each take makes a new list)
            self._post_notices(q.take_notices())
        if self._echoes:
            echoes, self._echoes = self._echoes, []
            for queue, token in echoes:
                if not self._post_to(queue, (ECHO, self._name, token)):
                    self._answered(token, deliveries)

    def _answered(self, token: int, deliveries: Deliveries) -> None:
        held = self._held.get(token)
        if held is None:
            return
        held[2] -= 1
        if held[2] <= 0:
            del self._held[token]
            deliveries.append((held[0], held[1]))
