"""Print two bench.py --json results side by side, with the ratio and the target.

    python scripts/compare.py trioqueue.json bunqueue.json [--plot out.png]

Every ratio is trioqueue's advantage (higher is better): jobs/s ours / theirs on the
throughput rows, p99 theirs / ours on the latency rows, resident memory theirs / ours
on ``rss_100k``. The targets are issue 6's: 2x on every throughput row (1.5x where one
request per round trip bounds the row), a p99 no worse (1x), at most half the memory
(2x). ``--plot`` draws the advantages with their targets (needs matplotlib).
"""

from __future__ import annotations

import json
import sys
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


def target_of(name: str) -> float:
    if name in LATENCY_ROWS:
        return 1.0
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


def main(ours_path: str, theirs_path: str, plot: str | None = None) -> None:
    ours, theirs = load(ours_path), load(theirs_path)
    print("| row | trioqueue (LMDB) | bunqueue (SQLite) | advantage | target | met |")
    print("|---|---|---|---|---|---|")
    shown: dict[str, float] = {}
    for name in ours:
        value = advantage(name, ours.get(name), theirs.get(name))
        target = target_of(name)
        what = ("memory" if name == "rss_100k" else "p99" if name in LATENCY_ROWS
                else "jobs/s")
        label = f"{name} (extra)" if name in EXTRA_ROWS else name
        if value is None:
            print(f"| {label} | {cell(ours.get(name))} | {cell(theirs.get(name))} | - | "
                  f"{target:g}x | - |")
            continue
        shown[name] = value
        met = "yes" if value >= target else "no"
        print(f"| {label} | {cell(ours.get(name))} | {cell(theirs.get(name))} | "
              f"{value:.2f}x {what} | {target:g}x | {met} |")
    if plot:
        draw(shown, plot)


def draw(advantages: dict[str, float], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(advantages)
    values = [advantages[n] for n in names]
    targets = [target_of(n) for n in names]
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
    ax.invert_yaxis()
    ax.set_xlabel("trioqueue's advantage over bunqueue (higher is better): jobs/s ratio, "
                  "p99 or memory inverse ratio", fontsize=8)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    args = sys.argv[1:]
    plot_path = None
    if "--plot" in args:
        k = args.index("--plot")
        plot_path = args[k + 1]
        del args[k : k + 2]
    if len(args) != 2:
        sys.exit("usage: compare.py OURS.json THEIRS.json [--plot out.png]")
    main(args[0], args[1], plot_path)
