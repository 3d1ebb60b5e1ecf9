"""The client's shape: classes composed of owners, not assembled from mixins, alias
tables or stubs.

``Queue`` is one class (BullMQ's flat surface); ``Worker`` holds its parts (puller,
outcomes, heartbeats, events, leases) as objects, each given what it uses rather than
the whole worker; no method is a stub that a subclass or a later base must replace.
Read from the source with ``ast``, so the checks need no broker.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from trioqueue.client import Queue, Worker

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (ROOT / "trioqueue" / "client", ROOT / "trioqueue" / "sync")
WORKER_PARTS = ("pulling", "outcomes", "heartbeats", "worker_events", "lease")
# Classes whose bare annotations are assigned some other way than ``self.x = ...``.
DECLARED_SURFACE = {
    # copies every attribute of the async Job with setattr; its annotations declare them
    # (tests/test_sync.py checks they cover what is copied)
    ("trioqueue/sync/job.py", "SyncJob"),
}
# Bases whose bare annotations are fields, not attributes re-declared for a host.
FIELD_BASES = {"TypedDict", "NamedTuple", "Protocol"}


def modules() -> Iterator[tuple[str, ast.Module]]:
    for package in PACKAGES:
        for path in sorted(package.glob("*.py")):
            yield str(path.relative_to(ROOT)), ast.parse(path.read_text(), str(path))


def classes() -> Iterator[tuple[str, ast.ClassDef]]:
    for name, tree in modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                yield name, node


def test_queue_is_one_class() -> None:
    assert Queue.__bases__ == (object,), Queue.__mro__
    assert Worker.__bases__ == (object,), Worker.__mro__


def test_worker_parts_are_given_what_they_use_not_the_worker() -> None:
    """No part of the worker imports ``Worker`` or takes it as an argument: each is an
    owner built from the connection, the leases, the events... it needs."""
    seen = []
    for name, tree in modules():
        if Path(name).stem not in WORKER_PARTS:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in ("worker",
                                                                     "trioqueue.client.worker"):
                seen.append(f"{name}:{node.lineno} imports the worker")
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for arg in node.args.args:
                    if arg.annotation is not None and "Worker" == ast.unparse(arg.annotation):
                        seen.append(f"{name}:{node.lineno} {node.name}() takes the Worker")
    assert not seen, "\n".join(seen)


def _is_stub(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if len(body) != 1:
        return not body  # a docstring alone is a stub too
    only = body[0]
    return (isinstance(only, ast.Pass)
            or (isinstance(only, ast.Expr) and isinstance(only.value, ast.Constant))
            or (isinstance(only, ast.Raise) and "NotImplementedError" in ast.unparse(only)))


def test_no_method_is_a_stub() -> None:
    """A method that only raises NotImplementedError (or passes) is a stand-in for a
    real one elsewhere, so the order of the bases decides which runs; an abstract
    method (or an ``@overload``) says so instead."""
    stubs = [
        f"{name}:{function.lineno} {cls.name}.{function.name}"
        for name, cls in classes()
        for function in cls.body
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef) and _is_stub(function)
        and not any(ast.unparse(d) in ("abc.abstractmethod", "abstractmethod", "overload")
                    for d in function.decorator_list)
    ]
    assert not stubs, "method stubs: " + ", ".join(stubs)


def _assigned_on_self(cls: ast.ClassDef) -> set[str]:
    names = set()
    for node in ast.walk(cls):
        targets = (node.targets if isinstance(node, ast.Assign) else
                   [node.target] if isinstance(node, ast.AnnAssign | ast.AugAssign) else [])
        for target in targets:
            for part in ast.walk(target):
                if (isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name)
                        and part.value.id == "self"):
                    names.add(part.attr)
    return names


def test_no_class_annotates_attributes_it_never_assigns() -> None:
    """Bare class-level annotations are fields (dataclasses, TypedDicts) or a host's
    attributes declared again for a mixin; the second kind is gone."""
    found = []
    for name, cls in classes():
        bases = {ast.unparse(base).split("[")[0] for base in cls.bases}
        dataclass = any("dataclass" in ast.unparse(d) for d in cls.decorator_list)
        if dataclass or bases & FIELD_BASES or (name, cls.name) in DECLARED_SURFACE:
            continue
        assigned = _assigned_on_self(cls)
        found += [f"{name}:{item.lineno} {cls.name}.{item.target.id}"
                  for item in cls.body
                  if isinstance(item, ast.AnnAssign) and item.value is None
                  and isinstance(item.target, ast.Name) and item.target.id not in assigned]
    assert not found, "annotated, never assigned: " + ", ".join(found)
