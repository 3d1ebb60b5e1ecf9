"""Named storage mutations, recorded by the sans-IO core and applied by a storage adapter.

The core never touches storage: a command appends named operations to a :class:`Writes`
and the storage writer applies the writes of many commands (from many queues) in one
atomic transaction (group commit). Each operation is one of five typed tuples below, the
same for every adapter: :mod:`trioqueue.storage.ops` checks them, and each adapter maps
them onto its own layout (LMDB's keys, a SQL adapter's statements).

Each operation carries the fields an adapter keys and indexes by, taken out of the
record once, where the core records it (``FinishJob.queue``, ``state``, ``created_at``):
a store orders finished jobs of one queue and state by ``(created_at, job_id)``.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class PutJob(NamedTuple):
    """Upsert a live job (queued, active, waiting-children) under ``job_id``."""

    job_id: str
    record: dict[str, Any]


class FinishJob(NamedTuple):
    """Move a job to the finished jobs (completed or failed), replacing any earlier
    finished generation of the same id with its index entry and result.

    ``has_result`` False means "no result": a result stored by an earlier generation is
    removed. ``result`` may be ``None`` as a real result.
    """

    job_id: str
    queue: str
    state: str  # "completed" | "failed"
    created_at: int
    record: dict[str, Any]
    has_result: bool
    result: Any


class DeleteJob(NamedTuple):
    """Remove a job wherever it is, with its result and the dependency outcome rows in
    which it is the parent (rows where it is the child belong to their parent)."""

    job_id: str


class PutQueueMeta(NamedTuple):
    """Replace one queue's persisted control state."""

    queue: str
    meta: dict[str, Any]


class PutDepOutcome(NamedTuple):
    """Upsert one child's outcome for its parent; the row lives as long as the parent's
    record: finishing or re-putting the parent keeps it."""

    parent_id: str
    child_id: str
    outcome: dict[str, Any]


class PutBrokerRecord(NamedTuple):
    """Upsert (or, with ``value`` None, delete) one record of the broker's own, not a
    queue's: a cron schedule, a webhook. ``kind`` names the registry, ``name`` the
    record in it. Committed with the batch it is in, like any write: a cron's
    ``executions`` and ``nextRun`` with the job its firing pushed."""

    kind: str
    name: str
    value: dict[str, Any] | None


Op = PutJob | FinishJob | DeleteJob | PutQueueMeta | PutDepOutcome | PutBrokerRecord

# tuple.__new__ builds a NamedTuple in C, skipping its generated Python __new__: for the
# operations every job goes through, that is a frame less per job.
_new = tuple.__new__


class ClusterWrites:
    """Rows only a cluster's store keeps (several brokers on one PostgreSQL database,
    docs/scale-out.md), committed with the batch they ride in:

    * ``messages``: (queue, message) for another broker's queue, into that queue's
      inbox (``tq_inbox``): a flow's jobs for it to adopt, a notice for one of its jobs.
      Written in the sender's commit, so a message exists exactly when what caused it
      does; the owner applies it and deletes it in its own commit (``consumed``: the
      inbox rows' numbers).
    * ``waits``: (child id, parent id, parent's queue, child's queue) for a child and a
      parent served by different brokers, so whichever broker serves the child knows
      whom to tell when it settles, after any takeover; ``waits_done``: the child ids
      whose rows go (the child settled and its parents were told).
    * ``claims_done``: (job id, queue) of custom-id claims whose admission is settled
      (admitted, answered as a duplicate, or refused), which go (``tq_id_claims``);
      ``claims_held``: (job id, queue) of a flow's claims for jobs it sends another
      broker's queue, which its inbox message holds from then on.
    """

    __slots__ = ("messages", "consumed", "waits", "waits_done", "claims_done",
                 "claims_held")

    def __init__(self) -> None:
        self.messages: list[tuple[str, Any]] = []
        self.consumed: list[int] = []
        self.waits: list[tuple[str, str, str, str]] = []
        self.waits_done: list[str] = []
        self.claims_done: list[tuple[str, str]] = []
        self.claims_held: list[tuple[str, str]] = []

    def __bool__(self) -> bool:
        return bool(self.messages or self.consumed or self.waits or self.waits_done
                    or self.claims_done or self.claims_held)

    def extend(self, other: ClusterWrites) -> None:
        self.messages.extend(other.messages)
        self.consumed.extend(other.consumed)
        self.waits.extend(other.waits)
        self.waits_done.extend(other.waits_done)
        self.claims_done.extend(other.claims_done)
        self.claims_held.extend(other.claims_held)


class Writes:
    """An ordered list of storage operations, plus whether the caller asked for fsync,
    and the queue whose lease they need in a cluster (``queue``: set by whoever submits
    them; None for writes of no queue, the broker's own records). A store with a fence
    (storage/pg/store.py) commits them only while this broker holds that queue.
    ``cluster``: a cluster's own rows (:class:`ClusterWrites`), made on first use."""

    __slots__ = ("ops", "durable", "queue", "_cluster")

    def __init__(self, queue: str | None = None) -> None:
        self.ops: list[Op] = []
        self.durable = False
        self.queue = queue
        self._cluster: ClusterWrites | None = None

    @property
    def cluster(self) -> ClusterWrites:
        if self._cluster is None:
            self._cluster = ClusterWrites()
        return self._cluster

    @property
    def cluster_rows(self) -> ClusterWrites | None:
        """The cluster's rows, None when there are none (no store but a cluster's
        ever sees any)."""
        return self._cluster if self._cluster else None

    def __bool__(self) -> bool:
        return bool(self.ops) or bool(self._cluster)

    def __len__(self) -> int:
        return len(self.ops)

    def put_job(self, record: dict[str, Any]) -> None:
        self.ops.append(_new(PutJob, (record["id"], record)))

    def finish_job(self, record: dict[str, Any], has_result: bool, result: Any = None) -> None:
        self.ops.append(_new(FinishJob, (
            record["id"], record["queue"], record.get("state"), record["createdAt"],
            record, has_result, result if has_result else None)))

    def delete_job(self, job_id: str) -> None:
        self.ops.append(_new(DeleteJob, (job_id,)))

    def put_queue_meta(self, queue: str, meta: dict[str, Any]) -> None:
        self.ops.append(PutQueueMeta(queue, meta))

    def put_broker_record(self, kind: str, name: str, value: dict[str, Any] | None) -> None:
        """Store (None: delete) the broker's record ``name`` of registry ``kind``."""
        self.ops.append(PutBrokerRecord(kind, name, value))

    def put_dep_outcome(self, parent_id: str, child_id: str, outcome: dict[str, Any]) -> None:
        """Record a child's outcome for its parent (upsert of the (parent, child) row).

        Appended to the same Writes as the child's own state change, so the row and that
        change commit together: a crash can never leave a finished child whose parent
        does not know its outcome, nor the reverse.
        """
        self.ops.append(PutDepOutcome(parent_id, child_id, outcome))

    def extend(self, other: Writes) -> None:
        """Append ``other``'s operations. Writes of two different queues never merge:
        one Writes names one lease, and a commit fenced by the wrong one could outlive
        the other's owner (ValueError, nothing appended)."""
        if other.queue is not None and other.queue != self.queue:
            if self.queue is not None:
                raise ValueError(f"cannot extend writes of queue {self.queue!r} with "
                                 f"writes of queue {other.queue!r}")
            self.queue = other.queue  # (writes of no queue may ride on a queue's lease)
        self.ops.extend(other.ops)
        self.durable = self.durable or other.durable
        if other._cluster:
            self.cluster.extend(other._cluster)
