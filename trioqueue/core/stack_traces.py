"""What a failure's stack trace is cut to, by the worker that sends it and by the
broker that keeps it in a DLQ entry.

A Python traceback names the user's frame and the exception last, so where a trace
must be cut its tail is what is kept: the first lines (``Traceback (most recent call
last):`` and the outermost frames) are the least useful. The bound is in bytes, not in
lines, so one huge line (a repr of a large argument) cannot crowd everything else out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# The most a DLQ entry keeps of a trace: a deep traceback with chained exceptions is a
# few KiB, so this keeps every real one whole while bounding what a client can store.
TRACE_KEEP_BYTES = 32 * 1024
CUT_MARK = "... ({lines} earlier lines cut)"


def trace_tail(lines: Sequence[str], max_bytes: int = TRACE_KEEP_BYTES) -> list[str]:
    """The last lines of ``lines`` whose UTF-8 size fits ``max_bytes``, after a first line
    saying how many were cut (none when all fit). A last line too long on its own is
    kept by its end."""
    kept: list[str] = []
    size = 0
    for line in reversed(lines):
        cost = len(line.encode("utf-8", "surrogatepass")) + 1
        if size + cost > max_bytes:
            if not kept:  # the exception line itself is too long: its end
                kept.append(line.encode("utf-8", "surrogatepass")[-max_bytes // 2:]
                            .decode("utf-8", "ignore"))
            break
        kept.append(line)
        size += cost
    kept.reverse()
    cut = len(lines) - len(kept)
    if cut:
        kept.insert(0, CUT_MARK.format(lines=cut))
    return kept


def fail_trace(value: Any) -> list[str] | None:
    """FAIL ``stack`` whole, for the DLQ entry: every string element (the job's own
    ``stacktrace`` keeps bunqueue's first lines, see ``fields.fail_stack``), cut to its
    tail by :func:`trace_tail`; None without one."""
    if not isinstance(value, (list, tuple)):
        return None
    lines = [line for line in value if isinstance(line, str)]
    return trace_tail(lines) if lines else None
