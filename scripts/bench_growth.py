#!/usr/bin/env python3
"""The longest single operation on the queue's per-job structures as they grow.

A structure with one entry per live job that copies itself whole as it grows (a dict,
an ``OrderedDict``) holds the event loop for one such copy: tens to hundreds of ms at a
million entries, inside whatever step made it grow. This prints, for N keys, the worst
and the mean time of one operation:

- ``OrderedDict`` against ``ChainedOrder`` (the stall detector's heartbeat order):
  insert N job ids, move 20% of them to the end, pop them;
- ``CreationOrder`` (a listing order) with one job per millisecond, the worst case
  for its groups: add N jobs, then remove them all.

    python scripts/bench_growth.py [--n 1000000]

Every loop is bounded by N; the machine's noise moves the means, the worst cases are
what the table is for (compare within one run).
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from time import perf_counter
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from trioqueue.core.chained_order import ChainedOrder  # noqa: E402
from trioqueue.core.queue.order import CreationOrder  # noqa: E402

T0 = 1_764_000_000_000


def timed(op: Callable[[Any], object], items: Iterable[Any]) -> tuple[float, float, int]:
    """(worst, total, count) seconds of ``op(item)`` over ``items``."""
    worst = total = 0.0
    n = 0
    for item in items:
        t = perf_counter()
        op(item)
        d = perf_counter() - t
        total += d
        worst = max(worst, d)
        n += 1
    return worst, total, n


def row(name: str, what: str, result: tuple[float, float, int]) -> None:
    worst, total, n = result
    print(f"{name:<14} {what:<12} {worst * 1e3:>10.1f} ms {total / max(n, 1) * 1e9:>10.0f} ns")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    args = parser.parse_args()
    n = args.n
    keys = [str(uuid.uuid4()) for _ in range(n)]
    moved = keys[: n // 5]
    print(f"{'structure':<14} {'operation':<12} {'worst':>13} {'mean':>13}")
    for cls in (OrderedDict, ChainedOrder):
        order: Any = cls()
        name = cls.__name__
        row(name, "insert", timed(lambda k, o=order: o.__setitem__(k, None), keys))
        row(name, "move_to_end", timed(lambda k, o=order: o.move_to_end(k), moved))
        row(name, "pop", timed(lambda k, o=order: o.pop(k, None), keys))
    listing = CreationOrder()
    ids = [(T0 + i, f"{i:07d}") for i in range(n)]
    row("CreationOrder", "add", timed(lambda p: listing.add(*p), ids))
    row("CreationOrder", "discard", timed(lambda p: listing.discard(*p), ids))
    return 0


if __name__ == "__main__":
    sys.exit(main())
