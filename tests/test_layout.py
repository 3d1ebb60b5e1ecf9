"""The package's shape limits, checked in every test run so CI enforces them: no function
over cyclomatic complexity 15, no class annotating attributes it never assigns, at most
20 public methods per class, no module-level ``__getattr__`` keeping moved names alive.
A module is as long as its one concern needs: a line cap only made modules split where
no concern ends, while the risk it stood for is a class that grows without owning what
it uses."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "trioqueue"
MAX_COMPLEXITY = 15


def test_no_function_is_over_complexity_15() -> None:
    ruff = shutil.which("ruff")
    command = [ruff] if ruff else [sys.executable, "-m", "ruff"]
    if not ruff and subprocess.run([*command, "--version"], capture_output=True).returncode:
        pytest.skip("ruff is not installed (pip install -e '.[test]' brings it)")
    done = subprocess.run(
        [*command, "check", "--select", "C901", "--config",
         f"lint.mccabe.max-complexity={MAX_COMPLEXITY}", str(PACKAGE)],
        capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


# What measures the risk a line cap was meant to catch: a class that grows without owning
# what it uses. Two checks over the classes of ``trioqueue/``, read with ``ast``.

# Classes whose annotations are a field table filled by other means, kept for good.
FIELD_TABLES: dict[str, str] = {
    "trioqueue/core/job.py:JobRecord": "slots filled by the methods generated from the table",
    "trioqueue/sync/job.py:SyncJob": "a read-only mirror filled field by field from a Job",
    "trioqueue/transport/wire/codec.py:Codec": "each codec class states its name",
}
# Classes that annotate attributes they never assign today: mixins re-declaring their
# host's fields (the composed owners replace them). The list only shrinks.
REDECLARED_TODAY: dict[str, int] = {
    "trioqueue/actors/store_reads.py:StoreReads": 3,
}
# Public methods per class: at most MAX_PUBLIC_METHODS, but for the BullMQ-shaped client
# classes and the storage port (one method per store operation) and its adapters.
MAX_PUBLIC_METHODS = 20
WIDE_BY_DESIGN: dict[str, str] = {
    "trioqueue/client/queue.py:Queue": "BullMQ's Queue surface",
    "trioqueue/client/job.py:Job": "BullMQ's Job surface",
    "trioqueue/storage/port.py:Storage": "the storage port: one method per store operation",
    "trioqueue/storage/lmdb/store.py:LmdbStorage": "implements the storage port",
    "trioqueue/storage/memory.py:MemoryStorage": "implements the storage port",
    "trioqueue/storage/pg/store.py:PgStorage": "implements the storage port",
}
# Wider than that today (the list only shrinks): public members, alias lines included.
WIDE_TODAY: dict[str, int] = {
    "trioqueue/core/queue/state.py:QueueState": 88,
    "trioqueue/actors/router.py:Router": 33,
    "trioqueue/storage/kept_data.py:KeptData": 23,
}
_FIELD_BASES = frozenset({"NamedTuple", "TypedDict", "Protocol", "Enum", "IntEnum", "StrEnum",
                          "Struct"})


def _classes() -> list[tuple[str, ast.ClassDef]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        where = path.relative_to(PACKAGE.parent).as_posix()
        found += [(f"{where}:{node.name}", node) for node in ast.walk(tree)
                  if isinstance(node, ast.ClassDef)]
    return found


def _is_record(cls: ast.ClassDef) -> bool:
    """Dataclasses, named tuples, protocols and the like: their annotations are fields."""
    bases = {ast.unparse(b).split("[")[0].split(".")[-1] for b in cls.bases}
    return bool(bases & _FIELD_BASES) or any(
        "dataclass" in ast.unparse(d) for d in cls.decorator_list)


def _assigned(cls: ast.ClassDef) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        else:
            continue
        for target in targets:
            names |= {n.attr for n in ast.walk(target) if isinstance(n, ast.Attribute)
                      and isinstance(n.value, ast.Name) and n.value.id in ("self", "cls")}
    return names


def redeclared() -> dict[str, int]:
    """Per class, the attributes its body annotates (``name: T``) but no code of it
    assigns: what a mixin declares so that it type-checks against its host."""
    found = {}
    for where, cls in _classes():
        if _is_record(cls) or where in FIELD_TABLES:
            continue
        assigned = _assigned(cls)
        never = [s.target.id for s in cls.body if isinstance(s, ast.AnnAssign)
                 and s.value is None and isinstance(s.target, ast.Name)
                 and s.target.id not in assigned]
        if never:
            found[where] = len(never)
    return found


def public_members() -> dict[str, int]:
    """Per class, its public methods and the public names bound to another object's
    attribute in its body (an alias line is a method too)."""
    counts = {}
    for where, cls in _classes():
        methods = [s for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
                   and not s.name.startswith("_")]
        aliases = [t for s in cls.body if isinstance(s, ast.Assign)
                   and isinstance(s.value, ast.Attribute)
                   for t in s.targets if isinstance(t, ast.Name) and not t.id.startswith("_")]
        counts[where] = len(methods) + len(aliases)
    return counts


def test_no_class_annotates_attributes_it_never_assigns() -> None:
    found = redeclared()
    new = {w: n for w, n in found.items() if n > REDECLARED_TODAY.get(w, 0)}
    assert not new, ("classes annotating attributes they never assign (a mixin re-declaring "
                     "its host: hold a collaborator as a field instead):\n"
                     + "\n".join(f"  {w}: {n}" for w, n in sorted(new.items())))
    lower = {w: (n, found.get(w, 0)) for w, n in REDECLARED_TODAY.items() if found.get(w, 0) < n}
    assert not lower, ("fewer re-declared attributes than REDECLARED_TODAY says (good): lower "
                       "or delete these entries: " + ", ".join(
                           f"{w} {was} -> {now}" for w, (was, now) in sorted(lower.items())))


def test_public_methods_per_class_are_bounded() -> None:
    counts = public_members()
    over = {w: n for w, n in counts.items() if n > MAX_PUBLIC_METHODS
            and w not in WIDE_BY_DESIGN and n > WIDE_TODAY.get(w, 0)}
    assert not over, (f"classes with over {MAX_PUBLIC_METHODS} public methods (compose owners "
                      "instead):\n" + "\n".join(f"  {w}: {n}" for w, n in sorted(over.items())))
    lower = {w: (n, counts.get(w, 0)) for w, n in WIDE_TODAY.items() if counts.get(w, 0) < n}
    assert not lower, ("fewer public methods than WIDE_TODAY says (good): lower or delete "
                       "these entries: " + ", ".join(
                           f"{w} {was} -> {now}" for w, (was, now) in sorted(lower.items())))


def module_getattrs(package: Path) -> list[str]:
    """Modules defining a module-level ``__getattr__``: what keeps a moved name resolving
    at its old address."""
    return sorted(path.relative_to(package.parent).as_posix()
                  for path in sorted(package.rglob("*.py"))
                  if any(isinstance(node, ast.FunctionDef) and node.name == "__getattr__"
                         for node in ast.parse(path.read_text(encoding="utf-8")).body))


def test_moved_names_are_imported_from_their_new_home() -> None:
    shims = module_getattrs(PACKAGE)
    assert not shims, ("a module-level __getattr__ keeps old import paths alive (update "
                       "the importers instead): " + ", ".join(shims))
