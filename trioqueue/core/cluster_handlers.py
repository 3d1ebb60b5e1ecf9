"""A cluster's messages between brokers, as a queue applies them (docs/scale-out.md).

When a flow's jobs or a job's notice concern a queue another broker serves, the broker
that made them writes a message into that queue's inbox (``tq_inbox``) in the same
commit as what caused it (core.writes.ClusterWrites). The broker that serves the queue
reads its inbox (when poked by the sender, and at each beat in case a poke was lost),
and the queue applies the messages with :func:`apply_inbox`, recording each one
consumed in its own commit: a message is applied once, with what it causes.

Two kinds, as lists (they cross the store's encoding):

* ``["adopt", [record, ...], [[child id, parent id, parent's queue], ...]]``: jobs of a
  flow admitted by another broker, for this queue to take in as the router takes in a
  local flow's (QueueState.adopt); and the parents, elsewhere, of those jobs, so this
  queue tells them when a child settles.
* ``["notice", job id, notice]``: a notice (core.queue.dependencies) for one of this
  queue's jobs, such as a child's outcome for a parent.
* ``["push", schedule name, PUSH message]``: a cron firing of the broker that runs the
  schedules (actors/cluster_crons.py), committed with the schedule's new count, pushed
  here as its job (the queue's rules apply: a preventOverlap key, a deduplication). It
  was admitted by that commit, as a flow's jobs for another broker are by theirs; a push
  the queue refuses (a template gone bad) is logged and consumed, never retried.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from . import fields
from .errors import Refused
from .handlers import Ctx
from .job import JobRecord
from .options import parse_job_input
from .queue import QueueState
from .registry import Reply

log = logging.getLogger("trioqueue.cluster")

CLUSTER_INBOX = "__cluster_inbox__"  # the broker's, never a client's
ADOPT_MESSAGE = "adopt"
NOTICE_MESSAGE = "notice"
PUSH_MESSAGE = "push"


def adopt_message(records: list[dict[str, Any]], edges: list[list[str]]) -> list[Any]:
    return [ADOPT_MESSAGE, records, edges]


def notice_message(job_id: str, notice: tuple[Any, ...]) -> list[Any]:
    return [NOTICE_MESSAGE, job_id, list(notice)]


def push_message(schedule: str, job: dict[str, Any]) -> list[Any]:
    return [PUSH_MESSAGE, schedule, job]


def apply_inbox(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    """Apply this queue's inbox messages ``[[number, message], ...]`` in order, each
    recorded consumed in this batch's commit. An adopted job this queue already has
    (a message applied before a restart that replayed it) is skipped."""
    now = ctx.now
    for seq, message in msg["messages"]:
        kind = message[0]
        if kind == ADOPT_MESSAGE:
            for record in message[1]:
                _adopt(q, JobRecord.from_record(record), now)
            for child_id, parent_id, _ in message[2]:
                q.index.add_dependent(child_id, parent_id)
        elif kind == NOTICE_MESSAGE:
            if q.index.locate(message[1]) == q.name:
                q.apply_notice(tuple(message[2]), now)
        elif kind == PUSH_MESSAGE:
            _push(q, message[1], message[2], ctx)
        else:
            raise ValueError(f"unknown inbox message {kind!r}")
        q.writes.cluster.consumed.append(seq)
    return {}


def _adopt(q: QueueState, job: JobRecord, now: int) -> None:
    if job.id in q.jobs or q.index.locate(job.id) is not None:
        return
    job.seq = q.reserve_seq()
    q.index.add(job.id, q.name)
    for child_id in job.pending or ():
        q.index.add_dependent(child_id, job.id)
    q.adopt(job, now)
    q.writes.put_job(job.to_record())


def _push(q: QueueState, schedule: str, job: dict[str, Any], ctx: Ctx) -> None:
    try:
        spec = parse_job_input(job, custom_id_key="jobId",
                               max_data_bytes=ctx.max_data_bytes)
        q.push([spec], ctx.now)
    except Refused as exc:
        log.warning("cron %s: its firing was refused by queue %s: %s", schedule, q.name,
                    exc.message)


@dataclass(frozen=True, slots=True)
class InboxPoke:
    """ClusterPoke's answer: the router reads the named queues' inboxes (a worker-thread
    read) and applies them, then replies."""

    queues: list[str]


def cluster_poke(scope: Any, msg: dict[str, Any], now: int, conn: Any) -> InboxPoke:
    """Another broker committed messages for these queues (served here): apply them
    now rather than at the next beat. Answered once they are applied and committed."""
    return InboxPoke([fields.queue_name(q) for q in fields.str_list(msg.get("queues"),
                                                                     "queues")])
