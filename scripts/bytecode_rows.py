"""Python bytecodes the broker executes per request of a bench row, per function: a
count that does not move with the host's load, and that names the functions (callgrind
counts instructions, but in the interpreter's C functions, not in ours).

    python scripts/bytecode_rows.py ROW N TREE [TREE2]      e.g.
    git worktree add /tmp/old HEAD~3 && python scripts/bytecode_rows.py push_seq 2000 /tmp/old .

For each tree: `trioqueue serve` from TREE (LMDB in a temporary directory, 127.0.0.1),
a warm-up run of this checkout's scripts/bench.py (1,000 jobs), then every opcode
counted (sys.settrace with opcode events, in the broker's trio thread) while
`bench.py --rows ROW --n N --no-cleanup` runs; the broker is stopped by its pid.
Printed: the total per request, and with two trees the functions whose count changed
most (per request, with their calls per request). Requests: N for the bulk rows'
jobs, N / 4 for push_seq and pull_ack_1 (bench.py's own rule), as --per overrides.
Tracing makes the broker some 50 times slower: timing-dependent paths (how often the
loop waits on epoll) read higher than in a real run.
"""

from __future__ import annotations

import argparse
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
Counts = dict[tuple[str, str], tuple[int, int]]  # (file, function) -> (bytecodes, calls)

# Run as the broker: the tracer, toggled by SIGUSR1, written out on SIGUSR2.
_SERVE = r'''
import os, pickle, signal, sys
from collections import Counter
sys.path.insert(0, os.getcwd())
ops, calls, on = Counter(), Counter(), [False]
def local(frame, event, arg):
    if event == "opcode":
        ops[frame.f_code] += 1
    return local
def top(frame, event, arg):
    if event != "call":
        return None
    frame.f_trace_opcodes = True
    calls[frame.f_code] += 1
    return local
def toggle(*_):
    on[0] = not on[0]
    sys.settrace(top if on[0] else None)
def dump(*_):
    sys.settrace(None)
    def name(c):
        f = c.co_filename
        return f.split("/trioqueue/")[-1] if "/trioqueue/" in f else f.rsplit("/", 1)[-1]
    out = {}
    for c, n in ops.items():
        key = (name(c), c.co_name)
        b, k = out.get(key, (0, 0))
        out[key] = (b + n, k + calls[c])
    with open(os.environ["BYTECODES_OUT"], "wb") as fh:
        pickle.dump(out, fh)
signal.signal(signal.SIGUSR1, toggle)
signal.signal(signal.SIGUSR2, dump)
from trioqueue.cli import main
sys.argv = ["trioqueue"] + sys.argv[1:]
sys.exit(main())
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, deadline_s: float = 30.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"the broker did not listen on {port} within {deadline_s} s")


def _bench(port: int, row: str, n: int, *extra: str) -> None:
    subprocess.run(
        [sys.executable, str(HERE / "scripts" / "bench.py"), "--target", f"127.0.0.1:{port}",
         "--rows", row, "--n", str(n), "--repeat", "1", *extra],
        check=True, stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(HERE)},
        timeout=1800)


def count(tree: Path, row: str, n: int) -> Counts:
    with tempfile.TemporaryDirectory() as tmp:
        port, out = _free_port(), Path(tmp) / "counts.pickle"
        serve = Path(tmp) / "serve.py"
        serve.write_text(_SERVE)
        broker = subprocess.Popen(
            [sys.executable, str(serve), "serve", "--host", "127.0.0.1", "--tcp-port",
             str(port), "--ws-port", str(_free_port()), "--data-dir", str(Path(tmp) / "tq")],
            cwd=tree, env={**os.environ, "BYTECODES_OUT": str(out)},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            _wait_port(port)
            _bench(port, row, 1000)
            broker.send_signal(signal.SIGUSR1)
            _bench(port, row, n, "--warmup", "0", "--no-cleanup")
            broker.send_signal(signal.SIGUSR1)
            broker.send_signal(signal.SIGUSR2)
            end = time.monotonic() + 60
            while not out.exists() and time.monotonic() < end:
                time.sleep(0.2)
            time.sleep(0.5)  # the dump may still be writing
            with out.open("rb") as fh:
                counts: Counts = pickle.load(fh)
            return counts
        finally:
            broker.kill()
            broker.wait(timeout=30)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("row")
    p.add_argument("n", type=int)
    p.add_argument("trees", nargs="+", type=Path)
    p.add_argument("--per", type=int, help="requests to divide by (default: bench.py's)")
    p.add_argument("--most", type=int, default=40)
    args = p.parse_args()
    if len(args.trees) > 2:
        p.error("one or two trees")
    per = args.per or (args.n // 4 if args.row in ("push_seq", "pull_ack_1") else args.n)
    runs = [count(t.resolve(), args.row, args.n) for t in args.trees]
    for tree, counts in zip(args.trees, runs, strict=True):
        total = sum(b for b, _ in counts.values())
        print(f"{tree}: {total / per:,.0f} bytecodes per request ({args.row}, {per} requests)")
    if len(runs) == 2:
        old: defaultdict[Any, tuple[int, int]] = defaultdict(lambda: (0, 0), runs[0])
        new: defaultdict[Any, tuple[int, int]] = defaultdict(lambda: (0, 0), runs[1])
        change = Counter({k: new[k][0] - old[k][0] for k in set(old) | set(new)})
        print(f"{'before':>9} {'after':>9} {'change':>8}  calls before/after  function")
        for key, _ in sorted(change.items(), key=lambda kv: -abs(kv[1]))[: args.most]:
            (b0, c0), (b1, c1) = old[key], new[key]
            print(f"{b0 / per:9.1f} {b1 / per:9.1f} {(b1 - b0) / per:+8.1f}  "
                  f"{c0 / per:6.2f} {c1 / per:6.2f}  {key[0]}:{key[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
