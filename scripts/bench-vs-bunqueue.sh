#!/usr/bin/env bash
# Run scripts/bench.py against the real bunqueue (SQLite) and trioqueue (LMDB) in one go,
# on loopback, and print both with the ratio; then (unless PYQ=0)
# scripts/bench_python_queues.py: trioqueue beside RQ, arq and saq with the same N and
# REPEAT. Installs bun + bunqueue from the npm registry into a cache outside the
# repository; the Python step installs redis-server (apt-get) and rq/arq/saq (pip, into
# $PYTHON) when they are missing. Stops everything it starts.
#   scripts/bench-vs-bunqueue.sh [N] [REPEAT]
#   overrides: ROWS=..., PLOT=path.png (bunqueue comparison), PYQ=0 (skip the Python
#   queues), PYQ_PLOT=path.png, PYTHON=..., OUT=dir (raw JSON of every run)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
REPEAT=${2:-3}
ROWS=${ROWS:-everything}  # the broker rows and the client rows (scripts/bench.py --rows)
CACHE=${TRIOQUEUE_BENCH_CACHE:-$HOME/.cache/trioqueue-bench}
PY=${PYTHON:-python3}
OUT=${OUT:-$(mktemp -d)}
BQ_PORT=16889; TQ_PORT=16789
mkdir -p "$CACHE"
if [[ ! -x "$CACHE/node_modules/.bin/bun" || ! -d "$CACHE/node_modules/bunqueue" ]]; then
  (cd "$CACHE" && npm install --no-audit --no-fund bun@1.4.5 bunqueue@2.9.5 >/dev/null)
fi
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

wait_port() { for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }

rm -rf "$OUT/bq" "$OUT/tq"; mkdir -p "$OUT/bq"
HOST=127.0.0.1 RATE_LIMIT_MAX_REQUESTS=1000000000 \
  "$CACHE/node_modules/.bin/bun" "$CACHE/node_modules/bunqueue/dist/cli/index.js" start \
  --host 127.0.0.1 --tcp-port $BQ_PORT --http-port $((BQ_PORT + 1)) \
  --data-path "$OUT/bq/bunqueue.db" > "$OUT/bunqueue.log" 2>&1 &
pids+=($!); wait_port $BQ_PORT
$PY scripts/bench.py --target 127.0.0.1:$BQ_PORT --n "$N" --repeat "$REPEAT" --rows "$ROWS" \
  --broker-pid "${pids[0]}" --json "$OUT/bunqueue.json" | tail -n 20
kill "${pids[0]}"; wait "${pids[0]}" 2>/dev/null || true; pids=()

$PY -m trioqueue serve --host 127.0.0.1 --tcp-port $TQ_PORT --ws-port $((TQ_PORT + 1)) \
  --data-dir "$OUT/tq" > "$OUT/trioqueue.log" 2>&1 &
pids+=($!); wait_port $TQ_PORT
$PY scripts/bench.py --target 127.0.0.1:$TQ_PORT --n "$N" --repeat "$REPEAT" --rows "$ROWS" \
  --broker-pid "${pids[0]}" --json "$OUT/trioqueue.json" | tail -n 20
kill "${pids[0]}"; wait "${pids[0]}" 2>/dev/null || true; pids=()

echo
$PY scripts/compare.py "$OUT/trioqueue.json" "$OUT/bunqueue.json" --plot "${PLOT:-docs/bench-vs-bunqueue.png}"

if [[ "${PYQ:-1}" != 0 ]]; then
  echo
  $PY scripts/bench_python_queues.py --n "$N" --concurrency 10 --repeat "$REPEAT" \
    --json "$OUT/python-queues.json" --plot "${PYQ_PLOT:-docs/bench-python-queues.png}"
fi
echo "(raw runs in $OUT)"
