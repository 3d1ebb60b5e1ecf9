"""The storage port: the small, named set of operations the broker needs from a store.

Two adapters implement it: :mod:`trioqueue.storage.memory` (dicts, for tests and
``--memory``) and :mod:`trioqueue.storage.lmdb.store` (the default, durable). Every
method is synchronous. The storage writer calls :meth:`Storage.apply` with the writes of
a whole batch: on the trio thread for a store that answers in microseconds (both
adapters here; :meth:`Storage.sync`, an fsync, still goes to a worker thread), or in a
worker thread, one hop per batch, for a store that says its commits block
(:attr:`Storage.apply_blocks`, a store across a network). What a write must do is
:mod:`trioqueue.storage.ops` (validated, typed operations); how LMDB lays it out in
bytes is :mod:`trioqueue.storage.keys`, which another store does not need.

Records are plain dicts as produced by :meth:`trioqueue.core.job.Job.to_record`; the
``state`` key says where the job lives (queued, active, waiting-children, completed,
failed) and ``queue`` which queue owns it.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from ..core.job import FINISHED_STATES
from ..core.large_values.graveyard import Graveyard
from ..core.writes import Writes

if TYPE_CHECKING:
    from .value_pieces import PackedRecords


class StorageFullError(Exception):
    """The store has no room left for the writes; nothing of the batch was applied."""


class Space(NamedTuple):
    """What a store holds, for the admission of new jobs (docs/durability.md, "Full
    storage"): enough to say how much the jobs already accepted may still write."""

    used_bytes: int  # what the committed data occupies
    live_bytes: int  # of which the records of live jobs take this much
    live_jobs: int  # live job records stored


# What finishing one job adds besides its result and error, in a store that keeps
# exactly the bytes it is given (the memory store): the finished-index key (queue,
# state, createdAt, id), the result's key, the record's growth on the way (lock and
# timing fields, timeline entries) and a dead letter's entry fields. Measured (memory
# store, jobs of 100 B to 5 KB, pulled and finished in order or all at once): 210
# bytes beside a result; 800 beside an error and stack trace, which a failed record
# holds twice (the last attempt's, and the DLQ entry's).
FINISH_JOB_BYTES = 1024


@dataclass
class Recovered:
    """What a restart rebuilds the queues from."""

    live_jobs: list[dict[str, Any]] = field(default_factory=list)
    queue_meta: dict[str, dict[str, Any]] = field(default_factory=dict)
    # (queue, "completed" | "failed") -> number of finished jobs kept in storage
    finished_counts: dict[tuple[str, str], int] = field(default_factory=dict)
    # the broker's own registries: kind -> {name: record} (cron schedules, webhooks)
    broker_records: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)


# Where a page of finished ids ended: (createdAt, job id) of its last id. Finished jobs of
# one queue and state are ordered by exactly that pair, so the next page starts after it
# even when that job has been deleted meanwhile (as Obliterate does with each page).
FinishedCursor = tuple[int, str]


class FinishedPage(NamedTuple):
    """One page of :meth:`Storage.finished_ids_page`."""

    ids: list[str]
    # pass as ``after`` to get the next page; None when this page was the last one
    after: FinishedCursor | None


_ID_PAGE = 1000  # ids per page of iter_finished_ids


class Storage(abc.ABC):
    """A job store. Every method is synchronous and never awaits."""

    # Whether apply() waits for something outside this process (a database server's
    # round trip, a disk flush per commit): then the storage writer never calls it on
    # the trio thread, where it would stall every queue, but in a worker thread, one
    # hop per batch (see trioqueue.actors.writer). Such a store must allow reads from
    # the trio thread while an apply runs in the worker thread, and show them either all
    # of that commit or none of it. False (the default) means apply returns in
    # microseconds and the writer commits inline, which a hop would slow down: the
    # LMDB and in-memory adapters (LMDB's map resize even requires that no read of this
    # process runs during a commit).
    apply_blocks: bool = False

    #: Where a store across a network lives, for logs and StorageStatus (a URL without
    #: its password); None for a store in this process (memory, LMDB's directory).
    location: str | None = None

    #: Bytes of one piece of a long data string written ahead of its job, one short
    #: transaction a piece (storage/lmdb/ahead.py, actors/ahead_writes.py); 0 when this
    #: store takes no writes ahead (a job's data is then written with its record).
    ahead_piece_bytes: int = 0

    def write_ahead(self, row_key: bytes, index: int, piece: bytes | memoryview) -> None:
        """Write one piece of a string ahead of its job (its own transaction).
        Raises :class:`StorageFullError` with nothing of the piece written."""
        raise NotImplementedError

    def expect_ahead(self, text: Any, row_key: bytes, pieces: int) -> None:
        """The pieces under ``row_key`` hold ``text`` (a string's UTF-8 bytes, or
        other data's row, ``V({"d": data})``): the next record whose data is this very
        object takes them instead of writing its data again."""
        raise NotImplementedError

    def expect_encoded(self, data: Any, row: bytes) -> None:
        """``row`` is ``V({"d": data})``, encoded ahead a slice at a time: the next
        record whose data is this very object keeps it apart as this row (put with
        the record, in its commit) instead of encoding the data there."""
        raise NotImplementedError

    def release_ahead(self, text: Any) -> None:
        """No record will take ``text``'s pieces (or row encoded ahead) now: those no
        record took are deleted."""
        raise NotImplementedError

    def expect_result(self, result: Any, row: bytes) -> None:
        """``row`` is ``result``'s row (``V({"r": result})``), encoded ahead a slice at
        a time: the finish that stores this very object writes it as it is. A store
        that encodes its rows elsewhere (off the event loop) ignores it."""
        return None

    def release_result(self, result: Any) -> None:
        """The command that carried ``result`` is answered: its row is not needed."""
        return None

    def drop_ahead_pieces(self, row_key: bytes, pieces: int) -> None:
        """Delete pieces written ahead that were never expected (a write cut short)."""
        raise NotImplementedError

    #: Whether this store keeps a long progress message and a child's large result for
    #: its parent apart, written ahead (:meth:`expect_progress`,
    #: :meth:`expect_outcome`); a store that does not keeps them in their rows.
    keeps_values_ahead: bool = False

    def expect_progress(self, text: str, row_key: bytes, pieces: int) -> None:
        """The pieces under ``row_key`` hold ``text``'s UTF-8 bytes: the next record
        whose progress message is this very string takes them instead of holding the
        text (storage/kept_progress.py)."""
        raise NotImplementedError

    def release_progress(self, text: str) -> None:
        """The command that carried ``text`` is answered: its pieces go, if no record
        took them."""
        return None

    def keep_encoded(self, data: Any, encoded: bytes) -> None:
        """``encoded`` is msgpack's bytes of ``data`` itself, made ahead a slice at a
        time (a schedule's job template): every record that carries this very object
        (a firing's job, the schedule's record) is written from them rather than
        encoding it again, until as many :meth:`drop_encoded`. A store that keeps no
        such bytes ignores it."""
        return None

    def drop_encoded(self, data: Any) -> None:
        return None

    def encoded_of(self, data: Any) -> bytes | None:
        """The bytes kept for this very object by :meth:`keep_encoded`, if any."""
        return None

    def expect_outcome(self, result: Any, row_key: bytes, pieces: int) -> None:
        """The pieces under ``row_key`` hold ``result``'s bytes (its row without the
        row's head): the next dependency outcome row that carries this very result
        takes them instead of copying it (storage/kept_outcomes.py)."""
        raise NotImplementedError

    def release_outcome(self, result: Any) -> None:
        """The command that carried ``result`` is answered: its pieces go, if no
        outcome row took them."""
        return None

    def let_go(self, value: Any) -> None:
        """``value`` is job data read from this store for a command, or of a job a
        commit just finished: once nothing refers to it, take it apart a slice at a
        time (the graveyard set here) if large, rather than have its last holder free
        it in one call."""
        return None

    def set_graveyard(self, graveyard: Graveyard) -> None:
        """Hand the large data this store lets go of (a finished or deleted job's, kept
        apart) to ``graveyard``, to be taken apart a slice at a time; a store that
        keeps no data apart ignores it."""
        return None

    @abc.abstractmethod
    def load(self) -> Recovered:
        """Read back everything needed to rebuild every queue after a restart."""

    @abc.abstractmethod
    def apply(self, batches: Sequence[Writes]) -> None:
        """Apply every operation of every batch, in order, in ONE atomic transaction.

        Raises :class:`StorageFullError` (nothing applied) when the store is full; any
        other exception means the store is in trouble and the broker must stop.
        """

    @abc.abstractmethod
    def sync(self) -> None:
        """Force what :meth:`apply` committed onto the disk (fsync). May block."""

    @abc.abstractmethod
    def get_finished(self, job_id: str) -> dict[str, Any] | None:
        """The record of a completed or failed job, or None."""

    def get_finished_packed(self, job_id: str) -> dict[str, Any] | None:
        """:meth:`get_finished` for a command: large data kept apart from the record
        may come as :class:`~.value_pieces.Packed` (its row, undecoded), which the
        caller decodes a slice at a time (``value_pieces.unpacked_steps``)."""
        return self.get_finished(job_id)

    def get_result_packed(self, job_id: str) -> tuple[bool, Any]:
        """:meth:`get_result` for a command: a large result may come as
        :class:`~.value_pieces.Packed` (its row, ``V({"r": result})``, undecoded), which
        the caller decodes a slice at a time."""
        return self.get_result(job_id)

    def queues_of_finished(self, job_ids: Sequence[str]) -> dict[str, str]:
        """Job id -> queue for those of ``job_ids`` that are finished jobs: the
        router's look-ups of a whole batch in one call (a store across a network
        answers them in one round trip)."""
        found = {}
        for job_id in job_ids:
            record = self.get_finished(job_id)
            if record is not None:
                found[job_id] = record["queue"]
        return found

    @abc.abstractmethod
    def get_result(self, job_id: str) -> tuple[bool, Any]:
        """``(True, result)`` when a result is stored (``None`` is a real result)."""

    @abc.abstractmethod
    def list_finished(
        self, queue: str, state: str, *, asc: bool, offset: int, limit: int
    ) -> list[dict[str, Any]]:
        """Finished records of one queue and state ordered by (createdAt, id): ``limit``
        of them from ``offset`` in ascending (``asc``) or descending order.

        Costs O(log n + limit), whatever the offset (GetJobs pages through a million
        completed jobs). A negative offset counts as 0; ``limit <= 0`` gives ``[]``.
        """

    def list_finished_packed(
        self, queue: str, state: str, *, asc: bool, offset: int, limit: int
    ) -> list[dict[str, Any]] | PackedRecords:
        """:meth:`list_finished` for a command: the page may come undecoded, as
        :class:`~.value_pieces.PackedRecords`, or as records whose data (kept apart, or
        a large record's) is :class:`~.value_pieces.Packed`, as
        :meth:`get_finished_packed`'s is, for the caller to decode a slice at a time."""
        return self.list_finished(queue, state, asc=asc, offset=offset, limit=limit)

    @abc.abstractmethod
    def count_finished(self, queue: str, state: str) -> int:
        """How many finished jobs of one queue and state are stored (exact, O(1))."""

    @abc.abstractmethod
    def finished_ranks(
        self, queue: str, state: str, positions: Sequence[int], others: Sequence[str]
    ) -> list[tuple[int, str, tuple[int, ...]]]:
        """Where jobs of one finished state stand among the other finished states.

        For each of ``positions`` (ascending, each below :meth:`count_finished`) of the
        (createdAt, id) order of the queue's ``state`` jobs: ``(createdAt, id, before)``
        of the job there, ``before`` holding, for each state of ``others``, how many of
        the queue's jobs in that state come before it in that order. One snapshot.

        GetJobs over finished and live jobs together finds its offset from these (a
        search of a few rounds, see core/queue/listing.py), so a call costs
        O(positions · log n) where the store can find a position, never O(n).
        """

    @abc.abstractmethod
    def finished_ids_page(
        self, queue: str, state: str, *, after: FinishedCursor | None, limit: int
    ) -> FinishedPage:
        """Up to ``limit`` job ids of one queue and finished state, in (createdAt, id)
        order, from the start (``after=None``) or after the cursor a previous page
        returned; O(log n + limit).

        For long work done in bounded slices (Obliterate, Clean): take a page, delete
        those jobs, commit, let other queues run, take the next page with
        ``after=page.after``; stop when ``page.after`` is None. Each page is read
        afresh, so jobs finished meanwhile with a later (createdAt, id) show up in a
        later page, and jobs deleted meanwhile do not. ``limit`` must be positive.
        """

    def iter_finished_ids(self, queue: str, state: str) -> Iterator[str]:
        """Every job id of one queue and finished state, in (createdAt, id) order.

        Read in pages of :meth:`finished_ids_page` (1,000 ids), so writes made between
        pages are seen by the next page. The state is checked at the call, not at the
        first ``next()``.
        """
        if state not in FINISHED_STATES:
            raise ValueError(f"not a finished state: {state!r}")
        return self._iter_ids(queue, state)

    def _iter_ids(self, queue: str, state: str) -> Iterator[str]:
        after: FinishedCursor | None = None
        while True:
            page = self.finished_ids_page(queue, state, after=after, limit=_ID_PAGE)
            yield from page.ids
            if page.after is None:
                return
            after = page.after

    @abc.abstractmethod
    def dep_outcomes(self, parent_id: str) -> dict[str, dict[str, Any]]:
        """Child id -> outcome, for every dependency outcome row of ``parent_id``.

        Rows are written with :meth:`~trioqueue.core.writes.Writes.put_dep_outcome` (in
        the child's own commit) and deleted with the parent (``delete_job`` of the
        parent id), never when the parent finishes or is put again: a parent reads them
        for GetChildrenValues and after a restart. Children come in code point order of
        their ids; each outcome is a fresh copy. Empty when there is no row, or when
        ``parent_id`` could never have been stored as a parent.
        """

    def dep_outcomes_packed(self, parent_id: str) -> dict[str, Any]:
        """:meth:`dep_outcomes` for a command: a large outcome (a child's result of many
        values) may come as :class:`~.value_pieces.Packed` (its row undecoded), which
        the caller decodes a slice at a time."""
        return self.dep_outcomes(parent_id)

    @abc.abstractmethod
    def close(self) -> None:
        """Release the store. Safe to call twice."""

    # --- space (admission of new jobs, see docs/durability.md "Full storage") ---------
    # Not abstract: a store that has no limit (``max_bytes`` None) is never full, so
    # wrappers and test doubles need not implement them.

    @property
    def max_bytes(self) -> int | None:
        """The most this store may hold, in the unit of :meth:`used_bytes`; None: no limit."""
        return None

    def used_bytes(self) -> int:
        """What the committed data occupies now, in bytes; cheap enough for once per batch.

        Space freed by deletes counts as free again at once (a store that was full
        takes new jobs again after jobs are removed). Writes not yet committed are not
        included: callers commit first.
        """
        return 0

    def used_bytes_bound(self) -> int:
        """An upper bound of :meth:`used_bytes`, for callers that only need to know
        that the store is far from full. Adapters override it when they have a bound
        much cheaper than the exact figure."""
        return self.used_bytes()

    def space(self) -> Space:
        """:meth:`used_bytes` with what the live jobs take of it, from one snapshot."""
        return Space(self.used_bytes(), 0, 0)

    def space_bound(self) -> Space:
        """Upper bounds of :meth:`space`'s three figures, as cheap as
        :meth:`used_bytes_bound` (adapters with a cheap bound override it)."""
        return self.space()

    def disk_bytes(self) -> int | None:
        """The most this store could take on its disk now, in the unit of
        :meth:`used_bytes`: what its files hold there and what the file system can
        still give them. None for a store with no disk of its own (in memory, or a
        database server's). A syscall or two: asked once per admission measure."""
        return None

    def finish_bytes(self, live_bytes: int, live_jobs: int, allowance_bytes: int) -> int:
        """The most that pulling and finishing ``live_jobs`` jobs whose records take
        ``live_bytes`` may add to this store, if each keeps at most ``allowance_bytes``
        of result, error and stack trace.

        This is the part of the store the jobs already accepted have a claim on: new
        jobs are admitted only while it still fits (docs/durability.md, "Full
        storage"). The answer is the layout's: this default suits a store that counts
        exactly the bytes it keeps, where a finished record replaces the live one;
        a store of pages (LMDB) must add what its page splits may cost. The allowance
        counts twice: a dead-lettered record keeps its error and stack trace twice.
        """
        return live_jobs * (2 * allowance_bytes + FINISH_JOB_BYTES)


class StorageUnavailable(Exception):
    """A store across a network stayed unreachable past its outage limit (or refused
    the connection for good): the broker must stop (storage/pg/connection.py)."""


class StorageOpenError(Exception):
    """The store cannot be opened (PostgreSQL unreachable at startup, a schema newer
    than this trioqueue): the broker does not start; the message says why in a line."""


class StoreInUse(StorageOpenError):
    """Another broker serves the store (a store has one owner; on PostgreSQL, one
    broker without ``--cluster`` or any number with it): this one does not start. The
    message names the other owner and what to do, in a line."""


# --- a cluster: several brokers on one database (docs: shared/design/scale-out.md) ----


class Fenced(Exception):
    """A commit carried writes of a queue whose lease this broker no longer holds (or
    never held): nothing of the batch was applied, and the broker must stop, since
    another broker now owns the queue. Not an outage: never retried."""

    @classmethod
    def lost(cls, queue: str, epoch: int) -> Fenced:
        # (the same words as the database's tq_fence, pg/layout.py)
        return cls(f"lost the lease of queue '{queue}' (epoch {epoch}) to another broker")

    @classmethod
    def not_held(cls, queue: str) -> Fenced:
        return cls(f"holds no lease of queue '{queue}': its writes cannot be committed")


class Fence(Protocol):
    """What a store asks before committing a queue's writes in a cluster: the lease
    (its epoch, a fencing token) this broker believes it holds."""

    @property
    def broker_id(self) -> str: ...

    def epoch(self, queue: str) -> int | None:
        """The epoch of ``queue``'s lease held here; None: not held."""


class Claimed(NamedTuple):
    """Where a job id is, as a cluster's look-up and claim of custom ids found it
    (cluster/pg.py): ``kind`` is LIVE or FINISHED (a job of ``queue``), OURS
    (this broker's claim for ``queue``: none of its admissions of the id has settled
    yet) or THEIRS (another broker's valid claim: the id is being admitted there)."""

    queue: str
    kind: str


LIVE, THEIRS, FINISHED, OURS = "l", "c", "f", "m"
_CLAIM_RANK = {LIVE: 0, THEIRS: 1, FINISHED: 2, OURS: 3}


def where_claimed(rows: Iterable[tuple[str, str, str]]) -> dict[str, Claimed]:
    """Rows (job id, queue, kind) to one answer per id: a live job first, then
    another's claim (the id is taken), a finished job (ours to replace), our claim."""
    out: dict[str, Claimed] = {}
    for job_id, queue, kind in rows:
        seen = out.get(job_id)
        if seen is None or _CLAIM_RANK[kind] < _CLAIM_RANK[seen.kind]:
            out[job_id] = Claimed(queue, kind)
    return out


class Beat(NamedTuple):
    """What a heartbeat sees: every live broker, every queue's lease, and the version
    of each kind of broker record (raised by each commit that changes one of them)."""

    live: dict[str, str]  # broker id -> address, this broker included
    leases: dict[str, tuple[str | None, int]]  # queue -> (owner or None: free, epoch)
    versions: Mapping[str, int] = MappingProxyType({})  # kind -> version (none yet: absent)

