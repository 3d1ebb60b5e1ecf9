#!/usr/bin/env bash
# The broker's instructions per job, counted by callgrind: what a noisy shared host
# cannot inflate (wall-clock A/B runs here swing 3-5x; docs/benchmarks.md, "Reproducing").
#
#   scripts/callgrind_rows.sh N ROWS TREE...      e.g.
#   git worktree add /tmp/old fa8642b && scripts/callgrind_rows.sh 4000 push_seq,pull_ack_1 /tmp/old .
#
# For each row and tree (alternating): `trioqueue serve` from TREE under callgrind, one
# warm-up run of scripts/bench.py (this checkout's, the same client for every tree),
# then instrumentation on only while `bench.py --rows ROW --n N` runs. Printed per row
# and tree: instructions per job (N jobs; rows of one request at a time make N / 4
# requests), the window's length, and the same count less the broker's idle work for
# that long (measured first, 10 s idle per tree): under callgrind a row takes seconds,
# so timer work weighs about 50 times what it does in a real run.
# Needs valgrind (callgrind_control, callgrind_annotate) and bc. Every broker is bound
# to 127.0.0.1 and stopped by its pid. KEEP_DIR=dir keeps each row's callgrind output
# there (ROW.N.out, N the tree's position), for callgrind_annotate.
# Under callgrind every slice of long work takes some 50 times its real CPU time, so a
# tree with the slice budget (Config.slice_budget_ms) shrinks its slices to the floor
# and pays their overhead: compare code paths with TRIOQUEUE_SLICE_BUDGET_MS=0 (the
# fixed slices older trees have), and the budget itself in real time (slice_sizes.py).
set -euo pipefail
[[ $# -ge 3 ]] || { sed -n 2,16p "$0"; exit 2; }
N=$1; ROWS=$2; shift 2
HERE=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
# the interpreter itself: valgrind does not follow a wrapper (pyenv shim) into it
PYEXE=$("$PY" -c "import sys; print(sys.executable)")
PORT=${PORT:-16899}
IDLE_S=${IDLE_S:-10}
pid=""
D=""
cleanup() { [[ -n "$pid" ]] && kill "$pid" 2>/dev/null; [[ -n "$D" ]] && rm -rf "$D"; return 0; }
trap cleanup EXIT

start() {  # start TREE: a broker under callgrind, instrumentation off
  D=$(mktemp -d)
  (cd "$1" && exec valgrind --tool=callgrind --instr-atstart=no \
    --callgrind-out-file="$D/cg.out" "$PYEXE" -m trioqueue serve \
    --host 127.0.0.1 --tcp-port "$PORT" --ws-port $((PORT + 1)) --data-dir "$D/tq" \
    > "$D/log" 2>&1) &
  pid=$!
  for _ in $(seq 1 600); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && return 0; sleep 0.2; done
  echo "broker of $1 did not start" >&2; exit 1
}

stop() {  # sets IR: the instructions counted (not in a $(...): wait needs this shell)
  callgrind_control -d "$pid" > /dev/null 2>&1
  kill -INT "$pid"; wait "$pid" 2> /dev/null || true; pid=""
  if [[ -n "${KEEP_DIR:-}" && -n "${KEEP_AS:-}" ]]; then
    mkdir -p "$KEEP_DIR"; cat "$D"/cg.out* > "$KEEP_DIR/$KEEP_AS.out"
  fi
  IR=$(for f in "$D"/cg.out*; do
         callgrind_annotate "$f" 2> /dev/null | grep -m1 "PROGRAM TOTALS" || true
       done | awk '{gsub(",", "", $1); s += $1} END {printf "%.0f", s}')
  rm -rf "$D"; D=""
}

bench() {  # bench ROW N [extra args]
  PYTHONPATH="$HERE" "$PY" "$HERE/scripts/bench.py" --target "127.0.0.1:$PORT" --n "$2" \
    --rows "$1" --repeat 1 "${@:3}" > /dev/null
}

declare -A IDLE
for tree in "$@"; do
  tree=$(cd "$tree" && pwd)
  start "$tree"
  sleep 2
  callgrind_control -i on "$pid" > /dev/null 2>&1; sleep "$IDLE_S"; callgrind_control -i off "$pid" > /dev/null 2>&1
  stop
  IDLE[$tree]=$(echo "$IR / $IDLE_S" | bc)
  echo "idle $tree: ${IDLE[$tree]} instructions/s"
done

printf '%-18s %-40s %12s %9s %14s\n' row tree per_job window_s per_job_less_idle
for row in ${ROWS//,/ }; do
  position=0
  for tree in "$@"; do
    tree=$(cd "$tree" && pwd)
    start "$tree"
    KEEP_AS="$row.$((++position))"
    bench "$row" 1000  # warm-up: lazily imported paths
    callgrind_control -i on "$pid" > /dev/null 2>&1
    t0=$(date +%s.%N)
    bench "$row" "$N" --warmup 0
    t1=$(date +%s.%N)
    callgrind_control -i off "$pid" > /dev/null 2>&1
    stop
    KEEP_AS=""
    window=$(echo "$t1 - $t0" | bc)
    less=$(echo "($IR - ${IDLE[$tree]} * $window) / $N" | bc)
    printf '%-18s %-40s %12d %9.2f %14d\n' "$row" "$tree" $((IR / N)) "$window" "$less"
  done
done
