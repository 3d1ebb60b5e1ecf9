"""The router's side of a cluster's messages between brokers (core/cluster_handlers.py
says what they are): flows across brokers, notices for jobs another broker serves, and
the pokes that have those brokers apply them at once.

**A flow across brokers** (PUSHF whose queues are served by different brokers) stays
atomic: the broker that received it writes its own queues' jobs as for a local flow, and
the other queues' jobs as ``adopt`` messages in their inboxes, all in one commit, with
a ``tq_waits`` row for each child and parent served by different brokers. Once that is
committed it pokes each broker concerned and replies to the client once they have
applied their messages (or failed to answer: the messages are durable, and the next
beat of that broker applies them), so a command sent after the reply finds the jobs in
place, on every broker.

**A notice for a job served elsewhere** (a child's outcome for a parent in another
broker's queue) goes the same way: a ``notice`` message written in the commit of the
batch that settled the child, the child's ``tq_waits`` rows deleted in the same commit,
then a poke. The parent's queue is known from those rows (or from the flow that made
the pair), kept in :class:`RemoteJobs`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from ..actors.ports import Committer
from ..actors.request import Replier, Request
from ..core.cluster_handlers import adopt_message, depend_message, notice_message
from ..core.flows import Dependents
from ..core.job import JobRecord
from ..core.queue.dependencies import SETTLED
from ..core.writes import Writes

# Forget the oldest remote parent's queue past this many (each a pair of strings); one
# whose queue is forgotten is told of its child's outcome at its own queue's next
# takeover, from the outcome row (recovery replays it).
MAX_REMOTE_PARENTS = 1_000_000

Forward = Callable[[str, list[Request]], None]
Route = Callable[[str], str | None]


class RemoteJobs:
    """job id -> its queue, for jobs another broker serves that this broker's jobs refer
    to: the parents of its children (where their outcomes go), or the live jobs its
    pushes name as custom ids or dependencies (bounded: MAX_REMOTE_PARENTS)."""

    def __init__(self) -> None:
        self._queues: OrderedDict[str, str] = OrderedDict()

    def note(self, parent_id: str, queue: str) -> None:
        self._queues[parent_id] = queue
        self._queues.move_to_end(parent_id)
        if len(self._queues) > MAX_REMOTE_PARENTS:
            self._queues.popitem(last=False)

    def queue_of(self, parent_id: str) -> str | None:
        return self._queues.get(parent_id)

    def forget(self, job_id: str) -> None:
        self._queues.pop(job_id, None)

    def learn(self, waits: Iterable[tuple[str, str, str]], dependents: Dependents) -> None:
        """Rows of tq_waits (child, parent, parent's queue) read at a takeover."""
        for child_id, parent_id, queue in waits:
            dependents.add(child_id, parent_id)
            self.note(parent_id, queue)


def remote_notices(parents: RemoteJobs, notices: list[tuple[str, tuple[Any, ...]]]
                   ) -> Writes | None:
    """The messages for notices whose job no queue here holds (None: none goes
    elsewhere): each addressed to its parent's queue; a settled child's waits rows go."""
    writes: Writes | None = None
    for job_id, notice in notices:
        queue = parents.queue_of(job_id)
        if queue is None:
            continue  # (a job gone, as on one broker: the notice no longer matters)
        if writes is None:
            writes = Writes()
        writes.cluster.messages.append((queue, notice_message(job_id, notice)))
        if notice[0] == SETTLED:
            writes.cluster.waits_done.append(notice[2])
    return writes


def depend_writes(child_id: str, parent_id: str, parent_queue: str, child_queue: str
                  ) -> Writes:
    """A parent admitted here waits for a child another broker serves: a ``depend``
    message for the child's queue, and the pair's waits row, in the parent's commit."""
    writes = Writes()
    writes.cluster.messages.append(
        (child_queue, depend_message(child_id, parent_id, parent_queue)))
    writes.cluster.waits.append((child_id, parent_id, parent_queue, child_queue))
    return writes


def flow_across(jobs: list[JobRecord], remote: set[str], parents: RemoteJobs) -> Writes:
    """The inbox messages and waits rows of a flow's jobs in ``remote`` queues (served
    by other brokers), and the notes of remote parents of its local children."""
    queue_of = {job.id: job.queue for job in jobs}
    records: dict[str, list[dict[str, Any]]] = {}
    edges: dict[str, list[list[str]]] = {}
    writes = Writes()
    writes.durable = True
    for job in jobs:
        if job.queue in remote:
            records.setdefault(job.queue, []).append(job.to_record())
        for child_id in job.pending or ():
            child_queue = queue_of[child_id]
            if child_queue not in remote and job.queue not in remote:
                continue
            writes.cluster.waits.append((child_id, job.id, job.queue, child_queue))
            if child_queue in remote:
                edges.setdefault(child_queue, []).append([child_id, job.id, job.queue])
            else:
                parents.note(job.id, job.queue)
    for queue, queue_records in records.items():
        writes.cluster.messages.append(
            (queue, adopt_message(queue_records, edges.get(queue, []))))
    return writes


class Pokes:
    """Once delivered (after the commit that wrote the messages), poke the brokers that
    serve ``queues`` to apply them, then hand ``reply`` to ``then`` (None: nobody waits)
    when every poke is answered, however."""

    def __init__(self, queues: Iterable[str], route: Route, forward: Forward,
                 then: Replier | None = None) -> None:
        self._queues = sorted(set(queues))
        self._route = route
        self._forward = forward
        self._then = then
        self._reply: dict[str, Any] | None = None
        self._waiting = 0

    def deliver(self, reply: dict[str, Any]) -> None:
        self._reply = reply
        by_address: dict[str, list[str]] = {}
        for queue in self._queues:
            address = self._route(queue)
            if address is not None:  # (None: served here since: applied at a beat)
                by_address.setdefault(address, []).append(queue)
        self._waiting = len(by_address)
        for address, queues in by_address.items():
            self._forward(address, [Request("ClusterPoke", {"queues": queues},
                                            self._Answer(self))])
        if not by_address:
            self._done()

    def _done(self) -> None:
        if self._then is not None and self._reply is not None:
            self._then.deliver(self._reply)

    class _Answer:
        def __init__(self, pokes: Pokes) -> None:
            self.pokes = pokes

        def deliver(self, reply: dict[str, Any]) -> None:
            pokes = self.pokes
            pokes._waiting -= 1
            if pokes._waiting == 0:
                pokes._done()


def release_with_pokes(committer: Committer, writes: Writes, queues: Iterable[str],
                       route: Route, forward: Forward,
                       then: tuple[Replier, dict[str, Any]] | None = None) -> None:
    """Submit ``writes``. With ``then`` (a flow's reply), once committed, poke the
    brokers of ``queues`` and hand the reply to its replier when they have answered;
    without, the commit's own notification (LISTEN/NOTIFY) wakes those brokers."""
    committer.submit(writes)
    if then is not None:  # (else the commit's notification wakes their brokers)
        committer.release([(Pokes(queues, route, forward, then[0]), then[1])])
