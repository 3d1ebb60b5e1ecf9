"""The stores are composed of owners: each store implements the port and holds its
parts (reads, listings, ahead rows, kept data) as fields, each part given what it uses
when the store opens. No part is a mixin that declares its host's attributes again or
leaves a stub for the host to fill in, so no order of base classes decides which code
runs."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from trioqueue.storage.memory import MemoryStorage
from trioqueue.storage.port import Storage

STORAGE = Path(__file__).resolve().parents[2] / "trioqueue" / "storage"
# Bases whose class bodies list fields by annotation alone.
RECORD_BASES = frozenset({"NamedTuple", "Protocol", "TypedDict"})


def store_classes() -> list[type[Storage]]:
    from trioqueue.storage.lmdb.store import LmdbStorage

    classes: list[type[Storage]] = [MemoryStorage, LmdbStorage]
    try:
        from trioqueue.storage.pg.store import PgStorage
    except ImportError:  # (psycopg not installed)
        return classes
    return [*classes, PgStorage]


def classes_in_storage() -> list[tuple[Path, ast.ClassDef]]:
    return [(path, node) for path in sorted(STORAGE.rglob("*.py"))
            for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.ClassDef)]


def _base_name(base: ast.expr) -> str:
    if isinstance(base, ast.Attribute):
        return base.attr
    return base.id if isinstance(base, ast.Name) else ""


def is_record(cls: ast.ClassDef) -> bool:
    return (any(_base_name(base) in RECORD_BASES for base in cls.bases)
            or any("dataclass" in ast.unparse(d) for d in cls.decorator_list))


def assigned_on_self(cls: ast.ClassDef) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(cls):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        for target in targets:
            for part in ast.walk(target):
                if (isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name)
                        and part.value.id in ("self", "cls")):
                    names.add(part.attr)
    return names


@pytest.mark.parametrize("store", store_classes(), ids=lambda c: c.__name__)
def test_each_store_inherits_only_the_port(store: type[Storage]) -> None:
    assert store.__bases__ == (Storage,), (
        f"{store.__name__} inherits {[b.__name__ for b in store.__bases__]}: hold the "
        "parts as fields instead")


def test_no_storage_class_annotates_attributes_it_never_assigns() -> None:
    found = []
    for path, cls in classes_in_storage():
        if is_record(cls):
            continue
        own = assigned_on_self(cls)
        found += [f"{path.relative_to(STORAGE)}:{statement.lineno} {cls.name}."
                  f"{statement.target.id}"
                  for statement in cls.body
                  if isinstance(statement, ast.AnnAssign) and statement.value is None
                  and isinstance(statement.target, ast.Name)
                  and statement.target.id not in own]
    assert not found, "attributes declared for a host (a mixin's re-declarations): " + \
        ", ".join(found)


def test_no_method_stub_outside_the_port() -> None:
    """Only the port leaves methods unimplemented; a part that raises
    NotImplementedError in a method waits for a host to shadow it."""
    found = [
        f"{path.relative_to(STORAGE)}:{method.lineno} {cls.name}.{method.name}"
        for path, cls in classes_in_storage() if path.name != "port.py"
        for method in cls.body if isinstance(method, ast.FunctionDef)
        if any(isinstance(node, ast.Raise) and node.exc is not None
               and "NotImplementedError" in ast.unparse(node.exc)
               for node in ast.walk(method))
    ]
    assert not found, "method stubs: " + ", ".join(found)


def test_the_checks_find_a_mixin() -> None:
    source = ("class Reads:\n    _env: object\n    def _text(self):\n"
              "        raise NotImplementedError\n"
              "class Owner:\n    _env: object\n    def __init__(self):\n"
              "        self._env = 1\n")
    classes = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef)]
    reads, owner = classes
    assert "_env" not in assigned_on_self(reads)
    assert "_env" in assigned_on_self(owner)
