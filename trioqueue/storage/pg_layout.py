"""PostgreSQL's table layout: every table, index, migration and statement in one module.

What :mod:`.keys` is to LMDB, this is to :mod:`.pg_store`: the one place that says how a
job is kept, so a change of layout is a new migration here and nowhere else.

Choices, and why:

* **Job ids are ``bytea``** (the UTF-8 of the id, :func:`.keys.job_key`), not ``text``:
  a client's custom id may hold NUL, which ``text`` cannot, and bytes compare in code
  point order whatever the database's collation, the order LMDB and the memory store
  keep (finished jobs by ``(created_at, id)``, dependency outcomes by child id).
* **Records are ``bytea``** in the value encoding every store uses
  (:func:`.keys.encode_value`: msgpack, CBOR for what msgpack cannot hold), not
  ``jsonb``: job data may hold bytes and integers JSON has no room for, and nothing
  queries inside a record; the broker keeps the state in memory.
* **Live and finished jobs are two tables**, as in LMDB: the live ones are read back
  whole at a restart, the finished ones are paged by an index.
* **Finished counts are a table** (``tq_finished_counts``) kept in the same statement
  that adds or removes a finished row, so a restart reads one row per queue and state
  instead of counting a million rows, and the counts can never disagree with the rows.
* Names start with ``tq_`` and are unqualified: the schema is the connection's
  ``search_path`` (a DSN may say ``options=-csearch_path=jobs``).

A batch of writes, whatever its size and mix, is one statement (:data:`WRITE_BATCH`)
taking its rows as arrays (``unnest``; :mod:`.pg_plan` makes them).
"""

from __future__ import annotations

from typing import NamedTuple

# The one advisory lock key of migrations (any bigint; "tq-migrate" in ASCII, shortened).
MIGRATION_LOCK_KEY = 0x74712D6D6967
VERSION_TABLE = "tq_schema_version"


class Migration(NamedTuple):
    version: int
    description: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "jobs, finished jobs, counts, outcomes, queue meta, broker records", (
        # A live record is written again at each pull, progress and retry: room left
        # in each page lets PostgreSQL update it in place (a HOT update, no index
        # entry to add), which keeps the table and its index from bloating.
        """CREATE TABLE tq_live (
            id bytea PRIMARY KEY,
            queue text COLLATE "C" NOT NULL,
            record bytea NOT NULL) WITH (fillfactor = 70)""",
        """CREATE TABLE tq_finished (
            id bytea PRIMARY KEY,
            queue text COLLATE "C" NOT NULL,
            state text COLLATE "C" NOT NULL,
            created_at bigint NOT NULL,
            record bytea NOT NULL,
            result bytea)""",  # NULL: no result (an encoded None is a result)
        # pages of GetJobs, Clean and Obliterate: (queue, state) in (created_at, id)
        # order, read from the index alone where the visibility map allows
        """CREATE INDEX tq_finished_order
            ON tq_finished (queue, state, created_at, id)""",
        """CREATE TABLE tq_finished_counts (
            queue text COLLATE "C" NOT NULL,
            state text COLLATE "C" NOT NULL,
            n bigint NOT NULL,
            PRIMARY KEY (queue, state))""",
        """CREATE TABLE tq_dep_outcomes (
            parent bytea NOT NULL,
            child bytea NOT NULL,
            outcome bytea NOT NULL,
            PRIMARY KEY (parent, child))""",
        """CREATE TABLE tq_queue_meta (
            queue text COLLATE "C" PRIMARY KEY,
            meta bytea NOT NULL)""",
        # key: keys.broker_key(kind, name), so rows decode as LMDB's do
        """CREATE TABLE tq_broker_records (
            key bytea PRIMARY KEY,
            value bytea NOT NULL)""",
        # one row that sync() writes (see FLUSH_WAL below)
        "CREATE TABLE tq_wal_flushes (id int PRIMARY KEY, n bigint NOT NULL)",
        "INSERT INTO tq_wal_flushes VALUES (1, 0)",
    )),
)

LATEST_VERSION = MIGRATIONS[-1].version

CREATE_VERSION_TABLE = f"""CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (
    version integer PRIMARY KEY,
    description text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now())"""
CURRENT_VERSION = f"SELECT coalesce(max(version), 0) FROM {VERSION_TABLE}"
RECORD_VERSION = f"INSERT INTO {VERSION_TABLE} (version, description) VALUES (%s, %s)"
HAS_VERSION_TABLE = f"SELECT to_regclass('{VERSION_TABLE}') IS NOT NULL"
LOCK_MIGRATIONS = "SELECT pg_advisory_xact_lock(%s)"

# --- writes: a whole batch is ONE statement ----------------------------------------
#
# One statement is one implicit transaction and one round trip, and its text never
# changes, so the server plans it once (psycopg prepares it after a few runs); parts a
# batch does not use get empty arrays. Every part is a data-modifying WITH clause: all
# of them run, against the same snapshot, and none sees another's rows, which is why
# pg_plan.py hands each table's rows over at most once (a row deleted is never also
# put). Parameters go in binary (%b): arrays of bytes are not hex-escaped.
#
# Counts: each finished row removed takes one off its (queue, state); each written row
# adds one to its new (queue, state) and takes one off the (queue, state) of the row it
# replaced (``fin_old``: rows as they were before the statement). Applying the same
# batch twice (a commit whose outcome a lost connection hid) leaves the counts as once:
# the second pass replaces each row with itself and deletes nothing. The new totals
# come back, so the store's copy of the counts follows what was committed.
WRITE_BATCH = """WITH
    live_gone AS (DELETE FROM tq_live WHERE id = ANY(%b::bytea[])),
    live_new AS (
        INSERT INTO tq_live (id, queue, record)
            SELECT * FROM unnest(%b::bytea[], %b::text[], %b::bytea[])
        ON CONFLICT (id) DO UPDATE SET queue = EXCLUDED.queue, record = EXCLUDED.record),
    fin_gone AS (DELETE FROM tq_finished WHERE id = ANY(%b::bytea[]) RETURNING queue, state),
    fin_rows AS (
        SELECT * FROM unnest(%b::bytea[], %b::text[], %b::text[], %b::int8[], %b::bytea[],
                             %b::bytea[]) AS t(id, queue, state, created_at, record, result)),
    -- (a look-up by primary key per row: an index scan, see KEYED_SESSION)
    fin_old AS (
        SELECT f.queue, f.state FROM fin_rows r CROSS JOIN LATERAL (
            SELECT queue, state FROM tq_finished WHERE id = r.id LIMIT 1) AS f),
    fin_new AS (
        INSERT INTO tq_finished (id, queue, state, created_at, record, result)
            SELECT * FROM fin_rows
        ON CONFLICT (id) DO UPDATE SET queue = EXCLUDED.queue, state = EXCLUDED.state,
            created_at = EXCLUDED.created_at, record = EXCLUDED.record,
            result = EXCLUDED.result
        RETURNING queue, state),
    out_rows AS (
        SELECT * FROM unnest(%b::bytea[], %b::bytea[], %b::bytea[]) AS t(parent, child, outcome)),
    -- a deleted parent's rows go, except those the same batch puts again (updated below)
    out_gone AS (
        DELETE FROM tq_dep_outcomes d WHERE d.parent = ANY(%b::bytea[]) AND NOT EXISTS (
            SELECT 1 FROM out_rows r WHERE r.parent = d.parent AND r.child = d.child)),
    out_new AS (
        INSERT INTO tq_dep_outcomes (parent, child, outcome) SELECT * FROM out_rows
        ON CONFLICT (parent, child) DO UPDATE SET outcome = EXCLUDED.outcome),
    meta_new AS (
        INSERT INTO tq_queue_meta (queue, meta)
            SELECT * FROM unnest(%b::text[], %b::bytea[])
        ON CONFLICT (queue) DO UPDATE SET meta = EXCLUDED.meta),
    broker_gone AS (DELETE FROM tq_broker_records WHERE key = ANY(%b::bytea[])),
    broker_new AS (
        INSERT INTO tq_broker_records (key, value)
            SELECT * FROM unnest(%b::bytea[], %b::bytea[])
        ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value),
    delta AS (
        SELECT queue, state, sum(d)::bigint AS d FROM (
            SELECT queue, state, -1 AS d FROM fin_gone
            UNION ALL SELECT queue, state, -1 FROM fin_old
            UNION ALL SELECT queue, state, 1 FROM fin_new) AS moves
        GROUP BY queue, state)
INSERT INTO tq_finished_counts AS c (queue, state, n)
    SELECT queue, state, d FROM delta WHERE d <> 0
ON CONFLICT (queue, state) DO UPDATE SET n = c.n + EXCLUDED.n
RETURNING queue, state, n"""

# Sessions: every statement the broker runs once started reaches rows by key (ids, or a
# (queue, state) prefix of tq_finished_order). The server plans a prepared statement
# again after any change to a table's statistics, at whatever size the tables have then,
# and keeps that plan: planned while a table had no pages (a fresh database, or just
# after VACUUM truncated an emptied table), a sequential scan is the cheapest, and it
# stayed in use as the table grew, so each batch read every row of tq_live and
# tq_finished, once per row for the replaced-row look-up: ten times slower
# (docs/benchmarks.md, issue 18). With sequential scans off the planner takes an index
# wherever one serves, and still scans where none does.
KEYED_SESSION = "SET enable_seqscan = off"
# A restart reads whole tables: there the planner chooses freely.
WHOLE_TABLE_READS = "SET LOCAL enable_seqscan = on"

# sync(): a transaction that commits synchronously. It must write something: a
# transaction that wrote no WAL of its own commits without waiting for a flush, whatever
# synchronous_commit says (docs/durability.md, "PostgreSQL").
FLUSH_WAL_SETTING = "SET LOCAL synchronous_commit = on"
FLUSH_WAL_WRITE = "UPDATE tq_wal_flushes SET n = n + 1 WHERE id = 1"

# --- reads --------------------------------------------------------------------------

LOAD_LIVE = "SELECT record FROM tq_live ORDER BY id"
LOAD_QUEUE_META = "SELECT queue, meta FROM tq_queue_meta ORDER BY queue"
LOAD_COUNTS = "SELECT queue, state, n FROM tq_finished_counts WHERE n > 0"
LOAD_BROKER_RECORDS = "SELECT key, value FROM tq_broker_records ORDER BY key"
GET_FINISHED = "SELECT record FROM tq_finished WHERE id = %b"
GET_RESULT = "SELECT result FROM tq_finished WHERE id = %b"
QUEUES_OF_FINISHED = "SELECT id, queue FROM tq_finished WHERE id = ANY(%b::bytea[])"
# A page by offset, from whichever end is nearer: PostgreSQL skips an offset one index
# entry at a time. The skipping reads the index alone (an index-only scan of
# tq_finished_order, where the visibility map allows: autovacuum keeps it so), and only
# the page's rows are then fetched by primary key.
PAGE_ASC = """SELECT f.record FROM (
        SELECT id, created_at FROM tq_finished WHERE queue = %s AND state = %s
        ORDER BY created_at, id OFFSET %s LIMIT %s) AS p
    JOIN tq_finished f USING (id) ORDER BY p.created_at, p.id"""
PAGE_DESC = """SELECT f.record FROM (
        SELECT id, created_at FROM tq_finished WHERE queue = %s AND state = %s
        ORDER BY created_at DESC, id DESC OFFSET %s LIMIT %s) AS p
    JOIN tq_finished f USING (id) ORDER BY p.created_at DESC, p.id DESC"""
IDS_FIRST = """SELECT id, created_at FROM tq_finished WHERE queue = %s AND state = %s
    ORDER BY created_at, id LIMIT %s"""
IDS_AFTER = """SELECT id, created_at FROM tq_finished WHERE queue = %s AND state = %s
    AND (created_at, id) > (%s, %b) ORDER BY created_at, id LIMIT %s"""
OUTCOMES_OF = "SELECT child, outcome FROM tq_dep_outcomes WHERE parent = %b ORDER BY child"
TABLE_BYTES = """SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
    FROM pg_class c WHERE c.relkind = 'r' AND c.relname LIKE 'tq\\_%%'
    AND pg_table_is_visible(c.oid)"""
