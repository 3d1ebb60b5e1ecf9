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
* ``["depend", child id, parent id, parent's queue]``: a parent admitted elsewhere waits
  for this queue's job: told when it settles, or at once if it already has.
* ``["push", schedule name, PUSH message]``: a cron firing of the broker that runs the
  schedules (cluster/crons.py), committed with the schedule's new count, pushed
  here as its job (the queue's rules apply: a preventOverlap key, a deduplication). It
  was admitted by that commit, as a flow's jobs for another broker are by theirs; a push
  the queue refuses (a template gone bad) is logged and consumed, never retried.

And :func:`cluster_release`, which another broker sends when a client whose commands it
forwarded here has gone; and :func:`release_claims`, which the router sends a queue
after the pushes whose new custom ids it claimed for it (tq_id_claims).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from . import fields, flows
from .commands.context import Ctx
from .commands.registry import Reply
from .errors import Refused
from .job import COMPLETED, JobRecord
from .options import parse_job_input
from .queue import QueueState, Sliced, slices
from .queue import finished as fin
from .queue.dependencies import SETTLED

log = logging.getLogger("trioqueue.cluster")

CLUSTER_INBOX = "__cluster_inbox__"  # the broker's, never a client's
CLUSTER_RELEASE = "ClusterRelease"  # another broker's, on its peer link
RELEASE_CLAIMS = "__release_claims__"  # the router's, after the pushes it claimed ids for
ADOPT_MESSAGE = "adopt"
NOTICE_MESSAGE = "notice"
DEPEND_MESSAGE = "depend"
PUSH_MESSAGE = "push"


def adopt_message(records: list[dict[str, Any]], edges: list[list[str]]) -> list[Any]:
    return [ADOPT_MESSAGE, records, edges]


def notice_message(job_id: str, notice: tuple[Any, ...]) -> list[Any]:
    return [NOTICE_MESSAGE, job_id, list(notice)]


def depend_message(child_id: str, parent_id: str, parent_queue: str) -> list[Any]:
    return [DEPEND_MESSAGE, child_id, parent_id, parent_queue]


def push_message(schedule: str, job: dict[str, Any], data_chars: int | None = None
                 ) -> list[Any]:
    """A firing's job for its queue's broker, with the template's measured size when
    the schedule has one (the queue then does not measure the data again)."""
    return [PUSH_MESSAGE, schedule, job, data_chars]


def apply_inbox(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    """Apply this queue's inbox messages ``[[number, message], ...]`` in order, each
    recorded consumed in this batch's commit. An adopted job this queue already has
    (a message applied before a restart that replayed it) is skipped."""
    now = ctx.now
    messages = _checked(msg.get("messages"))
    # (the finished records a depend may need, asked for before anything changes: the
    # command runs again once they are read)
    q.finished.want(fin.record_reads(
        m[1] for _, m in messages if m[0] == DEPEND_MESSAGE and q.index.locate(m[1]) != q.name))
    for seq, message in messages:
        kind = message[0]
        if kind == ADOPT_MESSAGE:
            for record in message[1]:
                _adopt(q, JobRecord.from_record(record), now)
            for child_id, parent_id, _ in message[2]:
                q.index.add_dependent(child_id, parent_id)
        elif kind == NOTICE_MESSAGE:
            if q.index.locate(message[1]) == q.name:
                q.apply_notice(tuple(message[2]), now)
        elif kind == DEPEND_MESSAGE:
            _depend(q, message[1], message[2])
        elif kind == PUSH_MESSAGE:
            _push(q, message[1], message[2], message[3] if len(message) > 3 else None, ctx)
        else:
            raise ValueError(f"unknown inbox message {kind!r}")
        q.writes.cluster.consumed.append(seq)
    return {}


def _checked(messages: Any) -> list[tuple[int, list[Any]]]:
    """The broker's own inbox rows, checked for shape (a malformed one is a bug, refused
    whole before anything is applied: never half a batch)."""
    if type(messages) is not list:
        raise Refused("messages must be a list of [number, message]")
    out = []
    for entry in messages:
        if not (isinstance(entry, (list, tuple)) and len(entry) == 2
                and type(entry[0]) is int and isinstance(entry[1], (list, tuple))
                and entry[1] and entry[1][0] in _SHAPES
                and len(entry[1]) in _SHAPES[entry[1][0]]):
            raise Refused(f"not an inbox message: {entry!r:.100}")
        out.append((entry[0], list(entry[1])))
    return out


# the lengths each message may have (a push written before its data's size rode with it
# has three members)
_SHAPES = {ADOPT_MESSAGE: (3,), NOTICE_MESSAGE: (3,), DEPEND_MESSAGE: (4,),
           PUSH_MESSAGE: (3, 4)}


def _depend(q: QueueState, child_id: str, parent_id: str) -> None:
    """A parent elsewhere waits for ``child_id``: registered while the child is live
    here; told at once (outcome row and notice, as a settling child does) when it
    already completed, or is gone; a child that failed without a policy keeps its
    parents waiting, as on one broker (a retry from the DLQ may still complete it)."""
    if q.index.locate(child_id) == q.name:
        q.index.add_dependent(child_id, parent_id)
        return
    record = q.finished.get_any(child_id)
    if record is not None and record["state"] != COMPLETED:
        return
    if record is None:
        outcome = flows.DETACHED
    else:
        outcome = flows.completed_outcome(record["queue"], *q.finished.result_any(child_id))
    q.writes.put_dep_outcome(parent_id, child_id, outcome)
    q.notices.append((parent_id, (SETTLED, parent_id, child_id, outcome)))


def _push(q: QueueState, schedule: Any, job: Any, data_chars: Any, ctx: Ctx) -> None:
    try:
        if type(job) is not dict:
            raise Refused(f"not a job: {job!r:.100}")
        # (a message written before the size rode with it has none: measured here)
        bound = data_chars if type(data_chars) is int else None
        spec = parse_job_input(job, custom_id_key="jobId",
                               max_data_bytes=ctx.max_data_bytes, json_bound=bound)
        q.push([spec], ctx.now)
    except Refused as exc:
        log.warning("cron %s: its firing was refused by queue %s: %s", schedule, q.name,
                    exc.message)


def release_claims(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    """The claims of new custom ids ``ids`` that the router made for this queue's
    pushes before it sent them here: applied after them, so each push is settled
    (admitted, answered as a duplicate, or refused), and the claims go in the commit
    that holds what those pushes wrote. Until then another broker finds the id taken."""
    ids = fields.str_list(msg.get("ids"), "ids")
    q.writes.cluster.claims_done.extend((job_id, q.name) for job_id in ids)
    return {}


def _adopt(q: QueueState, job: JobRecord, now: int) -> None:
    # (the claim of its id, held by the message since the flow's commit, goes with it)
    q.writes.cluster.claims_done.append((job.id, q.name))
    if job.id in q.jobs:  # (applied once already: a replayed message)
        return
    job.seq = q.reserve_seq()
    q.index.add(job.id, q.name)
    for child_id in job.pending or ():
        q.index.add_dependent(child_id, job.id)
    q.adopt(job, now)
    q.writes.put_job(job.to_record())


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


def cluster_release(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply | Sliced:
    """ClusterRelease: a client of the broker at the other end of this peer link, whose
    commands for this queue it forwarded here, has closed its connection. What it
    pulled goes back now, uncharged, as for a client of this broker (RELEASE_CONNECTION),
    rather than when its locks run out; and its parked pulls and waits end, answered
    (the link is still open and carries others' commands: every one it sent gets a
    reply). Routed by queue, so it comes after that client's commands sent before it.

    Only for the stand-in of such a client (``ctx.conn``: the frame's origin, see
    cluster/clients.py), never for a connection of its own: a client's
    connection releases its jobs by closing."""
    if getattr(ctx.conn, "origin", None) is None:
        raise Refused(f"{CLUSTER_RELEASE} is for another broker's peer link, naming one "
                      "of its clients")
    work = q.release_connection_work(ctx.conn, ctx.now, answer_parked=True)
    if slices.is_long(len(q.leases.held_by(ctx.conn) or ())):
        return work  # long work: a slice a step (queue/leases.py)
    work.run()
    return {}
