"""Queue maintenance commands: Clean, ListQueues, TrimEvents and CompactMemory.

``Clean`` is a queue command (long work in the queue's actor, see
:mod:`..queue.cleaning`). The other three are broker-wide: the router answers them with
what it owns (:class:`BrokerScope`), and CompactMemory also asks every queue to compact
itself (:class:`FanOut`, answered once all queues replied).
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from .. import fields
from ..errors import Refused
from ..queue import QueueSettings, QueueState, Sliced
from ..workers import WorkerRegistry
from .context import Ctx, Reply

log = logging.getLogger("trioqueue.maintenance")

CLEAN_DEFAULT_LIMIT = 1000
# The most ids one Clean removes and answers: a larger cleaning is several calls, so
# that no reply grows past what a client reads at once (1e5 ids: about 4 MB).
CLEAN_MAX_LIMIT = 100_000

# Sent by the router to every queue for CompactMemory (never from a client).
COMPACT_QUEUE = "__compact_queue__"


class BrokerScope(Protocol):
    """What the broker-wide commands read and change: the router's own state."""

    @property
    def workers(self) -> WorkerRegistry: ...
    def queue_states(self) -> Iterable[tuple[str, QueueState]]:
        """Every queue with an actor, and its state (read between steps)."""
    def queue_state(self, name: str) -> QueueState | None:
        """The state of queue ``name`` if it has an actor."""
    def finished_jobs(self, queue: str) -> int:
        """How many finished (completed or dead-lettered) jobs of ``queue`` are stored."""
    def forget_expired_retained(self, now: int) -> int:
        """Drop retained results of removed-on-complete jobs past their window; how
        many went."""
    def compact_index(self) -> int:
        """Give back the job index's empty slots; the bytes freed."""
    def queues_elsewhere(self) -> Iterable[str]:
        """In a cluster: the queues other brokers serve (none otherwise)."""


@dataclass(frozen=True, slots=True)
class FanOut:
    """A broker command's answer that needs every queue: the router sends ``command``
    (an internal queue command) to each queue actor, then answers the client with
    ``combine`` of their replies."""

    command: str
    combine: Callable[[list[Reply]], Reply]


# ------------------------------------------------------------------ Clean (a queue's)


def clean(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Sliced:
    grace = fields.strict_number(msg.get("grace"), "grace", minimum=0, required=True)
    limit = fields.strict_number(msg.get("limit"), "limit", integer=True, minimum=1,
                                 maximum=CLEAN_MAX_LIMIT, default=CLEAN_DEFAULT_LIMIT)
    state = msg.get("state")
    if state is not None and not isinstance(state, str):
        raise Refused("state must be a string")
    assert grace is not None and limit is not None  # required / defaulted
    return q.clean_work(state, grace, int(limit), ctx.now)


def compact_queue(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Sliced:
    return q.compact_work()


# ------------------------------------------------------------------ broker-wide


def queue_listed(scope: BrokerScope, name: str, q: QueueState) -> bool:
    """Whether ListQueues names a queue: it holds live jobs, finished jobs or settings
    of its own. A queue merely asked about (its actor made on first use) holds
    nothing, and is not listed; nor is one Obliterate emptied. The finished jobs (a
    storage count) are asked last, only of a queue with nothing else."""
    return bool(q.jobs) or q.settings != QueueSettings() or scope.finished_jobs(name) > 0


def list_queues(scope: BrokerScope, msg: dict[str, Any], now: int, conn: Any) -> Reply:
    """The listed queues' names (see :func:`queue_listed`), sorted."""
    names = [name for name, q in scope.queue_states() if queue_listed(scope, name, q)]
    names.extend(scope.queues_elsewhere())  # (a cluster: as their leases name them)
    return {"queues": sorted(set(names))}


def trim_events(scope: BrokerScope, msg: dict[str, Any], now: int, conn: Any) -> Reply:
    # bunqueue trims a per-queue journal of lifecycle events. The broker keeps none:
    # events go to the subscribers connected when they happen, and nowhere else. So
    # the command is checked as bunqueue checks it, and removes nothing.
    fields.queue_name(msg.get("queue"))
    fields.strict_number(msg.get("maxLength"), "maxLength", integer=True, minimum=0,
                         required=True)
    return {"data": {"removed": 0}}


def compact_memory(scope: BrokerScope, msg: dict[str, Any], now: int,
                   conn: Any) -> FanOut:
    """Free what the broker keeps past its use: retained results past their window,
    the job index's empty slots, then each queue's maps and stale heap entries; with
    ``gc: true`` (ours) also cyclic garbage, which the server never collects from the
    oldest generations on its own (a crashed actor's traceback).

    The collection is asked for, not done by default: it visits every object the
    broker holds since its start, and every queue waits for it. Answered with bunqueue's
    ``{}`` plus ``freed``."""
    collect = fields.lenient_bool(msg.get("gc"))
    broker = {
        "retainedResults": scope.forget_expired_retained(now),
        "bytes": scope.compact_index(),
        "gcObjects": gc.collect() if collect else 0,
    }

    def combine(replies: list[Reply]) -> Reply:
        freed = dict(broker, heapEntries=0, queues=len(replies))
        for reply in replies:
            part = reply.get("freed") or {}
            freed["heapEntries"] += int(part.get("heapEntries", 0))
            freed["bytes"] += int(part.get("bytes", 0))
        log.info("CompactMemory freed %s", freed)
        return {"freed": freed}

    return FanOut(COMPACT_QUEUE, combine)
