"""The PostgreSQL store: :class:`~..port.Storage` on tables (layout: :mod:`.layout`).

``trioqueue serve --storage postgresql://...``. Every call blocks for a round trip, so
the store says so (``apply_blocks``): the storage writer commits each batch in a worker
thread, one hop per batch, and the queues read finished jobs in worker threads too
(``QueueActor._fetch_off_thread``, the router's look-up of finished ids). What must
not wait for the network is answered from memory: the finished counts (kept here from
what each commit returned) and the bytes used (measured by the writer's thread now and
then).

A batch is one transaction, sent in one round trip: the operations of every queue are
reduced to the rows they leave (:mod:`.plan`) and written by one statement
(:data:`.layout.WRITE_BATCH`), committed as it ends; only then does :meth:`apply`
return, and only then are the batch's replies sent (docs/durability.md, "PostgreSQL").

A broker's store is given a :class:`~.owner.PgOwner`: the writer's session then
holds the store's owner lock, and a store another broker serves is refused
(:class:`~..port.StoreInUse`). Tools and tests that open a store beside a broker give
none.

The schema is migrated when the store opens (:mod:`.schema`); ``trioqueue migrate``
runs the same step alone.

**In a cluster** (several brokers on one database) the store is given a
:class:`~..port.Fence`: each batch then commits only if this broker still holds the lease
of every queue whose writes it carries, checked by the batch's own statement
(:data:`.layout.WRITE_BATCH_CLUSTER`, which also writes the cluster's own rows:
inbox messages, dependencies across brokers); otherwise :class:`~..port.Fenced` is raised
and nothing is applied. The membership and lease operations are the cluster's (cluster/pg.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import psycopg

from ...core.job import FINISHED_STATES
from ...core.large_values.graveyard import Graveyard
from ...core.large_values.value_count import RUN_MAX_VALUES, holds_many
from ...core.writes import Writes
from .. import keys as K
from ..kept_data import PACKED_MIN_BYTES, read_result, read_row
from ..ops import validate_writes
from ..port import Fence, Fenced, FinishedCursor, FinishedPage, Recovered, Space, Storage
from ..positions import check_page_limit, page_window
from . import layout as L
from .connection import PgLink, StorageUnavailable, redact
from .encoded import EncodedData, packed_record
from .owner import PgOwner
from .plan import BatchPlan, ClusterRows, plan_batch, plan_cluster
from .schema import migrate

__all__ = ["Fenced", "PgStorage", "StorageUnavailable"]

_LOAD_ROWS = 5000  # live records fetched per round trip at a restart
_MEASURE_EVERY_S = 5.0  # the bytes used are measured at most this often
#: Bytes of a piece of data encoded ahead of its record (kept in memory, see
#: :mod:`.encoded`): pauses come between pieces, so it only sets how they group.
_AHEAD_PIECE_BYTES = 1 << 20


class PgStorage(Storage):
    """Jobs in PostgreSQL. ``outage_s``: how long the store keeps retrying through an
    outage before it gives up and the broker stops (:mod:`.connection`).
    ``fence``: in a cluster, the leases this broker holds (see the module)."""

    apply_blocks = True
    ahead_piece_bytes = _AHEAD_PIECE_BYTES

    def __init__(self, dsn: str, *, outage_s: float = 30.0, migrate_schema: bool = True,
                 fence: Fence | None = None, owner: PgOwner | None = None) -> None:
        self._link = PgLink(dsn, outage_s=outage_s, owner=owner)
        self.location = redact(dsn)
        self._fence = fence
        try:
            if migrate_schema:  # (waits out a server that is still starting)
                self._link.write(migrate)
            if owner is not None:  # (held from the writer's first session on)
                self._link.write(owner.record)
        except BaseException:
            self._link.close()
            raise
        # (queue, state) -> finished jobs stored: filled by load(), then kept current
        # from the totals each commit returns (this broker is the only writer; in a
        # cluster, the only writer of the queues it owns, so only their counts are
        # exact: a queue taken over gets its counts from the cluster's load_queues).
        self._counts: dict[tuple[str, str], int] = {}
        self._counts_loaded = False
        self._used_bytes = 0
        self._measured_at = float("-inf")
        self._closed = False
        self._graveyard: Graveyard | None = None
        # large data encoded on the event loop ahead of its records (see .encoded)
        self._encoded = EncodedData()

    def set_graveyard(self, graveyard: Graveyard) -> None:
        self._graveyard = graveyard
        self._encoded.graveyard = graveyard

    # --- data encoded ahead (in memory: the record's commit writes it) ----------------

    def write_ahead(self, row_key: bytes, index: int, piece: bytes | memoryview) -> None:
        self._encoded.write(row_key, piece)

    def expect_ahead(self, text: Any, row_key: bytes, pieces: int) -> None:
        self._encoded.expect(text, row_key, pieces)

    def expect_encoded(self, data: Any, row: bytes) -> None:
        self._encoded.expect_row(data, row)

    def release_ahead(self, text: Any) -> None:
        self._encoded.release(text)

    def drop_ahead_pieces(self, row_key: bytes, pieces: int) -> None:
        self._encoded.drop(row_key)

    def expect_result(self, result: Any, row: bytes) -> None:
        self._encoded.expect_result(result, row)

    def release_result(self, result: Any) -> None:
        self._encoded.release_result(result)

    def keep_encoded(self, data: Any, encoded: bytes) -> None:
        self._encoded.kept.keep(data, encoded)

    def drop_encoded(self, data: Any) -> None:
        self._encoded.kept.drop(data)

    def encoded_of(self, data: Any) -> bytes | None:
        return self._encoded.kept.of(data)

    def let_go(self, value: Any) -> None:
        """Job data a commit finished or a read answered: a container of many values
        is taken apart in slices (this store keeps no data apart to say it is large)."""
        graveyard = self._graveyard
        if graveyard is not None and holds_many(value, RUN_MAX_VALUES):
            graveyard.bury(value)

    # --- writes ---------------------------------------------------------------------

    def apply(self, batches: Sequence[Writes]) -> None:
        self._check_open()
        # ValueError before any I/O
        plan = plan_batch(validate_writes(batches), self._encoded)
        rows = plan_cluster(batches)
        if not plan and rows is None:
            return
        if self._fence is None:
            if rows is not None:
                raise ValueError("a cluster's rows need a cluster's store (a fence)")
            totals = self._link.write(lambda conn: _commit(conn, plan))
        else:
            fenced = (*_leases(self._fence, batches), rows or ClusterRows())
            totals = self._link.write(lambda conn: _commit(conn, plan, fenced))
        self._counts.update(totals)
        if time.monotonic() - self._measured_at >= _MEASURE_EVERY_S:
            self._measure()

    def sync(self) -> None:
        """Wait until PostgreSQL has flushed every commit so far to its WAL on disk.

        With ``synchronous_commit`` on (PostgreSQL's default) each commit already did;
        with it off (a DSN's ``options=-csynchronous_commit=off``) the server flushes
        its WAL a little later, and this is how ``--fsync always``, the interval fsync
        and a ``durable`` job still get what they ask for: a transaction that writes a
        row and commits synchronously waits for the WAL up to its own commit record,
        which comes after every earlier commit's (docs/durability.md, "PostgreSQL").
        """
        self._check_open()
        if not self._link.commits_flushed:  # (with it on, every commit was flushed)
            self._link.write(_flush_wal)

    def _measure(self) -> None:
        self._measured_at = time.monotonic()
        self._used_bytes = self._link.read(
            lambda conn: conn.execute(L.TABLE_BYTES).fetchone()[0])  # type: ignore[index]

    # --- a cluster ------------------------------------------------------------------

    @property
    def link(self) -> PgLink:
        """This store's connections, which a cluster's membership and lease operations
        share (cluster/pg.py composes them around the store)."""
        return self._link

    def forget_queue(self, queue: str) -> None:
        """Drop the finished counts of a queue this broker no longer owns: its new
        owner's commits would leave them stale."""
        for key in [key for key in self._counts if key[0] == queue]:
            del self._counts[key]
        self._encoded.forget_queue(queue)

    def replace_counts(self, queues: Iterable[str],
                       counts: Mapping[tuple[str, str], int]) -> None:
        """The finished counts of ``queues`` are ``counts`` (as read when this broker
        took them over): those missing there are zero."""
        for queue in queues:
            self.forget_queue(queue)
        self._counts.update(counts)
        # (a cluster's broker never loads every queue: its counts are those it took)
        self._counts_loaded = True

    # --- reads ----------------------------------------------------------------------

    def load(self) -> Recovered:
        self._check_open()
        recovered = self._link.read(_load)
        self._counts = dict(recovered.finished_counts)
        self._counts_loaded = True
        self._measure()
        return recovered

    def get_finished(self, job_id: str) -> dict[str, Any] | None:
        raw = self._one(L.GET_FINISHED, job_id)
        return None if raw is None else K.decode_value(raw[0])

    def get_finished_packed(self, job_id: str) -> dict[str, Any] | None:
        """A large record's data left encoded (its bytes found, not walked), for the
        queue's actor to decode on the event loop a slice at a time: decoded here, it
        held the interpreter lock, so the loop, for all of it."""
        raw = self._one(L.GET_FINISHED, job_id)
        return None if raw is None else packed_record(raw[0])

    def get_result(self, job_id: str) -> tuple[bool, Any]:
        raw = self._one(L.GET_RESULT, job_id)
        if raw is None or raw[0] is None:
            return False, None
        return True, K.decode_result(raw[0])

    def get_result_packed(self, job_id: str) -> tuple[bool, Any]:
        """A large result left encoded, for the queue's actor to decode a slice at a
        time (decoded here, it held the interpreter lock, so the loop, for all of it)."""
        raw = self._one(L.GET_RESULT, job_id)
        return read_result(None if raw is None else raw[0], PACKED_MIN_BYTES)

    def queues_of_finished(self, job_ids: Sequence[str]) -> dict[str, str]:
        """Job id -> queue, for those of ``job_ids`` that are finished jobs (one round
        trip for a whole batch of look-ups)."""
        self._check_open()
        keys = [key for key in map(K.lookup_job_key, job_ids) if key is not None]
        if not keys:
            return {}
        rows = self._link.read(lambda conn: conn.execute(
            L.QUEUES_OF_FINISHED, (keys,)).fetchall())
        return {K.decode_job_key(bytes(key)): queue for key, queue in rows}

    def _one(self, query: str, job_id: str) -> tuple[Any, ...] | None:
        self._check_open()
        key = K.lookup_job_key(job_id)
        if key is None:
            return None
        return self._link.read(lambda conn: conn.execute(query, (key,)).fetchone())

    def count_finished(self, queue: str, state: str) -> int:
        """From memory: the totals the last commit returned (exact: this broker is the
        store's only writer)."""
        self._check_open()
        _check_state(state)
        if not self._counts_loaded:  # (a store used before load(): tests, tools)
            self._counts = self._link.read(_counts)
            self._counts_loaded = True
        return self._counts.get((queue, state), 0)

    def list_finished(
        self, queue: str, state: str, *, asc: bool, offset: int, limit: int
    ) -> list[dict[str, Any]]:
        return self._listed(queue, state, asc, offset, limit, K.decode_value)

    def list_finished_packed(
        self, queue: str, state: str, *, asc: bool, offset: int, limit: int
    ) -> list[dict[str, Any]]:
        """Large records' data left encoded, as :meth:`get_finished_packed` leaves it."""
        return self._listed(queue, state, asc, offset, limit, packed_record)

    def _listed(self, queue: str, state: str, asc: bool, offset: int, limit: int,
                decode: Callable[[bytes], dict[str, Any]]) -> list[dict[str, Any]]:
        total = self.count_finished(queue, state)
        start, take = page_window(total, asc=asc, offset=offset, limit=limit)
        if not take:
            return []
        # PostgreSQL steps over an offset entry by entry: count from the nearer end.
        from_start = start <= total - start - take
        query = L.PAGE_ASC if from_start else L.PAGE_DESC
        skip = start if from_start else total - start - take
        rows = self._link.read(lambda conn: conn.execute(
            query, (queue, state, skip, take)).fetchall())
        records = [decode(row[0]) for row in rows]
        if from_start != asc:
            records.reverse()
        return records

    def finished_ranks(
        self, queue: str, state: str, positions: Sequence[int], others: Sequence[str]
    ) -> list[tuple[int, str, tuple[int, ...]]]:
        self._check_open()
        _check_state(state)
        for other in others:
            _check_state(other)
        if not positions:
            return []
        if len(others) > 1:
            raise ValueError(f"finished_ranks: at most one other state, not {others!r}")
        args: dict[str, Any] = {"queue": queue, "state": state,
                                "positions": list(positions), "n": len(positions),
                                "scan": positions[-1] + 1}
        query = L.RANKS_ALONE
        if others:
            query, args["other"] = L.RANKS_WITH_OTHER, others[0]
        rows = self._link.read(lambda conn: conn.execute(query, args).fetchall())
        return [(row[0], K.decode_job_key(bytes(row[1])), tuple(row[2:])) for row in rows]

    def finished_ids_page(
        self, queue: str, state: str, *, after: FinishedCursor | None, limit: int
    ) -> FinishedPage:
        self._check_open()
        _check_state(state)
        check_page_limit(limit)
        query: str = L.IDS_FIRST
        args: tuple[Any, ...] = (queue, state, limit)
        if after is not None:
            key = K.lookup_job_key(after[1])
            if key is None:
                return FinishedPage([], None)
            query, args = L.IDS_AFTER, (queue, state, after[0], key, limit)
        rows = self._link.read(lambda conn: conn.execute(query, args).fetchall())
        ids = [K.decode_job_key(bytes(row[0])) for row in rows]
        if len(rows) < limit:
            return FinishedPage(ids, None)
        return FinishedPage(ids, (rows[-1][1], ids[-1]))

    def dep_outcomes(self, parent_id: str) -> dict[str, dict[str, Any]]:
        self._check_open()
        key = K.lookup_job_key(parent_id)
        if key is None:
            return {}
        rows = self._link.read(lambda conn: conn.execute(L.OUTCOMES_OF, (key,)).fetchall())
        return {K.decode_job_key(bytes(child)): K.decode_value(outcome)
                for child, outcome in rows}

    def dep_outcomes_packed(self, parent_id: str) -> dict[str, Any]:
        """A large outcome (a child's result of many values) left encoded, for the
        parent queue's actor to decode a slice at a time (decoded here, it held the
        interpreter lock, so the loop, for all of it)."""
        self._check_open()
        key = K.lookup_job_key(parent_id)
        if key is None:
            return {}
        rows = self._link.read(lambda conn: conn.execute(L.OUTCOMES_OF, (key,)).fetchall())
        return {K.decode_job_key(bytes(child)): read_row(bytes(outcome), PACKED_MIN_BYTES)
                for child, outcome in rows}

    # --- space ----------------------------------------------------------------------

    def used_bytes(self) -> int:
        """The tables' and indexes' size as last measured (every few seconds, by the
        writer's thread): read on the trio thread, so never a round trip."""
        return self._used_bytes

    def space(self) -> Space:
        return Space(self._used_bytes, 0, 0)

    # --- lifecycle ------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("storage is closed")

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._link.close()


def _check_state(state: str) -> None:
    """An unknown state is a caller's bug (as in every store)."""
    if state not in FINISHED_STATES:
        raise ValueError(f"not a finished state: {state!r}")


def _leases(fence: Fence, batches: Sequence[Writes]) -> tuple[str, list[str], list[int]]:
    """(broker id, queues, their epochs) that a batch's commit must check; raises
    :class:`Fenced` before any I/O for a queue whose lease this broker does not hold."""
    queues = sorted({w.queue for w in batches if w.queue is not None})
    epochs = []
    for queue in queues:
        epoch = fence.epoch(queue)
        if epoch is None:
            raise Fenced.not_held(queue)
        epochs.append(epoch)
    return fence.broker_id, queues, epochs


def _commit(conn: psycopg.Connection[Any], plan: BatchPlan,
            fenced: tuple[str, list[str], list[int], ClusterRows] | None = None
            ) -> dict[tuple[str, str], int]:
    """The batch as one statement (an implicit transaction, one round trip); in a
    cluster (``fenced``: this broker, the batch's queues and their epochs, the cluster's
    rows) fenced by the leases; returns the finished totals it changed."""
    live_keys = list(plan.live_put)
    live_rows = plan.live_put.values()
    fin_keys = list(plan.finished_put)
    fin_cols: list[list[Any]] = ([list(col) for col in zip(*plan.finished_put.values(),
                                                          strict=True)]
                                 if fin_keys else [[], [], [], [], []])
    parents: list[bytes] = []
    children: list[bytes] = []
    outcomes: list[bytes] = []
    for parent, rows_of in plan.outcomes_put.items():
        for child, outcome in rows_of.items():
            parents.append(parent)
            children.append(child)
            outcomes.append(outcome)
    params = (
        list(plan.live_delete),
        live_keys, [row[0] for row in live_rows], [row[1] for row in live_rows],
        list(plan.finished_delete),
        fin_keys, *fin_cols,
        parents, children, outcomes, list(plan.outcomes_cleared),
        list(plan.queue_meta), list(plan.queue_meta.values()),
        list(plan.broker_delete),
        list(plan.broker_put), list(plan.broker_put.values()),
    )
    if fenced is None:
        rows = conn.execute(L.WRITE_BATCH, params, prepare=True).fetchall()
        return {(queue, state): n for queue, state, n in rows}
    broker, queues, epochs, extra = fenced
    waits = list(extra.waits_put.items())
    cluster_params = (
        [q for q, _ in extra.messages], [m for _, m in extra.messages],
        list(extra.consumed), list(extra.waits_gone),
        [child for (child, _), _ in waits], [parent for (_, parent), _ in waits],
        [pq for _, (pq, _) in waits], [cq for _, (_, cq) in waits],
        sorted(plan.broker_kinds),
        list(extra.claims_gone), list(extra.claims_gone.values()),
    )
    held = (list(extra.claims_held), list(extra.claims_held.values()))
    try:
        # (the live table's guards take the batch's queues after their own rows)
        guarded = (params[0], queues, *params[1:4], queues, *params[4:])
        rows = conn.execute(L.WRITE_BATCH_CLUSTER, (
            *guarded, *cluster_params, broker, broker, queues, epochs,
            len(extra.messages), broker, *held, len(held[0])), prepare=True).fetchall()
    except psycopg.Error as exc:
        if exc.sqlstate == L.FENCED_SQLSTATE:
            raise Fenced(exc.diag.message_primary or str(exc)) from None
        raise
    # (the check's own row has no queue)
    return {(queue, state): n for queue, state, n in rows if queue is not None}


def _flush_wal(conn: psycopg.Connection[Any]) -> None:
    with conn.transaction():
        conn.execute(L.FLUSH_WAL_SETTING)
        conn.execute(L.FLUSH_WAL_WRITE)


def _counts(conn: psycopg.Connection[Any]) -> dict[tuple[str, str], int]:
    return {(q, s): n for q, s, n in conn.execute(L.LOAD_COUNTS).fetchall()}


def _load(conn: psycopg.Connection[Any]) -> Recovered:
    """Everything a restart rebuilds from, read in one repeatable-read snapshot (the
    live records in steps of a server-side cursor, so memory holds one step of raw rows
    at a time besides the decoded records)."""
    loads = K.decode_value
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        conn.execute(L.WHOLE_TABLE_READS)
        live: list[dict[str, Any]] = []
        with conn.cursor(name="tq_load_live") as cur:
            cur.itersize = _LOAD_ROWS
            cur.execute(L.LOAD_LIVE)
            live.extend(loads(row[0]) for row in cur)
        meta = {q: loads(m) for q, m in conn.execute(L.LOAD_QUEUE_META).fetchall()}
        counts = _counts(conn)
        broker = K.decode_broker_rows(
            (bytes(k), bytes(v)) for k, v in conn.execute(L.LOAD_BROKER_RECORDS).fetchall())
    return Recovered(live_jobs=live, queue_meta=meta, finished_counts=counts,
                     broker_records=broker)
