#!/usr/bin/env bash
# Run scripts/bench.py against the real bunqueue and trioqueue in one go, on loopback,
# and print them side by side with the ratio (scripts/compare.py).
#   STORE=sqlite (default): bunqueue on a SQLite file beside trioqueue on LMDB; then
#     (unless PYQ=0) scripts/bench_python_queues.py: trioqueue beside RQ, arq and saq
#     with the same N and REPEAT (installs redis-server with apt-get and rq/arq/saq
#     with pip, into $PYTHON, when they are missing).
#   STORE=postgres: one local PostgreSQL server (python -m trioqueue.testing.postgres:
#     the installed binaries, 127.0.0.1, a directory of its own, durable settings), a
#     fresh database each for bunqueue and trioqueue; bunqueue in its PostgreSQL mode,
#     trioqueue with --storage on the same server, then trioqueue on LMDB; prints
#     trioqueue-PostgreSQL beside bunqueue-PostgreSQL (issue 18's targets) with the LMDB
#     run as a third column.
# Installs bun + bunqueue from the npm registry into a cache outside the repository.
# Stops everything it starts, the PostgreSQL server included.
#   scripts/bench-vs-bunqueue.sh [N] [REPEAT]
#   overrides: STORE=sqlite|postgres, ROWS=..., PLOT=path.png (bunqueue comparison),
#   PYQ=0 (skip the Python queues; postgres mode skips them unless PYQ=1),
#   PYQ_PLOT=path.png, PYTHON=..., OUT=dir (raw JSON of every run and the logs),
#   PG_PORT=... (default: a free one), PG_MAX_LOCKS=1024 (see below)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
REPEAT=${2:-3}
STORE=${STORE:-sqlite}
ROWS=${ROWS:-everything}  # the broker rows and the client rows (scripts/bench.py --rows)
CACHE=${TRIOQUEUE_BENCH_CACHE:-$HOME/.cache/trioqueue-bench}
PY=${PYTHON:-python3}
OUT=${OUT:-$(mktemp -d)}
BQ_PORT=16889; TQ_PORT=16789
case "$STORE" in
  sqlite) PYQ=${PYQ:-1} ;;
  postgres) PYQ=${PYQ:-0} ;;
  *) echo "STORE must be sqlite or postgres, not '$STORE'" >&2; exit 2 ;;
esac
mkdir -p "$CACHE"
if [[ ! -x "$CACHE/node_modules/.bin/bun" || ! -d "$CACHE/node_modules/bunqueue" ]]; then
  (cd "$CACHE" && npm install --no-audit --no-fund bun@1.4.5 bunqueue@2.9.5 >/dev/null)
fi

broker=""   # the pid of the broker being measured, if any
client=""   # the pid of scripts/bench.py while it runs
PG_DIR=""   # the PostgreSQL server's directory once pg_start made it
cleanup() {
  for p in $client $broker; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  if [[ -n $PG_DIR ]]; then pg_stop || true; rm -rf "$PG_DIR"; fi
}
trap cleanup EXIT
# Exit (and so clean up) at once on a signal: the children run in the background and the
# script waits for them, since bash runs a trap only once its foreground command ends.
trap 'exit 130' INT
trap 'exit 143' TERM

wait_port() { for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }

# --- PostgreSQL (STORE=postgres) -------------------------------------------------------
# bunqueue's Obliterate takes one advisory lock per job of the queue in one transaction,
# so with PostgreSQL's default lock table (64 per connection) it fails ("out of shared
# memory") on any queue of more than a few thousand jobs and bench.py's cleanup leaves
# the row's jobs behind for the next rows. PG_MAX_LOCKS raises the table for both brokers
# alike (1024 x 200 connections covers the 100,000 jobs of rss_100k).
PG_MAX_LOCKS=${PG_MAX_LOCKS:-1024}
pg() { $PY -m trioqueue.testing.postgres "$@"; }

# Start one server (trioqueue.testing.postgres: initdb into the directory, as the
# postgres user when we are root) and set PG_DSN to its database "postgres". Not in a
# subshell, so that cleanup sees PG_DIR.
PG_DSN=""
pg_start() {
  PG_DIR=$(mktemp -d -t trioqueue-bench-pg.XXXXXX)
  chmod 755 "$PG_DIR"  # the server runs as postgres when we are root
  local port=${PG_PORT:-}
  PG_DSN=$(pg start --dir "$PG_DIR" ${port:+--port "$port"})
  # Its settings file is rewritten at each start; ALTER SYSTEM's file is read after it.
  # The restart keeps the port (the DSN says which it is).
  port=${PG_DSN##*:}; port=${port%%/*}
  pg_sql "$PG_DSN" "ALTER SYSTEM SET max_locks_per_transaction = $PG_MAX_LOCKS"
  pg stop --dir "$PG_DIR"
  PG_DSN=$(pg start --dir "$PG_DIR" --port "$port")
}
pg_stop() { pg stop --dir "$PG_DIR"; }
# pg_settle [DB]: drop a finished run's database and CHECKPOINT, so the next broker starts
# on a quiet server: left alone, autovacuum of the last run's deleted rows and the
# checkpoints its WAL calls for ran during the next broker's rows (PULLB+ACKB 100 fell
# from about 14,000 to 1,300 jobs/s in a run where trioqueue came after bunqueue).
pg_settle() {
  if [[ -n ${1:-} ]]; then pg_sql "$admin_dsn" "DROP DATABASE $1 WITH (FORCE)"; fi
  pg_sql "$admin_dsn" "CHECKPOINT"
}
pg_sql() {  # pg_sql DSN STATEMENT: one statement in autocommit (CREATE DATABASE needs it)
  $PY -c 'import sys, psycopg
with psycopg.connect(sys.argv[1], autocommit=True) as conn: conn.execute(sys.argv[2])' "$1" "$2"
}

# --- the runs ----------------------------------------------------------------------------
# bench NAME: scripts/bench.py against the broker started last, into $OUT/NAME.json; then
# stops that broker.
bench() {
  wait_port "$port"
  $PY scripts/bench.py --target "127.0.0.1:$port" --n "$N" --repeat "$REPEAT" --rows "$ROWS" \
    --broker-pid "$broker" --json "$OUT/$1.json" > "$OUT/$1.txt" 2>&1 &
  local status=0
  client=$!; wait "$client" || status=$?; client=""
  tail -n 20 "$OUT/$1.txt"
  # bench.py exits 1 when a row saw an error (a reply that timed out, say): that is a
  # result, shown in the comparison; without its JSON there is nothing to compare.
  if [[ $status != 0 ]]; then
    [[ -s $OUT/$1.json ]] || { echo "scripts/bench.py failed ($status) against $1" >&2; exit "$status"; }
    echo "($1: some rows had errors; see $OUT/$1.txt)"
  fi
  kill "$broker"; wait "$broker" 2>/dev/null || true; broker=""
}
# serve_bunqueue NAME [ENV=VALUE...]: bunqueue on loopback; its storage comes from the env.
serve_bunqueue() {
  local name=$1; shift
  env HOST=127.0.0.1 RATE_LIMIT_MAX_REQUESTS=1000000000 "$@" \
    "$CACHE/node_modules/.bin/bun" "$CACHE/node_modules/bunqueue/dist/cli/index.js" start \
    --host 127.0.0.1 --tcp-port $BQ_PORT --http-port $((BQ_PORT + 1)) > "$OUT/$name.log" 2>&1 &
  broker=$!; port=$BQ_PORT
}
# serve_trioqueue NAME STORAGE-FLAGS...
serve_trioqueue() {
  local name=$1; shift
  $PY -m trioqueue serve --host 127.0.0.1 --tcp-port $TQ_PORT --ws-port $((TQ_PORT + 1)) \
    "$@" > "$OUT/$name.log" 2>&1 &
  broker=$!; port=$TQ_PORT
}

mkdir -p "$OUT"
if [[ $STORE == sqlite ]]; then
  rm -rf "$OUT/bq" "$OUT/tq"; mkdir -p "$OUT/bq"
  serve_bunqueue bunqueue BUNQUEUE_DATA_PATH="$OUT/bq/bunqueue.db"; bench bunqueue
  serve_trioqueue trioqueue --data-dir "$OUT/tq"; bench trioqueue
  echo
  $PY scripts/compare.py "$OUT/trioqueue.json" "$OUT/bunqueue.json" --plot "${PLOT:-docs/bench-vs-bunqueue.png}"
else
  pg_start
  admin_dsn=$PG_DSN base=${PG_DSN%/*}
  pg_sql "$admin_dsn" "CREATE DATABASE bunqueue"
  pg_sql "$admin_dsn" "CREATE DATABASE trioqueue"
  echo "PostgreSQL $($PY -c 'import sys, psycopg
with psycopg.connect(sys.argv[1]) as c: print(c.execute("SHOW server_version").fetchone()[0])' "$admin_dsn") at $base (directory $PG_DIR)"
  # bunqueue takes PostgreSQL from its env (a --data-path would make it SQLite).
  pg_settle
  serve_bunqueue bunqueue-postgres BUNQUEUE_STORAGE_DRIVER=postgres \
    BUNQUEUE_POSTGRES_URL="$base/bunqueue"; bench bunqueue-postgres
  pg_settle bunqueue
  serve_trioqueue trioqueue-postgres --storage "$base/trioqueue"; bench trioqueue-postgres
  pg_settle trioqueue
  rm -rf "$OUT/tq"
  serve_trioqueue trioqueue-lmdb --data-dir "$OUT/tq"; bench trioqueue-lmdb
  echo
  $PY scripts/compare.py "$OUT/trioqueue-postgres.json" "$OUT/bunqueue-postgres.json" \
    --labels "trioqueue (PostgreSQL)" "bunqueue (PostgreSQL)" \
    --also "$OUT/trioqueue-lmdb.json" "trioqueue (LMDB)" \
    --throughput-target 1.5 --floor pushb_1000=40000 --floor pullb_ackb_100=10000 \
    --plot "${PLOT:-docs/bench-vs-bunqueue-postgres.png}"
fi

if [[ $PYQ != 0 ]]; then
  echo
  $PY scripts/bench_python_queues.py --n "$N" --concurrency 10 --repeat "$REPEAT" \
    --json "$OUT/python-queues.json" --plot "${PYQ_PLOT:-docs/bench-python-queues.png}"
fi
echo "(raw runs and logs in $OUT)"
