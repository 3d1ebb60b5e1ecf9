"""Print two bench.py --json results side by side with the ratio (ours / theirs).

    python scripts/compare.py trioqueue.json bunqueue.json [--plot out.png]

Throughput rows compare jobs/s (higher is better); ``rss_100k`` compares the broker's
resident memory in MB (lower is better); p99 latencies are compared where both have
them. ``--plot`` draws the ratios as a bar chart (needs matplotlib).
"""

from __future__ import annotations

import json
import sys
from typing import Any


def load(path: str) -> dict[str, dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return {row["row"]: row for row in json.load(fh)["summary"]}


def cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "-"
    if row["row"] == "rss_100k":
        return "-" if row.get("p50_ms_median") is None else f"{row['p50_ms_median']:.0f} MB"
    text = f"{row['jobs_per_s_median']:,.0f}/s"
    if row.get("p99_ms_median") is not None:
        text += f" (p50 {row['p50_ms_median']:.2f} / p99 {row['p99_ms_median']:.2f} ms)"
    if row.get("errors"):
        text += f" [{row['errors']} errors]"
    return text


def ratio_of(name: str, a: dict[str, Any] | None, b: dict[str, Any] | None) -> float | None:
    if not a or not b:
        return None
    if name == "rss_100k":  # memory: ours / theirs, lower is better
        if a.get("p50_ms_median") and b.get("p50_ms_median"):
            return float(a["p50_ms_median"] / b["p50_ms_median"])
        return None
    if b["jobs_per_s_median"]:
        return float(a["jobs_per_s_median"] / b["jobs_per_s_median"])
    return None


def main(ours_path: str, theirs_path: str, plot: str | None = None) -> None:
    ours, theirs = load(ours_path), load(theirs_path)
    print("| row | trioqueue (LMDB) | bunqueue (SQLite) | ratio |")
    print("|---|---|---|---|")
    ratios: dict[str, float] = {}
    for name in ours:
        a, b = ours.get(name), theirs.get(name)
        value = ratio_of(name, a, b)
        text = "-" if value is None else f"{value:.2f}x"
        if value is not None:
            ratios[name] = value
        if name != "rss_100k" and a and b and a.get("p99_ms_median") is not None and (
                b.get("p99_ms_median")):
            text += f", p99 {a['p99_ms_median'] / b['p99_ms_median']:.2f}x"
        print(f"| {name} | {cell(a)} | {cell(b)} | {text} |")
    if plot:
        draw(ratios, plot)


def draw(ratios: dict[str, float], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(ratios)
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(names) + 1.2))
    values = [ratios[n] for n in names]
    colors = ["tab:green" if (v >= 1) != (n == "rss_100k") else "tab:red"
              for n, v in zip(names, values, strict=True)]
    bars = ax.barh(names, values, color=colors)
    ax.bar_label(bars, labels=[f"{v:.2f}x" for v in values], fontsize=7)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.invert_yaxis()
    ax.set_xlabel("trioqueue / bunqueue (throughput: higher is better; rss_100k: lower)")
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
