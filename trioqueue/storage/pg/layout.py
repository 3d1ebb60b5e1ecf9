"""PostgreSQL's table layout: every table, index, migration and statement in one module.

What :mod:`..keys` is to LMDB, this is to :mod:`.store`: the one place that says how a
job is kept, so a change of layout is a new migration here and nowhere else.

Choices, and why:

* **Job ids are ``bytea``** (the UTF-8 of the id, :func:`..keys.job_key`), not ``text``:
  a client's custom id may hold NUL, which ``text`` cannot, and bytes compare in code
  point order whatever the database's collation, the order LMDB and the memory store
  keep (finished jobs by ``(created_at, id)``, dependency outcomes by child id).
* **Records are ``bytea``** in the value encoding every store uses
  (:func:`..keys.encode_value`: msgpack, CBOR for what msgpack cannot hold), not
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
taking its rows as arrays (``unnest``; :mod:`.plan` makes them).
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
    Migration(2, "a cluster: brokers, queue leases, tq_fence, live jobs by queue", (
        # heartbeat: the database's now(), so no broker trusts its own clock
        """CREATE TABLE tq_brokers (
            id text COLLATE "C" PRIMARY KEY,
            address text NOT NULL,
            started_at timestamptz NOT NULL DEFAULT now(),
            heartbeat timestamptz NOT NULL DEFAULT now())""",
        # owner NULL: free. No expiry of its own: a lease is valid while its owner's
        # heartbeat is, so one heartbeat renews all of a broker's leases. No foreign
        # key: a dead broker's row may go while its leases wait to be claimed.
        """CREATE TABLE tq_queue_leases (
            queue text COLLATE "C" PRIMARY KEY,
            owner text COLLATE "C",
            epoch bigint NOT NULL)""",
        # the rebuild of one queue taken over reads its live jobs alone
        "CREATE INDEX tq_live_queue ON tq_live (queue)",
        # A database one broker used becomes a cluster's: every queue it holds gets a
        # free lease, which the first claim takes at epoch 1.
        """INSERT INTO tq_queue_leases (queue, owner, epoch)
            SELECT queue, NULL, 0 FROM (
                SELECT queue FROM tq_live
                UNION SELECT queue FROM tq_queue_meta
                UNION SELECT queue FROM tq_finished_counts WHERE n > 0) AS known""",
        # The fencing check of a commit, called by WRITE_BATCH_FENCED in the batch's own
        # statement. FOR SHARE conflicts with the row lock of a claim's UPDATE (FOR NO
        # KEY UPDATE), so of a claim and a commit the first to lock the lease row
        # decides: a claim that committed first is seen here (the lock follows the row
        # to its newest version, and the check below, a statement of a volatile
        # function, reads with a fresh snapshot) and the commit fails; a claim that
        # comes later waits until this commit has ended, so the new owner's rebuild,
        # read after its claim, sees everything this commit wrote. Rows are locked in
        # queue order, as LEAVE does, so two such statements cannot deadlock.
        """CREATE FUNCTION tq_fence(broker text, queues text[], epochs bigint[])
            RETURNS bigint LANGUAGE plpgsql AS $fence$
        DECLARE
            lost record;
        BEGIN
            PERFORM 1 FROM tq_queue_leases WHERE queue = ANY(queues)
                ORDER BY queue FOR SHARE;
            SELECT w.queue, w.epoch INTO lost
                FROM unnest(queues, epochs) WITH ORDINALITY AS w(queue, epoch, n)
                WHERE NOT EXISTS (
                    SELECT 1 FROM tq_queue_leases l
                    WHERE l.queue = w.queue AND l.owner = broker AND l.epoch = w.epoch)
                ORDER BY w.n LIMIT 1;
            IF FOUND THEN
                RAISE EXCEPTION USING ERRCODE = 'TQF01', MESSAGE = format(
                    'lost the lease of queue %L (epoch %s) to another broker',
                    lost.queue, lost.epoch);
            END IF;
            RETURN cardinality(queues);
        END
        $fence$""",
    )),
    Migration(3, "a cluster: queue inboxes, dependencies across brokers", (
        # messages for a queue from other brokers (a flow's jobs to adopt, a notice for
        # one of its jobs), written in the sender's commit, applied and deleted in the
        # owner's: read by queue in arrival order
        """CREATE TABLE tq_inbox (
            seq bigserial PRIMARY KEY,
            queue text COLLATE "C" NOT NULL,
            message bytea NOT NULL)""",
        "CREATE INDEX tq_inbox_queue ON tq_inbox (queue, seq)",
        # a child and a parent served by different brokers: read by the child's queue
        # when a broker takes it, so it knows whom to tell when the child settles
        """CREATE TABLE tq_waits (
            child bytea NOT NULL,
            parent bytea NOT NULL,
            parent_queue text COLLATE "C" NOT NULL,
            child_queue text COLLATE "C" NOT NULL,
            PRIMARY KEY (child, parent))""",
        "CREATE INDEX tq_waits_child_queue ON tq_waits (child_queue)",
    )),
    Migration(4, "a cluster: versions of the broker records", (
        # kind -> a number that every commit changing a broker record of that kind
        # raises (in the commit itself); each beat reads it, so every broker knows
        # within a beat that another one changed the webhooks, and reloads them
        """CREATE TABLE tq_record_versions (
            kind text COLLATE "C" PRIMARY KEY,
            version bigint NOT NULL)""",
    )),
    Migration(5, "a cluster: claims of new custom ids", (
        # A job id a broker is about to admit as new (a client's custom id), claimed in
        # the look-up that precedes the admission, so two brokers never admit one id in
        # two queues. ``broker`` and ``epoch``: the claimant and its lease of ``queue``
        # (the claim is valid while that lease is); epoch NULL: a flow's job for a queue
        # another broker serves, valid while the claimant is live; broker NULL: that
        # job's inbox message was committed, and the claim goes when it is applied.
        # Rows are few: each goes in the commit that settles its admission.
        """CREATE TABLE tq_id_claims (
            id bytea PRIMARY KEY,
            queue text COLLATE "C" NOT NULL,
            broker text COLLATE "C",
            epoch bigint,
            claimed_at timestamptz NOT NULL DEFAULT now())""",
        # The look-up and the claim, one call (CLAIM_IDS). First the claims: a new row,
        # or a row whose claim is no longer valid taken over (its lease moved on, or its
        # flow's broker is dead), in id order so two claimants cannot deadlock; a row
        # another transaction is writing (a commit that settles it, another claim) is
        # waited for. Then, with a fresh snapshot (a statement of a volatile function),
        # where each id is: a live or finished job (a commit that settled a claim is
        # seen whole), and whose claim it is now ('m': ours, 'c': another's).
        """CREATE FUNCTION tq_claim_ids(me text, lease float8, ids bytea[],
                                        queues text[], looks bytea[])
            RETURNS TABLE (job bytea, job_queue text, kind text)
            LANGUAGE plpgsql AS $claim$
        #variable_conflict use_column
        BEGIN
            INSERT INTO tq_id_claims AS c (id, queue, broker, epoch)
                SELECT w.id, w.queue, me, l.epoch
                FROM unnest(ids, queues) AS w(id, queue)
                LEFT JOIN tq_queue_leases l ON l.queue = w.queue AND l.owner = me
                ORDER BY w.id
            ON CONFLICT (id) DO UPDATE SET queue = EXCLUDED.queue,
                broker = EXCLUDED.broker, epoch = EXCLUDED.epoch, claimed_at = now()
                WHERE c.broker IS NOT NULL AND NOT CASE WHEN c.epoch IS NULL
                    THEN EXISTS (SELECT 1 FROM tq_brokers b WHERE b.id = c.broker
                        AND b.heartbeat > now() - make_interval(secs => lease))
                    ELSE EXISTS (SELECT 1 FROM tq_queue_leases l WHERE l.queue = c.queue
                        AND l.owner = c.broker AND l.epoch = c.epoch) END;
            RETURN QUERY
                SELECT t.id, t.queue, 'l'::text FROM tq_live t
                    WHERE t.id = ANY(ids || looks)
                UNION ALL SELECT f.id, f.queue, 'f'::text FROM tq_finished f
                    WHERE f.id = ANY(ids || looks)
                UNION ALL SELECT c.id, c.queue,
                    CASE WHEN c.broker = me THEN 'm' ELSE 'c' END
                    FROM tq_id_claims c WHERE c.id = ANY(ids);
        END
        $claim$""",
        # A flow's commit turns its claims for other brokers' queues into claims held
        # by the inbox messages it writes (broker NULL), each of which must still be
        # this broker's: one taken over (this broker was dead to the others meanwhile)
        # fails the commit, as a lost lease does.
        """CREATE FUNCTION tq_hold_claims(me text, ids bytea[], queues text[])
            RETURNS bigint LANGUAGE plpgsql AS $hold$
        DECLARE
            held bigint;
        BEGIN
            UPDATE tq_id_claims c SET broker = NULL, epoch = NULL
                FROM unnest(ids, queues) AS w(id, queue)
                WHERE c.id = w.id AND c.queue = w.queue AND c.broker = me;
            GET DIAGNOSTICS held = ROW_COUNT;
            IF held < cardinality(ids) THEN
                RAISE EXCEPTION USING ERRCODE = 'TQF01', MESSAGE = format(
                    'lost the claim of %s job id(s) to another broker',
                    cardinality(ids) - held);
            END IF;
            RETURN held;
        END
        $hold$""",
    )),
    Migration(6, "the brokers serving the database: who holds the owner lock", (
        # a row per database session holding OWNER_LOCK_KEY (session_pid: its
        # pg_backend_pid), saying which broker it is; believed only while that
        # session holds the lock (OWNERS joins the two), so a row the broker left
        # behind (killed) means nothing, and the next owner deletes it
        """CREATE TABLE tq_owners (
            session_pid integer PRIMARY KEY,
            mode text NOT NULL,
            pid integer NOT NULL,
            host text NOT NULL,
            since timestamptz NOT NULL)""",
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

# --- the owner lock (storage/pg/owner.py) ------------------------------------------
#
# A session-level advisory lock on one key, held by the writer's session of every
# broker for its life: a broker without --cluster takes it exclusive, a cluster's
# broker shared, so a single broker excludes every other broker and cluster brokers
# exclude a single one but not each other. The server drops it with the session.
# Key: any bigint ("tq-own" in ASCII); pg_locks shows it as classid (its high 32 bits),
# objid (its low 32 bits) and objsubid 1.
OWNER_LOCK_KEY = 0x74712D6F776E
TAKE_OWNER_LOCK = "SELECT pg_try_advisory_lock(%s)"
TAKE_OWNER_LOCK_SHARED = "SELECT pg_try_advisory_lock_shared(%s)"
_OWNER_HOLDERS = """SELECT pid, mode FROM pg_locks
    WHERE locktype = 'advisory' AND granted AND objsubid = 1
    AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND classid = %(high)s::oid AND objid = %(low)s::oid"""
# Who holds it: the lock's mode (ExclusiveLock or ShareLock) and the broker the session
# recorded, if it did yet; oldest first.
OWNERS = f"""SELECT h.mode, o.pid, o.host, o.since, h.pid FROM ({_OWNER_HOLDERS}) h
    LEFT JOIN tq_owners o ON o.session_pid = h.pid ORDER BY o.since NULLS LAST, h.pid"""
OWNERS_UNRECORDED = f"SELECT mode, NULL, NULL, NULL, pid FROM ({_OWNER_HOLDERS}) h"
HAS_OWNER_TABLE = "SELECT to_regclass('tq_owners') IS NOT NULL"
# This session's row, written once it holds the lock; the rows of sessions that no
# longer hold it go (NOT EXISTS: pg_locks has rows without a pid).
RECORD_OWNER = f"""WITH holders AS ({_OWNER_HOLDERS}),
    gone AS (DELETE FROM tq_owners o WHERE o.session_pid <> pg_backend_pid()
        AND NOT EXISTS (SELECT 1 FROM holders h WHERE h.pid = o.session_pid))
INSERT INTO tq_owners (session_pid, mode, pid, host, since)
    VALUES (pg_backend_pid(), %(mode)s, %(pid)s, %(host)s, %(since)s)
ON CONFLICT (session_pid) DO UPDATE SET mode = EXCLUDED.mode, pid = EXCLUDED.pid,
    host = EXCLUDED.host, since = EXCLUDED.since"""
# Our own earlier session, still holding the lock after we lost its connection (the
# server has not noticed yet): ended so that this broker can take the lock again.
END_SESSION = "SELECT pg_terminate_backend(%s)"
# The server notices a vanished broker (its host gone, the network cut) by TCP
# keepalives on the lock's session: these say within about 11 s, not the system's
# default of two hours. (Ignored on a Unix socket, where no peer can vanish.)
OWNER_KEEPALIVES = ("SELECT set_config('tcp_keepalives_idle', '5', false),"
                    " set_config('tcp_keepalives_interval', '2', false),"
                    " set_config('tcp_keepalives_count', '3', false)")

# --- writes: a whole batch is ONE statement ----------------------------------------
#
# One statement is one implicit transaction and one round trip, and its text never
# changes, so the server plans it once (psycopg prepares it after a few runs); parts a
# batch does not use get empty arrays. Every part is a data-modifying WITH clause: all
# of them run, against the same snapshot, and none sees another's rows, which is why
# pg/plan.py hands each table's rows over at most once (a row deleted is never also
# put). Parameters go in binary (%b): arrays of bytes are not hex-escaped.
#
# Counts: each finished row removed takes one off its (queue, state); each written row
# adds one to its new (queue, state) and takes one off the (queue, state) of the row it
# replaced (``fin_old``: rows as they were before the statement). Applying the same
# batch twice (a commit whose outcome a lost connection hid) leaves the counts as once:
# the second pass replaces each row with itself and deletes nothing. The new totals
# come back, so the store's copy of the counts follows what was committed.
_BATCH_PARTS = """WITH
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
        GROUP BY queue, state)"""
_COUNTS_NEW = """INSERT INTO tq_finished_counts AS c (queue, state, n)
    SELECT queue, state, d FROM delta WHERE d <> 0
ON CONFLICT (queue, state) DO UPDATE SET n = c.n + EXCLUDED.n
RETURNING queue, state, n"""
WRITE_BATCH = f"{_BATCH_PARTS}\n{_COUNTS_NEW}"

# In a cluster: the same statement, fenced (tq_fence, migration 2) with three more
# parameters: this broker's id, and the queues of the batch with the epochs of their
# leases held here. The check is a branch of the main query, so it always runs, and
# runs first (an Append runs its branches in order; a writing statement has no parallel
# plan): a broker that lost a lease fails before touching a row, and one that holds them
# all keeps every claim of those queues waiting until this commit ends. Raised, its
# error (SQLSTATE FENCED_SQLSTATE) aborts the statement, the whole batch. Its row has no
# (queue, state): the counts rows come after it.
FENCED_SQLSTATE = "TQF01"
# It also writes the cluster's own rows (core.writes.ClusterWrites: inbox messages sent
# and consumed, dependencies across brokers), so a message is committed with what caused
# it, and consumed with what it caused; plan.plan_cluster hands each table's rows
# over at most once. And it raises the version of each kind of broker record the batch
# changes (tq_record_versions, migration 4), in the same commit as the change, so a
# beat that sees the new version reads a table that holds it. In a cluster every batch
# is this statement. It settles custom-id claims (tq_id_claims, migration 5): this
# broker's own (or those an inbox message held) are deleted in the commit that admitted
# their jobs or refused them; a flow's claims for other brokers' queues become the
# inbox messages' own (tq_hold_claims, a branch like the fence: it fails the commit if
# one was taken over).
_CLUSTER_PARTS = """
    inbox_new AS (
        INSERT INTO tq_inbox (queue, message)
            SELECT * FROM unnest(%b::text[], %b::bytea[])),
    inbox_gone AS (DELETE FROM tq_inbox WHERE seq = ANY(%b::int8[])),
    waits_gone AS (DELETE FROM tq_waits WHERE child = ANY(%b::bytea[])),
    waits_new AS (
        INSERT INTO tq_waits (child, parent, parent_queue, child_queue)
            SELECT * FROM unnest(%b::bytea[], %b::bytea[], %b::text[], %b::text[])
        ON CONFLICT (child, parent) DO UPDATE SET parent_queue = EXCLUDED.parent_queue,
            child_queue = EXCLUDED.child_queue),
    versions_new AS (
        INSERT INTO tq_record_versions AS v (kind, version)
            SELECT unnest(%b::text[]), 1
        ON CONFLICT (kind) DO UPDATE SET version = v.version + 1),
    claims_gone AS (
        DELETE FROM tq_id_claims c USING unnest(%b::bytea[], %b::text[]) AS r(id, queue)
        WHERE c.id = r.id AND c.queue = r.queue AND (c.broker IS NULL OR c.broker = %b::text))"""
# A live row of a queue this batch does not write for (another broker's) is never
# replaced: new custom ids are claimed before they are admitted (tq_id_claims), but
# a finished job retried in its own queue needs no claim, and a push of its id into
# another queue at that instant must leave the retried job's row whole (the pushed one,
# never stored, is gone at its queue's next rebuild, as a push deduplicated late); nor
# deleted (that job finishing would take the other one's row). The batch's own queues
# (the fence's list, twice more as parameters) may replace or delete a row.
_LIVE_UPSERT = "ON CONFLICT (id) DO UPDATE SET queue = EXCLUDED.queue, record = EXCLUDED.record)"
_LIVE_DELETE = "live_gone AS (DELETE FROM tq_live WHERE id = ANY(%b::bytea[]))"
assert _LIVE_UPSERT in _BATCH_PARTS and _LIVE_DELETE in _BATCH_PARTS
_CLUSTER_BATCH_PARTS = _BATCH_PARTS.replace(_LIVE_UPSERT, _LIVE_UPSERT[:-1] + """
            WHERE tq_live.queue = EXCLUDED.queue OR tq_live.queue = ANY(%b::text[]))"""
).replace(_LIVE_DELETE, _LIVE_DELETE[:-1] + " AND queue = ANY(%b::text[]))")
# A batch that wrote inbox messages wakes the other brokers with ONE notification
# (INBOX_CHANNEL, sent at its commit; never one per message or job: a NOTIFY takes a
# lock at commit), which each broker's listener turns into a read of its queues'
# inboxes; the row is the main query's, so it always runs.
INBOX_CHANNEL = "tq_inbox"
WRITE_BATCH_CLUSTER = f"""{_CLUSTER_BATCH_PARTS},{_CLUSTER_PARTS},
    counts AS ({_COUNTS_NEW})
SELECT NULL, NULL, tq_fence(%b::text, %b::text[], %b::int8[])
UNION ALL SELECT queue, state, n FROM counts
UNION ALL SELECT NULL, NULL, 0 FROM (SELECT pg_notify('{INBOX_CHANNEL}', '')
    WHERE %b::int8 > 0) AS woken
UNION ALL SELECT NULL, NULL, tq_hold_claims(%b::text, %b::bytea[], %b::text[])
    WHERE %b::int8 > 0"""
LISTEN_INBOX = f"LISTEN {INBOX_CHANNEL}"

# Sessions: every statement the broker runs once started reaches rows by key (ids, or a
# (queue, state) prefix of tq_finished_order). The server plans a prepared statement
# again after any change to a table's statistics, at whatever size the tables have then,
# and keeps that plan: planned while a table had no pages (a fresh database, or just
# after VACUUM truncated an emptied table), a sequential scan is the cheapest, and it
# stayed in use as the table grew, so each batch read every row of tq_live and
# tq_finished, once per row for the replaced-row look-up: ten times slower
# (docs/benchmarks.md, "PostgreSQL"). With sequential scans off the planner takes an index
# wherever one serves, and still scans where none does. Such a scan (a cluster's small
# tables, read whole) then costs the planner's 10^10 penalty, far past jit_above_cost:
# PostgreSQL would compile it with LLVM for 70-100 ms each time (measured on a heartbeat
# of 0.3 ms), so JIT, meant for long analytic queries, is off too.
KEYED_SESSION = ("SELECT set_config('enable_seqscan', 'off', false),"
                 " set_config('jit', 'off', false)")
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
# One kind's records (keys.broker_key: the kind, NUL, the name): a range of the key.
LOAD_BROKER_RECORDS_OF = """SELECT key, value FROM tq_broker_records
    WHERE key >= %b AND key < %b ORDER BY key"""
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
# finished_ranks: the (createdAt, id) at some positions of one state's order, and, with
# another state, how many of its jobs come before each (a running count over both
# states merged by tq_finished_order, one index-only scan per state). The scan stops
# at the last position asked for: PostgreSQL counts ranks entry by entry.
RANKS_ALONE = """SELECT created_at, id FROM (
        SELECT created_at, id, row_number() OVER (ORDER BY created_at, id) - 1 AS pos
        FROM (SELECT created_at, id FROM tq_finished WHERE queue = %(queue)s
              AND state = %(state)s ORDER BY created_at, id LIMIT %(scan)s) AS s) AS r
    WHERE pos = ANY(%(positions)s) ORDER BY pos"""
RANKS_WITH_OTHER = """SELECT created_at, id, before_other FROM (
        SELECT state, created_at, id,
            count(*) FILTER (WHERE state = %(state)s) OVER w - 1 AS pos,
            count(*) FILTER (WHERE state <> %(state)s) OVER w AS before_other
        FROM ((SELECT state, created_at, id FROM tq_finished
                WHERE queue = %(queue)s AND state = %(state)s ORDER BY created_at, id)
              UNION ALL
              (SELECT state, created_at, id FROM tq_finished
                WHERE queue = %(queue)s AND state = %(other)s ORDER BY created_at, id)
              ORDER BY created_at, id) AS m
        WINDOW w AS (ORDER BY created_at, id ROWS UNBOUNDED PRECEDING)) AS r
    WHERE state = %(state)s AND pos = ANY(%(positions)s) LIMIT %(n)s"""
IDS_FIRST = """SELECT id, created_at FROM tq_finished WHERE queue = %s AND state = %s
    ORDER BY created_at, id LIMIT %s"""
IDS_AFTER = """SELECT id, created_at FROM tq_finished WHERE queue = %s AND state = %s
    AND (created_at, id) > (%s, %b) ORDER BY created_at, id LIMIT %s"""
OUTCOMES_OF = "SELECT child, outcome FROM tq_dep_outcomes WHERE parent = %b ORDER BY child"
TABLE_BYTES = """SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
    FROM pg_class c WHERE c.relkind = 'r' AND c.relname LIKE 'tq\\_%%'
    AND pg_table_is_visible(c.oid)"""

# --- a cluster (cluster/pg.py): each operation one statement ----------------
#
# Every time is the database's (now(): the statement's start, the same in every part of
# it); a lease length comes as float seconds (%(lease)s). A broker is live while its
# heartbeat is younger than the lease.

# A broker that joins under an id some leases still name (restarted with the same
# --broker-id within the lease) gives them up first: it holds nothing in memory, so it
# claims them afresh (a new epoch), and an old process still running under that id is
# fenced off by the same change. Rows locked in queue order, as tq_fence locks them.
# Its custom-id claims go too (their pushes died with the old process; a flow's claim,
# which only liveness held, fails that process's commit if it is still running).
JOIN = """WITH mine AS (
        SELECT queue FROM tq_queue_leases WHERE owner = %(id)s ORDER BY queue FOR UPDATE),
    freed AS (
        UPDATE tq_queue_leases l SET owner = NULL FROM mine WHERE l.queue = mine.queue),
    unclaimed AS (DELETE FROM tq_id_claims WHERE broker = %(id)s)
INSERT INTO tq_brokers (id, address) VALUES (%(id)s, %(address)s)
ON CONFLICT (id) DO UPDATE SET address = EXCLUDED.address, started_at = now(),
    heartbeat = now()"""
# Our heartbeat is renewed only while it is still fresh: once stale, the others may
# have claimed our queues, and a renewal would make us look live again while they own
# them. The 'me' row says whether it was; 'b' rows are the live brokers (ours among
# them exactly when it was renewed: the same test on the row as it was), 'l' rows the
# leases, 'v' rows the versions of the broker records (a few kinds).
BEAT = """WITH me AS (
    UPDATE tq_brokers SET heartbeat = now()
    WHERE id = %(id)s AND heartbeat > now() - make_interval(secs => %(lease)s)
    RETURNING id)
SELECT 'me', id, NULL::text, NULL::bigint FROM me
UNION ALL SELECT 'b', id, address, NULL::bigint FROM tq_brokers
    WHERE heartbeat > now() - make_interval(secs => %(lease)s)
UNION ALL SELECT 'l', queue, owner, epoch FROM tq_queue_leases
UNION ALL SELECT 'v', kind, NULL, version FROM tq_record_versions"""
# Taken when the row is missing (epoch 1), free, or held by a broker that is not live;
# never by a broker that is itself not live (it would take a queue the others may
# already count as free again). Two claims at once: the second waits for the first's
# row lock and then tests the row as the first left it, so one of them wins.
CLAIM = """INSERT INTO tq_queue_leases AS l (queue, owner, epoch)
    SELECT %(queue)s, %(id)s, 1 WHERE EXISTS (
        SELECT 1 FROM tq_brokers WHERE id = %(id)s
        AND heartbeat > now() - make_interval(secs => %(lease)s))
ON CONFLICT (queue) DO UPDATE SET owner = EXCLUDED.owner, epoch = l.epoch + 1
    WHERE l.owner IS NULL OR (l.owner <> EXCLUDED.owner AND NOT EXISTS (
        SELECT 1 FROM tq_brokers b WHERE b.id = l.owner
        AND b.heartbeat > now() - make_interval(secs => %(lease)s)))
RETURNING epoch"""
RELEASE = """UPDATE tq_queue_leases SET owner = NULL
    WHERE queue = %s AND owner = %s AND epoch = %s"""
# Rows locked in queue order, as tq_fence locks them (no deadlock with a commit).
LEAVE = """WITH mine AS (
        SELECT queue FROM tq_queue_leases WHERE owner = %(id)s ORDER BY queue FOR UPDATE),
    freed AS (
        UPDATE tq_queue_leases l SET owner = NULL FROM mine WHERE l.queue = mine.queue)
DELETE FROM tq_brokers WHERE id = %(id)s"""
# One queue's rebuild (no order: recovery sorts jobs by their admission, seq)
LOAD_LIVE_OF = "SELECT record FROM tq_live WHERE queue = ANY(%s::text[])"
LOAD_QUEUE_META_OF = "SELECT queue, meta FROM tq_queue_meta WHERE queue = ANY(%s::text[])"
LOAD_COUNTS_OF = """SELECT queue, state, n FROM tq_finished_counts
    WHERE queue = ANY(%s::text[]) AND n > 0"""
# A batch's look-up of job ids, with the claims of the new custom ids it admits
# (tq_claim_ids, migration 5): this broker, the lease, (ids, their queues) to claim, the
# ids only looked up. Rows: (id, queue, 'l' live / 'f' finished / 'm' our claim /
# 'c' another's claim).
CLAIM_IDS = """SELECT job, job_queue, kind
    FROM tq_claim_ids(%s, %s, %b::bytea[], %s::text[], %b::bytea[])"""
QUEUES_OF_JOBS = """SELECT id, queue, true FROM tq_live WHERE id = ANY(%b::bytea[])
UNION ALL SELECT id, queue, false FROM tq_finished WHERE id = ANY(%b::bytea[])"""
# A cluster's inbox of some queues, oldest first, a page at a time; the waits of the
# children of some queues (a takeover's: whom to tell when they settle).
INBOX_OF = """SELECT seq, queue, message FROM tq_inbox WHERE queue = ANY(%s::text[])
    ORDER BY seq LIMIT %s"""
WAITS_OF = "SELECT child, parent, parent_queue FROM tq_waits WHERE child_queue = ANY(%s::text[])"
INBOX_QUEUES = "SELECT DISTINCT queue FROM tq_inbox"
