"""A cluster's membership and queue leases on PostgreSQL (``trioqueue serve --cluster``).

Several brokers share one database. Each is a row of ``tq_brokers`` whose heartbeat the
database's clock writes; each queue is owned by one live broker, a row of
``tq_queue_leases`` with an epoch that every claim raises by one, and that every commit
of the owner checks in its own statement (``tq_fence``, storage/pg/layout.py), so a broker
cut off past its lease can never write for that queue again
(shared/design/scale-out.md).

Each operation here is one statement, one round trip and atomic; all are synchronous
(the broker calls them from worker threads) and run on the store's read pool
(``PgLink``), with its outage rule. Every comparison of times is
the database's, so no broker's clock matters.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import psycopg

from ..storage import keys as K
from ..storage.pg import layout as L
from ..storage.pg.connection import PgLink
from ..storage.pg.store import PgStorage
from ..storage.port import Beat, Claimed, Recovered, where_claimed

__all__ = ["Beat", "PgCluster", "tables_of"]

_LOAD_ROWS = 5000  # live records fetched per round trip of a queue's rebuild

# Told the finished counts of queues just loaded (PgStorage.replace_counts).
CountsSink = Callable[[Iterable[str], Mapping[tuple[str, str], int]], None]


def tables_of(store: PgStorage) -> PgCluster:
    """The cluster's operations on ``store``'s own connections; a queue they load
    (``load_queues``) gets its finished counts in the store."""
    return PgCluster(store.link, on_counts=store.replace_counts)


class PgCluster:
    """The named cluster operations, on ``link``'s reads (a broker is live while its
    heartbeat is younger than ``lease_s``; a lease is valid while its owner is live).
    ``on_counts`` is told the counts :meth:`load_queues` read (the store's copy)."""

    def __init__(self, link: PgLink, *, on_counts: CountsSink | None = None) -> None:
        self._link = link
        self._on_counts = on_counts
        self._listener: psycopg.Connection[Any] | None = None  # see wait_inbox

    def join(self, broker_id: str, address: str) -> None:
        """Add (or replace) this broker's row, its heartbeat now; leases an earlier
        process under the same id held are given up (claimed afresh)."""
        self._link.read(lambda conn: _run(conn, L.JOIN, {"id": broker_id,
                                                        "address": address}))

    def beat(self, broker_id: str, lease_s: float) -> Beat | None:
        """Renew our heartbeat and see every live broker and every lease; None when
        our heartbeat was already stale or our row is gone (the others may have taken
        our queues), and then it is not renewed."""
        rows = self._link.read(lambda conn: conn.execute(
            L.BEAT, {"id": broker_id, "lease": float(lease_s)}).fetchall())
        renewed = False
        live: dict[str, str] = {}
        leases: dict[str, tuple[str | None, int]] = {}
        versions: dict[str, int] = {}
        for kind, name, value, epoch in rows:
            if kind == "l":
                leases[name] = (value, epoch)
            elif kind == "b":
                live[name] = value
            elif kind == "v":
                versions[name] = int(epoch)
            else:
                renewed = True
        return Beat(live, leases, versions) if renewed else None

    def claim(self, queue: str, broker_id: str, lease_s: float) -> int | None:
        """Take ``queue`` if its lease is missing, free or held by a broker that is not
        live: the new epoch (one more). None when a live broker holds it (ourselves
        included: the caller knows its epoch) or when we are not live ourselves."""
        row = self._link.read(lambda conn: conn.execute(
            L.CLAIM, {"queue": queue, "id": broker_id, "lease": float(lease_s)}
        ).fetchone())
        return None if row is None else int(row[0])

    def release(self, queue: str, broker_id: str, epoch: int) -> bool:
        """Free ``queue`` if we still hold it at ``epoch``; whether we did."""
        return self._link.read(lambda conn: conn.execute(
            L.RELEASE, (queue, broker_id, epoch)).rowcount) == 1

    def leave(self, broker_id: str) -> None:
        """Free every lease we hold and remove our row: a graceful stop, after which
        the others take our queues at once instead of after the lease."""
        self._link.read(lambda conn: _run(conn, L.LEAVE, {"id": broker_id}))

    def load_queues(self, queues: Sequence[str]) -> Recovered:
        """The live jobs, meta and finished counts of just ``queues`` (no broker
        records), from one snapshot; the counts also become the store's."""
        names = sorted(set(queues))
        recovered = self._link.read(lambda conn: _load_queues(conn, names))
        if self._on_counts is not None:
            self._on_counts(names, recovered.finished_counts)
        return recovered

    def load_broker_records(self, kinds: Sequence[str]
                            ) -> dict[str, dict[str, dict[str, Any]]]:
        """The broker's own records of ``kinds`` (cron schedules, webhooks): kind ->
        {name: record}, from one snapshot, without reading a job (a cluster's broker
        starts, or takes the cron scheduler, or follows another broker's change)."""
        ranges = [(kind.encode("utf-8") + b"\x00", kind.encode("utf-8") + b"\x01")
                  for kind in kinds]
        rows = self._link.read(lambda conn: _broker_rows(conn, ranges))
        return K.decode_broker_rows(rows)

    def queues_of(self, job_ids: Sequence[str]) -> dict[str, str]:
        """Job id -> queue for those of ``job_ids`` stored live or finished (ids that
        could never be stored are skipped), in one round trip."""
        return {job_id: queue for job_id, (queue, _) in self.locate_jobs(job_ids).items()}

    def locate_jobs(self, job_ids: Sequence[str]) -> dict[str, tuple[str, bool]]:
        """Job id -> (queue, whether it is live) for those of ``job_ids`` stored live
        or finished, in one round trip."""
        keys = [key for key in map(K.lookup_job_key, job_ids) if key is not None]
        if not keys:
            return {}
        rows = self._link.read(lambda conn: conn.execute(
            L.QUEUES_OF_JOBS, (keys, keys)).fetchall())
        return {K.decode_job_key(bytes(key)): (queue, bool(live))
                for key, queue, live in rows}

    def claim_ids(self, broker_id: str, lease_s: float, wanted: Sequence[tuple[str, str]],
                  looks: Sequence[str]) -> dict[str, Claimed]:
        """Claim the new ids a batch admits (``wanted``: (job id, queue), each id once)
        and look up ``looks`` too, in one round trip: job id -> where it is now (a
        :class:`Claimed`; ids found nowhere and claimed by nobody are left out). A claim
        is ours when it names us: ours before (an admission in flight), or made now."""
        keyed = [(K.lookup_job_key(job_id), queue) for job_id, queue in wanted]
        claims = [(key, queue) for key, queue in keyed if key is not None]
        looked = [key for key in map(K.lookup_job_key, looks) if key is not None]
        if not claims and not looked:
            return {}
        rows = self._link.read(lambda conn: conn.execute(L.CLAIM_IDS, (
            broker_id, float(lease_s), [k for k, _ in claims], [q for _, q in claims],
            looked)).fetchall())
        return where_claimed((K.decode_job_key(bytes(key)), queue, kind)
                             for key, queue, kind in rows)

    def inbox(self, queues: Sequence[str], limit: int) -> list[tuple[int, str, Any]]:
        """Up to ``limit`` messages for ``queues`` from other brokers, oldest first:
        (number, queue, message decoded)."""
        if not queues:
            return []
        rows = self._link.read(lambda conn: conn.execute(
            L.INBOX_OF, (list(queues), limit)).fetchall())
        return [(int(seq), queue, K.decode_value(bytes(raw))) for seq, queue, raw in rows]

    def wait_inbox(self, timeout_s: float) -> bool:
        """Block up to ``timeout_s`` for a batch's inbox notification (any broker's
        commit that wrote inbox messages: WRITE_BATCH_CLUSTER notifies once); whether
        one came. LISTEN is a session's, so it has a connection of its own, opened on
        first use, only ever used from the one thread that calls this. A failure drops
        it (the next call opens another) after waiting out the timeout: a notification
        missed meanwhile costs a beat, at which every inbox is read anyway."""
        conn = self._listener
        try:
            if conn is None or conn.closed:
                conn = self._listener = self._link.connect()
                conn.autocommit = True
                conn.execute(L.LISTEN_INBOX)
            for _ in conn.notifies(timeout=timeout_s, stop_after=1):
                return True
            return False
        except psycopg.Error:
            self._listener = None
            if conn is not None:
                conn.close()
            time.sleep(timeout_s)
            return False

    def inbox_queues(self) -> list[str]:
        """The queues with messages waiting (few: each is applied within a beat)."""
        return [q for (q,) in self._link.read(
            lambda conn: conn.execute(L.INBOX_QUEUES).fetchall())]

    def waits_of(self, queues: Sequence[str]) -> list[tuple[str, str, str]]:
        """(child id, parent id, parent's queue) for the children of ``queues`` whose
        parents another broker may serve."""
        if not queues:
            return []
        rows = self._link.read(lambda conn: conn.execute(
            L.WAITS_OF, (list(queues),)).fetchall())
        return [(K.decode_job_key(bytes(child)), K.decode_job_key(bytes(parent)), queue)
                for child, parent, queue in rows]


def _run(conn: psycopg.Connection[Any], query: str, args: Any) -> None:
    conn.execute(query, args)


def _broker_rows(conn: psycopg.Connection[Any], ranges: list[tuple[bytes, bytes]]
                 ) -> list[tuple[bytes, bytes]]:
    """The rows of tq_broker_records in each key range, read in one snapshot."""
    rows: list[tuple[bytes, bytes]] = []
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        for low, high in ranges:
            rows.extend((bytes(k), bytes(v)) for k, v in conn.execute(
                L.LOAD_BROKER_RECORDS_OF, (low, high)).fetchall())
    return rows


def _load_queues(conn: psycopg.Connection[Any], queues: list[str]) -> Recovered:
    """What a takeover rebuilds ``queues`` from, in one repeatable-read snapshot (the
    live records in steps of a server-side cursor, as a restart's load reads them)."""
    loads = K.decode_value
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        live: list[dict[str, Any]] = []
        with conn.cursor(name="tq_load_queues") as cur:
            cur.itersize = _LOAD_ROWS
            cur.execute(L.LOAD_LIVE_OF, (queues,))
            live.extend(loads(row[0]) for row in cur)
        meta = {q: loads(m) for q, m in conn.execute(
            L.LOAD_QUEUE_META_OF, (queues,)).fetchall()}
        counts = {(q, s): n for q, s, n in conn.execute(
            L.LOAD_COUNTS_OF, (queues,)).fetchall()}
    return Recovered(live_jobs=live, queue_meta=meta, finished_counts=counts)
