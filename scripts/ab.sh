#!/usr/bin/env bash
# A/B of two source trees on this machine: for each round and row, start `trioqueue serve`
# from tree A, run scripts/bench.py (from the same tree) against it for that row, stop it;
# then tree B. Alternating rounds spread the machine's slow spells over both builds.
#   scripts/ab.sh ROWS ROUNDS TREE_A TREE_B      e.g. (a checkout of the last commit:)
#   git archive HEAD --prefix=before/ | tar -x -C /tmp && scripts/ab.sh pushb_1000 2 /tmp/before .
# Per run it prints the row's jobs/s (the median of REPEAT runs of `bench.py --n N`) and
# the broker's CPU time per job over those runs, each with its set-up and clean-up, after
# an untimed warm-up (all its threads, from /proc/PID/task/*/schedstat: what the broker
# spent, whatever the load around it did to the wall clock); at the end the median of
# the rounds per row and tree, and B / A (the last tree against the first).
# BROKER_CPUS=0 LOAD_CPUS=1 pin the broker and the load (taskset) so they do not take
# turns on one core. N (20000) and REPEAT (3) set bench.py's --n and --repeat;
# BENCH_ARGS adds to the timed runs' arguments (e.g. --no-cleanup: the CPU of the row alone).
set -euo pipefail
[[ $# -ge 4 ]] || { sed -n 2,14p "$0"; exit 2; }
ROWS=$1; ROUNDS=$2; shift 2
PY=${PYTHON:-python3}
PORT=${PORT:-16799}
N=${N:-20000}
REPEAT=${REPEAT:-3}
DATA=$(mktemp -d)
pid=""
cleanup() { [[ -n "$pid" ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$DATA"; }
trap cleanup EXIT
wait_port() { for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
# taskset execs the command, so the pid started below is the broker's own
BROKER_PIN=(); [[ -n "${BROKER_CPUS:-}" ]] && BROKER_PIN=(taskset -c "$BROKER_CPUS")
LOAD_PIN=(); [[ -n "${LOAD_CPUS:-}" ]] && LOAD_PIN=(taskset -c "$LOAD_CPUS")
cpu_ns() {  # the broker's CPU time so far, every thread, in nanoseconds
  cat /proc/"$pid"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%.0f", s}'
}
RESULTS="$DATA/results.tsv"
: > "$RESULTS"
for round in $(seq 1 "$ROUNDS"); do
  for row in ${ROWS//,/ }; do
    for tree in "$@"; do
      tree=$(cd "$tree" && pwd)
      rm -rf "$DATA/tq"
      # cd into the tree: `python -m` puts the working directory first on sys.path.
      (cd "$tree" && exec "${BROKER_PIN[@]}" "$PY" -m trioqueue serve --host 127.0.0.1 \
        --tcp-port "$PORT" --ws-port $((PORT + 1)) --data-dir "$DATA/tq" \
        > "$DATA/broker.log" 2>&1) &
      pid=$!
      wait_port "$PORT"
      # bench.py's warm-up (and one small run of the row) apart, so the CPU counted
      # below is the row's runs alone (each with its set-up and clean-up)
      PYTHONPATH="$tree" "${LOAD_PIN[@]}" "$PY" "$tree/scripts/bench.py" \
        --target "127.0.0.1:$PORT" --n 2000 --rows "$row" > /dev/null
      before=$(cpu_ns)
      out=$(PYTHONPATH="$tree" "${LOAD_PIN[@]}" "$PY" "$tree/scripts/bench.py" \
        --target "127.0.0.1:$PORT" --n "$N" --rows "$row" --repeat "$REPEAT" --warmup 0 ${BENCH_ARGS:-})
      after=$(cpu_ns)
      kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
      # each timed run's line: "  ROW #k: JOBS/EXPECTED jobs in S s = RATE jobs/s ..."
      runs=$(echo "$out" | awk -v r="$row" '$1 == r && $2 ~ /^#/ {split($3, a, "/"); gsub(",", "", $8); print a[1], $8}')
      rate=$(echo "$runs" | awk '{print $2}' | sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}')
      jobs=$(echo "$runs" | awk '{s += $1} END {print s + 0}')
      us=$(echo "scale=2; ($after - $before) / 1000 / $jobs" | bc)
      printf '%s\t%s\t%s\t%s\t%s\n' "$round" "$row" "$tree" "$rate" "$us" >> "$RESULTS"
      printf 'round %s  %-16s %-32s %10s jobs/s  broker %8s us CPU/job\n' \
        "$round" "$row" "$tree" "$rate" "$us"
    done
  done
done
TREES=(); for tree in "$@"; do TREES+=("$(cd "$tree" && pwd)"); done
"$PY" - "$RESULTS" "${TREES[@]}" <<'EOF'
import statistics, sys
path, trees = sys.argv[1], sys.argv[2:]
runs = [line.rstrip("\n").split("\t") for line in open(path) if line.strip()]
rows = list(dict.fromkeys(r[1] for r in runs))
def med(row, tree, col):
    values = [float(r[col]) for r in runs if r[1] == row and r[2] == tree]
    return statistics.median(values) if values else float("nan")
names = [t.rstrip("/").split("/")[-1] or t for t in trees]
print(f"\nmedians of {len({r[0] for r in runs})} rounds; B / A with A = {names[0]}")
print(f"{'row':16} " + " ".join(f"{n + ' jobs/s':>18} {n + ' us/job':>16}" for n in names)
      + f" {'jobs/s B/A':>10} {'CPU B/A':>8}")
for row in rows:
    rates = [med(row, t, 3) for t in trees]
    cpus = [med(row, t, 4) for t in trees]
    cells = " ".join(f"{r:18,.0f} {c:16.2f}" for r, c in zip(rates, cpus))
    print(f"{row:16} {cells} {rates[-1] / rates[0]:10.3f} {cpus[-1] / cpus[0]:8.3f}")
EOF
