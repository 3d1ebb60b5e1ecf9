"""Docstrings say why in words: no issue numbers, and measured timings only shrink.

An issue number means nothing to a reader of the code once the issue is closed, and a
measured time goes stale with the next change or machine, so neither belongs in a
docstring (``docs/benchmarks.md`` keeps the figures). Every module, class and function
docstring of ``trioqueue/`` is read with ``ast``. Issue references fail outright.
Docstrings that state a time with a number (a limit or a default is stated that way
too, so some stay) are counted per file against ``TIMINGS_TODAY``: a count may not
rise, and when one falls the list must be lowered with it, so the list only shrinks.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "trioqueue"

ISSUE_REFERENCE = (re.compile(r"\bissue\s+\d+", re.IGNORECASE), re.compile(r"#\d{2,}"))
TIMING = (re.compile(r"\b\d+(\.\d+)?\s?(ms|µs|us)\b"), re.compile(r"\b\d+\.\d+\s?s\b"))

# Docstrings per file that state a time with a number today. Each is a configured
# limit, default or behaviour (a backoff's start, a field's range, a latency bound),
# not a measurement; lower a count when its docstring no longer states one.
TIMINGS_TODAY: dict[str, int] = {
    "actors/slow_steps.py": 1,
    "client/connection.py": 1,
    "client/pulling.py": 1,
    "client/waiting.py": 1,
    "client/worker.py": 1,
    "core/fields.py": 3,
    "core/queue/leases.py": 1,
    "testing/healthy.py": 2,
}

_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def docstrings() -> Iterator[tuple[str, int, str]]:
    """(file relative to the package, line, docstring) of every documented node."""
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        name = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(tree):
            if isinstance(node, _DOCUMENTED):
                text = ast.get_docstring(node, clean=False)
                if text:
                    yield name, node.body[0].lineno, text


def test_no_docstring_names_an_issue() -> None:
    found = [f"{name}:{line}: {match.group(0)!r}"
             for name, line, text in docstrings()
             for pattern in ISSUE_REFERENCE for match in pattern.finditer(text)]
    assert not found, "docstrings naming an issue (say why instead):\n" + "\n".join(found)


def test_timings_in_docstrings_only_shrink() -> None:
    counts = Counter(name for name, _, text in docstrings()
                     if any(pattern.search(text) for pattern in TIMING))
    rose = {name: (TIMINGS_TODAY.get(name, 0), n) for name, n in counts.items()
            if n > TIMINGS_TODAY.get(name, 0)}
    fell = {name: (n, counts.get(name, 0)) for name, n in TIMINGS_TODAY.items()
            if counts.get(name, 0) < n}
    assert not rose, f"docstrings with a measured time (listed, found): {rose}; say why in words"
    assert not fell, f"fewer docstrings with a time than listed (listed, found): {fell}; " \
                     "lower TIMINGS_TODAY"


def test_the_patterns_catch_what_they_are_for() -> None:
    assert any(p.search("as in issue 12, item 2") for p in ISSUE_REFERENCE)
    assert any(p.search("see #41") for p in ISSUE_REFERENCE)
    assert not any(p.search("a slice of jobs") for p in ISSUE_REFERENCE)
    assert any(p.search("held the loop 111 ms") for p in TIMING)
    assert any(p.search("took 1.3 s") for p in TIMING)
    assert any(p.search("16 us a job") for p in TIMING)
    assert not any(p.search("``timeout_ms`` bytes, 8.5 MB") for p in TIMING)
