"""Print two bench.py --json results side by side with the ratio (ours / theirs).

    python scripts/compare.py trioqueue.json bunqueue.json
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
    text = f"{row['jobs_per_s_median']:,.0f}/s"
    if row.get("p99_ms_median") is not None:
        text += f" (p50 {row['p50_ms_median']:.2f} / p99 {row['p99_ms_median']:.2f} ms)"
    if row.get("errors"):
        text += f" [{row['errors']} errors]"
    return text


def main(ours_path: str, theirs_path: str) -> None:
    ours, theirs = load(ours_path), load(theirs_path)
    print("| row | trioqueue (LMDB) | bunqueue (SQLite) | ratio |")
    print("|---|---|---|---|")
    for name in ours:
        a, b = ours.get(name), theirs.get(name)
        ratio = "-"
        if a and b and b["jobs_per_s_median"]:
            ratio = f"{a['jobs_per_s_median'] / b['jobs_per_s_median']:.2f}x"
            if a.get("p99_ms_median") is not None and b.get("p99_ms_median"):
                ratio += f", p99 {a['p99_ms_median'] / b['p99_ms_median']:.2f}x"
        print(f"| {name} | {cell(a)} | {cell(b)} | {ratio} |")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
