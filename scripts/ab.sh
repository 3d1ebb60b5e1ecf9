#!/usr/bin/env bash
# A/B of two source trees on this machine: for each round, start `trioqueue serve` from
# tree A, run scripts/bench.py (from the same tree) against it, stop it; then tree B.
# Alternating rounds spread the machine's slow spells over both builds.
#   scripts/ab.sh ROWS ROUNDS TREE_A TREE_B      e.g. (a checkout of the last commit:)
#   git archive HEAD --prefix=before/ | tar -x -C /tmp && scripts/ab.sh pushb_1000 2 /tmp/before .
set -euo pipefail
[[ $# -ge 4 ]] || { sed -n 2,6p "$0"; exit 2; }
ROWS=$1; ROUNDS=$2; shift 2
PY=${PYTHON:-python3}
PORT=${PORT:-16799}
DATA=$(mktemp -d)
pid=""
cleanup() { [[ -n "$pid" ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$DATA"; }
trap cleanup EXIT
wait_port() { for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
for round in $(seq 1 "$ROUNDS"); do
  for tree in "$@"; do
    tree=$(cd "$tree" && pwd)
    rm -rf "$DATA/tq"
    # cd into the tree: `python -m` puts the working directory first on sys.path.
    (cd "$tree" && exec "$PY" -m trioqueue serve --host 127.0.0.1 --tcp-port "$PORT" \
      --ws-port $((PORT + 1)) --data-dir "$DATA/tq" > "$DATA/broker.log" 2>&1) &
    pid=$!
    wait_port "$PORT"
    echo "== $tree, round $round"
    PYTHONPATH="$tree" "$PY" "$tree/scripts/bench.py" --target "127.0.0.1:$PORT" --n 20000 \
      --rows "$ROWS" --repeat 3 | sed -n '/^row/,$p' | tail -n +3
    kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
  done
done
