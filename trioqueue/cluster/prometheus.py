"""The ``Prometheus`` scrape of a cluster: each broker's exposition merged into one.

Each broker writes its own text (core/metrics/prometheus.py); the broker asked parses them back
and writes one valid exposition (format 0.0.4), each series (name and labels) once:

* **per-queue series** (``bunqueue_queue_jobs_*``) are joined: each queue is served by
  one broker, so each has its series once (a queue two brokers name, while it moves:
  the first reply's);
* **the asking broker's own**: uptime, storage (one database for all), build info,
  the process's series (``process_*``), whose sum would describe no process, and the
  webhooks (every broker holds all of them);
* **every other series is summed** per name and labels: job counts and totals,
  workers, crons (one broker runs them all), connections per transport, the per-queue
  cap's exported/omitted counts (the cap applies per broker), and the push/pull/ack
  histograms (their buckets are the same on every broker, so sums are exact);
* ``bunqueue_cluster_broker_up{broker="..."}``: 1 for each broker that answered, 0 for
  each left out (its numbers are missing from the sums).
"""

from __future__ import annotations

from ..core.metrics.prometheus import Exposition, Sample
from .merge import Answered, Reply

JOINED = ("bunqueue_queue_jobs_",)
ASKERS_OWN = ("bunqueue_uptime_seconds", "bunqueue_storage_", "bunqueue_build_info",
              "bunqueue_process_", "process_", "bunqueue_webhooks_")
BROKER_UP = "bunqueue_cluster_broker_up"


class Family:
    """One metric family as parsed: its HELP text, TYPE, and samples in order."""

    __slots__ = ("name", "help", "kind", "samples")

    def __init__(self, name: str, help_text: str = "", kind: str = "untyped") -> None:
        self.name = name
        self.help = help_text
        self.kind = kind
        # (sample name, labels as written in order) -> value
        self.samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}


def _labels(line: str, start: int) -> tuple[dict[str, str], int]:
    """The labels of a sample line from just after its ``{``; and the index of its
    ``}``. Values are unescaped (backslash, quote, newline)."""
    labels: dict[str, str] = {}
    i = start
    while True:
        while line[i] in ", ":
            i += 1
        if line[i] == "}":
            return labels, i
        equals = line.index("=", i)
        key = line[i:equals].strip()
        i = equals + 1
        if line[i] != '"':
            raise ValueError(f"a label value must be quoted: {line!r}")
        i += 1
        value: list[str] = []
        while line[i] != '"':
            if line[i] == "\\":
                i += 1
                value.append("\n" if line[i] == "n" else line[i])
            else:
                value.append(line[i])
            i += 1
        labels[key] = "".join(value)
        i += 1


def _sample(line: str) -> tuple[str, dict[str, str], float]:
    brace = line.find("{")
    space = line.find(" ")
    if brace != -1 and (space == -1 or brace < space):
        labels, end = _labels(line, brace + 1)
        return line[:brace], labels, float(line[end + 1:].split()[0])
    return line[:space], {}, float(line[space:].split()[0])


def parse(text: str) -> dict[str, Family]:
    """The families of an exposition, in order (a sample belongs to the family whose
    TYPE line came last before it and whose name starts it, as a histogram's
    ``_bucket``, ``_sum`` and ``_count`` do)."""
    families: dict[str, Family] = {}
    current: Family | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                family = families.get(parts[2])
                if family is None:
                    family = families[parts[2]] = Family(parts[2])
                rest = parts[3] if len(parts) > 3 else ""
                if parts[1] == "HELP":
                    family.help = rest
                else:
                    family.kind = rest
                current = family
            continue
        name, labels, value = _sample(line)
        if current is None or not (name == current.name
                                   or name.startswith(current.name + "_")):
            current = families.get(name) or families.setdefault(name, Family(name))
        current.samples[(name, tuple(labels.items()))] = value
    return families


def _rule(name: str) -> str:
    if name.startswith(JOINED):
        return "join"
    if name.startswith(ASKERS_OWN):
        return "own"
    return "sum"


def merged_exposition(texts: list[str], answered: Answered) -> str:
    """One exposition of the brokers' (the asker's first; see the module docstring)."""
    merged: dict[str, Family] = {}
    for position, text in enumerate(texts):
        for name, family in parse(text).items():
            rule = _rule(name)
            kept = merged.get(name)
            if kept is None:
                if rule == "own" and position > 0:
                    continue
                kept = merged[name] = Family(name, family.help, family.kind)
            for key, value in family.samples.items():
                if rule == "sum":
                    kept.samples[key] = kept.samples.get(key, 0) + value
                elif key not in kept.samples:
                    kept.samples[key] = value
    out = Exposition()
    for family in merged.values():
        samples: list[Sample] = [(name[len(family.name):], dict(labels), value)
                                 for (name, labels), value in family.samples.items()]
        out.family(family.name, family.kind, family.help, samples)
    up = [("", {"broker": broker}, 1) for broker in answered.ids]
    up += [("", {"broker": broker}, 0) for broker in answered.missing]
    out.family(BROKER_UP, "gauge", "1: the broker answered this scrape; 0: it did not "
               "in time, and its numbers are missing from the sums", up)
    return out.text()


def merge_prometheus(replies: list[Reply], answered: Answered) -> Reply:
    texts: list[str] = []
    for reply in replies:
        data = reply.get("data")
        text = data.get("metrics") if isinstance(data, dict) else None
        texts.append(text if isinstance(text, str) else "")
    return {"data": {"metrics": merged_exposition(texts, answered)}}
