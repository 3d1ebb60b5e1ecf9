"""Print two bench.py --json results side by side, with the ratio and the target.

    python scripts/compare.py trioqueue.json bunqueue.json [--plot out.png]
        [--labels OURS THEIRS] [--also RUN.json LABEL]... [--throughput-target X]
        [--floor ROW=JOBS_PER_S]...

Every ratio is trioqueue's advantage (higher is better): jobs/s ours / theirs on the
throughput rows, p99 theirs / ours on the latency rows, resident memory theirs / ours
on ``rss_100k``. The targets are issue 6's: 2x on every throughput row (1.5x where one
request per round trip bounds the row), a p99 no worse (1x), at most half the memory
(2x); ``--throughput-target`` puts one target on every throughput row instead (issue 18:
1.5x bunqueue's PostgreSQL mode). ``--also`` adds a run as a further column, for
reference (trioqueue on LMDB beside the PostgreSQL pair); ``--floor`` checks our
jobs/s on a row against an absolute figure (issue 18: PUSHB 1000 at 40,000 jobs/s).
``--plot`` draws the advantages with their targets (needs matplotlib).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

# Rows compared on their p99 rather than their jobs/s (a rate set by the row's pacing).
LATENCY_ROWS = frozenset({"e2e_latency", "delayed_lateness", "client_wait_latency"})
# One request per round trip: the round trip itself bounds the ratio (issue 6: 1.5x).
ROUND_TRIP_ROWS = frozenset({"push_seq", "client_add_seq"})
# Rows this suite adds beyond the list (reported with the target of their kind).
EXTRA_ROWS = frozenset({"client_add_seq", "client_add_bulk_1000", "client_worker_c1",
                        "client_wait_latency"})


def load(path: str) -> dict[str, dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return {row["row"]: row for row in json.load(fh)["summary"]}


def target_of(name: str, throughput_target: float | None = None) -> float:
    """The advantage a row must reach; ``throughput_target`` replaces issue 6's on every
    jobs/s row (latency and memory rows keep theirs)."""
    if name in LATENCY_ROWS:
        return 1.0
    if name == "rss_100k":
        return 2.0
    if throughput_target is not None:
        return throughput_target
    if name in ROUND_TRIP_ROWS:
        return 1.5
    return 2.0


def cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "-"
    if row["row"] == "rss_100k":
        return "-" if row.get("p50_ms_median") is None else f"{row['p50_ms_median']:.0f} MB"
    if row["row"] in LATENCY_ROWS and row.get("p99_ms_median") is not None:
        text = f"p50 {row['p50_ms_median']:.2f} / p99 {row['p99_ms_median']:.2f} ms"
    else:
        low, high = row.get("jobs_per_s_min"), row.get("jobs_per_s_max")
        text = f"{row['jobs_per_s_median']:,.0f}/s"
        if low is not None and high is not None and low != high:
            text += f" [{low:,.0f}-{high:,.0f}]"
    if row.get("errors"):
        text += f" ({row['errors']} errors)"
    return text


def advantage(name: str, ours: dict[str, Any] | None,
              theirs: dict[str, Any] | None) -> float | None:
    """trioqueue's advantage on one row (higher is better), or None if not measured."""
    if not ours or not theirs:
        return None
    if name == "rss_100k":
        a, b = ours.get("p50_ms_median"), theirs.get("p50_ms_median")
        return float(b / a) if a and b else None
    if name in LATENCY_ROWS:
        a, b = ours.get("p99_ms_median"), theirs.get("p99_ms_median")
        return float(b / a) if a and b else None
    if theirs["jobs_per_s_median"]:
        return float(ours["jobs_per_s_median"] / theirs["jobs_per_s_median"])
    return None


def main(ours_path: str, theirs_path: str, plot: str | None = None, *,
         labels: tuple[str, str] = ("trioqueue (LMDB)", "bunqueue (SQLite)"),
         also: Sequence[tuple[str, str]] = (), throughput_target: float | None = None,
         floors: dict[str, float] | None = None) -> None:
    ours, theirs = load(ours_path), load(theirs_path)
    others = [(label, load(path)) for path, label in also]
    extra_heads = "".join(f" {label} |" for label, _ in others)
    print(f"| row | {labels[0]} | {labels[1]} | advantage | target | met |{extra_heads}")
    print("|---|---|---|---|---|---|" + "---|" * len(others))
    shown: dict[str, float] = {}
    for name in ours:
        value = advantage(name, ours.get(name), theirs.get(name))
        target = target_of(name, throughput_target)
        what = ("memory" if name == "rss_100k" else "p99" if name in LATENCY_ROWS
                else "jobs/s")
        label = f"{name} (extra)" if name in EXTRA_ROWS else name
        extra_cells = "".join(f" {cell(run.get(name))} |" for _, run in others)
        if value is None:
            print(f"| {label} | {cell(ours.get(name))} | {cell(theirs.get(name))} | - | "
                  f"{target:g}x | - |{extra_cells}")
            continue
        shown[name] = value
        met = "yes" if value >= target else "no"
        print(f"| {label} | {cell(ours.get(name))} | {cell(theirs.get(name))} | "
              f"{value:.2f}x {what} | {target:g}x | {met} |{extra_cells}")
    if floors:
        print_floors(ours, labels[0], floors)
    if plot:
        try:
            draw(shown, plot, throughput_target, their_label=labels[1])
        except ImportError as exc:  # the table above is the result; the plot is a view
            print(f"(no plot: {exc})")


def print_floors(ours: dict[str, dict[str, Any]], label: str,
                 floors: dict[str, float]) -> None:
    """Our jobs/s on each named row against an absolute floor."""
    print()
    print(f"| row | {label} | floor | met |")
    print("|---|---|---|---|")
    for name, floor in floors.items():
        row = ours.get(name)
        if row is None:
            print(f"| {name} | - | {floor:,.0f}/s | - |")
            continue
        met = "yes" if row["jobs_per_s_median"] >= floor else "no"
        print(f"| {name} | {cell(row)} | {floor:,.0f}/s | {met} |")


def draw(advantages: dict[str, float], path: str, throughput_target: float | None = None,
         their_label: str = "bunqueue") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(advantages)
    values = [advantages[n] for n in names]
    targets = [target_of(n, throughput_target) for n in names]
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(names) + 1.4))
    colors = ["tab:green" if v >= t else "tab:red"
              for v, t in zip(values, targets, strict=True)]
    labels = [("memory " if n == "rss_100k" else "p99 " if n in LATENCY_ROWS else "") + n
              for n in names]
    bars = ax.barh(labels, values, color=colors)
    ax.bar_label(bars, labels=[f"{v:.2f}x" for v in values], fontsize=7)
    ax.scatter(targets, labels, marker="|", s=250, color="black", zorder=3,
               label="target")
    ax.axvline(1.0, color="grey", linewidth=0.6)
    if values and max(values) > 20 * max(min(values), 1.0):
        ax.set_xscale("log")  # one row far ahead would flatten every other bar
    ax.invert_yaxis()
    ax.set_xlabel(f"trioqueue's advantage over {their_label} (higher is better):\n"
                  "jobs/s ratio, p99 or memory inverse ratio", fontsize=8)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def parse_floor(text: str) -> tuple[str, float]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected ROW=JOBS_PER_S, not {text!r}")
    return name, float(value)


def cli(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("ours", help="trioqueue's bench.py --json")
    ap.add_argument("theirs", help="the other broker's bench.py --json")
    ap.add_argument("--plot", help="draw the advantages here (PNG, needs matplotlib)")
    ap.add_argument("--labels", nargs=2, metavar=("OURS", "THEIRS"),
                    default=("trioqueue (LMDB)", "bunqueue (SQLite)"),
                    help="the two columns' headings")
    ap.add_argument("--also", nargs=2, action="append", default=[],
                    metavar=("RUN_JSON", "LABEL"), help="one more run, as a further column")
    ap.add_argument("--throughput-target", type=float,
                    help="one target for every jobs/s row instead of issue 6's")
    ap.add_argument("--floor", type=parse_floor, action="append", default=[],
                    metavar="ROW=JOBS_PER_S", help="check our jobs/s on ROW against a floor")
    args = ap.parse_args(argv)
    main(args.ours, args.theirs, args.plot, labels=tuple(args.labels),
         also=[tuple(pair) for pair in args.also],
         throughput_target=args.throughput_target, floors=dict(args.floor))


if __name__ == "__main__":
    cli()
