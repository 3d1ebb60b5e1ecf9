"""The layering of docs/architecture.md ("## Layers"), checked over the imports.

The page says which layer may import which; nothing checked it, so the imports drifted
from it. Here every module of ``trioqueue/`` is read with ``ast`` (imports inside
functions and under ``TYPE_CHECKING`` count too: a type-only import still ties the
layers together) and each import of ours is held to the page's rules.

Imports that break a rule today are listed in ``BREAKS_TODAY``, each named and with
why it is there, so the tests pass now, fail on any new break, and fail when a listed
import is gone (delete its entry then: the list only shrinks). The same holds for the
``name = module.function`` alias lines in class bodies (``ALIASES_TODAY``).
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

PACKAGE = Path(__file__).resolve().parents[1] / "trioqueue"
LAYERS = ("core", "storage", "actors", "transport", "cluster")

# What each layer may import of ours (a module, or a package and everything in it).
# ``trioqueue`` alone is the package's ``__init__``: the version string and nothing else.
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "core": ("trioqueue.core", "trioqueue"),
    "storage": ("trioqueue.storage", "trioqueue.core", "trioqueue.utf8_views"),
    "actors": ("trioqueue.actors", "trioqueue.core", "trioqueue.storage", "trioqueue.config",
               "trioqueue.utf8_views", "trioqueue.turns", "trioqueue.process_numbers"),
    "transport": ("trioqueue.transport", "trioqueue.core", "trioqueue.config",
                  "trioqueue.actors.request", "trioqueue.dashboard", "trioqueue.utf8_views",
                  "trioqueue.turns", "trioqueue.process_numbers", "trioqueue"),
    # The cluster sits above the actors: it implements their placement and membership
    # ports, and its peer links speak the wire. No other layer imports it.
    "cluster": ("trioqueue.cluster", "trioqueue.core", "trioqueue.storage", "trioqueue.actors",
                "trioqueue.config", "trioqueue.transport.wire", "trioqueue.transport.large",
                "trioqueue.utf8_views", "trioqueue.turns", "trioqueue.process_numbers",
                "trioqueue.dashboard", "trioqueue"),
}
# The modules every layer may lean on import nothing of ours.
LEAVES = ("trioqueue", "trioqueue.config", "trioqueue.utf8_views", "trioqueue.dashboard",
          "trioqueue.turns", "trioqueue.process_numbers")
# The core modules storage uses (the page names them).
STORAGE_USES_OF_CORE = frozenset({
    "trioqueue.core.writes", "trioqueue.core.job", "trioqueue.core.queue.finished",
    "trioqueue.core.large_values.graveyard", "trioqueue.core.large_values.value_count",
    "trioqueue.core.presized", "trioqueue.core.large_values.msgpack_runs",
})
# Of other libraries, the core imports only parsers (and typing helpers).
CORE_LIBRARIES = frozenset({"cronsim", "httpx", "msgpack", "typing_extensions", "_typeshed"})
# No sockets, no event loop in the core.
CORE_NEVER = frozenset({"socket", "ssl", "select", "selectors", "asyncio"})
# Exceptions the page states, kept for good (not a debt): (module, imported) -> why.
STATED_EXCEPTIONS: dict[tuple[str, str], str] = {
    ("trioqueue.core.webhooks.urls", "socket"):
        "socket.inet_aton only, a pure parse of IPv4's legacy forms (127.1, 0x7f.1)",
}

# Every import that breaks a rule today: (module, imported module) -> why. The reshape of
# issue "Composed owners" removes them; when one is gone, delete its line here.
BREAKS_TODAY: dict[tuple[str, str], str] = {
}

# Lines ``name = module.function`` in class bodies, per file, today: the count may only
# fall (the composed owners of issue "Composed owners" replace these tables).
ALIASES_TODAY: dict[str, int] = {
}


class Imported(NamedTuple):
    target: str  # a module of ours as dotted name, or another library's top-level name
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


MODULES = all_modules()


def _from_base(name: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = name.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(name: str, tree: ast.AST, is_package: bool) -> Iterator[Imported]:
    """Each import in the tree: ``from pkg import mod`` names the module ``pkg.mod``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Imported(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(name, is_package, node)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield Imported(sub if sub in MODULES else base, node.lineno)


def parsed(name: str) -> tuple[ast.AST, bool]:
    path = MODULES[name]
    return ast.parse(path.read_text(), str(path)), path.name == "__init__.py"


def ours(target: str) -> bool:
    return target == "trioqueue" or target.startswith("trioqueue.")


def within(target: str, allowed: tuple[str, ...]) -> bool:
    return any(target == a or (a != "trioqueue" and target.startswith(a + "."))
               for a in allowed)


def layer_of(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def breaks(name: str, tree: ast.AST, is_package: bool) -> Iterator[tuple[str, int, str]]:
    """(imported, line, the rule broken) for each import of ``name`` the page forbids."""
    layer = layer_of(name)
    for target, line in imports_of(name, tree, is_package):
        top = target.split(".")[0]
        if name in LEAVES and ours(target):
            yield target, line, f"{name} is a leaf: it imports nothing of ours"
        elif layer and ours(target) and not within(target, MAY_IMPORT[layer]):
            yield target, line, f"{layer}/ may import only {', '.join(MAY_IMPORT[layer])}"
        elif (layer == "storage" and target.startswith("trioqueue.core")
              and target not in STORAGE_USES_OF_CORE):
            yield target, line, "storage/ uses only the core modules the page names"
        elif layer == "transport" and within(target, ("trioqueue.core.queue",)):
            yield target, line, "transport/ reaches the queues only through the router"
        elif layer == "core" and top in CORE_NEVER:
            yield top, line, "core/ has no sockets and no event loop"
        elif (layer == "core" and not ours(target) and top not in sys.stdlib_module_names
              and top not in CORE_LIBRARIES):
            yield top, line, f"core/ imports of other libraries only {sorted(CORE_LIBRARIES)}"


def every_break() -> dict[tuple[str, str], list[str]]:
    found: dict[tuple[str, str], list[str]] = {}
    for name in MODULES:
        tree, is_package = parsed(name)
        for target, line, rule in breaks(name, tree, is_package):
            found.setdefault((name, target), []).append(f"{MODULES[name]}:{line} ({rule})")
    return found


def test_no_import_breaks_the_layers_of_the_architecture_page() -> None:
    new = {pair: where for pair, where in every_break().items()
           if pair not in BREAKS_TODAY and pair not in STATED_EXCEPTIONS}
    assert not new, "imports against docs/architecture.md's layers (change the import; if "\
        "the page is what is wrong, change the page and the rules here together):\n" + "\n".join(
        f"  {m} -> {t}: {', '.join(where)}" for (m, t), where in sorted(new.items()))


def test_the_list_of_todays_breaks_only_shrinks() -> None:
    found = every_break()
    gone = sorted(pair for pair in [*BREAKS_TODAY, *STATED_EXCEPTIONS] if pair not in found)
    assert not gone, (
        "no longer imported (good): delete these entries from BREAKS_TODAY or "
        "STATED_EXCEPTIONS in tests/test_layers.py (and the page's mention):\n"
        + "\n".join(f"  {m} -> {t}" for m, t in gone))


def test_a_new_break_is_caught() -> None:
    """The checker itself: an upward import in a made-up module of each lower layer."""
    cases = {
        "trioqueue.core.made_up": "from ..actors import router\nimport trio\n",
        "trioqueue.storage.made_up": "from ..core.queue import state\n",
        "trioqueue.actors.made_up": "from ..transport.session import Session\n",
        "trioqueue.transport.made_up": "from ..actors.router import Router\n",
        "trioqueue.transport.made_up2": "from ..core.queue.state import QueueState\n",
        "trioqueue.actors.made_up2": "from ..cluster.member import ClusterMember\n",
        "trioqueue.storage.made_up2": "from ..cluster.view import HeldLeases\n",
        "trioqueue.transport.made_up3": "from ..cluster.peers.links import PeerLinks\n",
        "trioqueue.cluster.made_up": "from ..transport.session import Session\n",
    }
    for name, source in cases.items():
        found = list(breaks(name, ast.parse(source), False))
        assert found, name
    core = {t for t, _, _ in breaks("trioqueue.core.made_up",
                                    ast.parse(cases["trioqueue.core.made_up"]), False)}
    assert core == {"trioqueue.actors.router", "trio"}


def test_only_broker_py_imports_the_broker_within_actors() -> None:
    """Actors get narrow ports (actors/ports.py), never the Broker."""
    holders = sorted(
        f"{MODULES[name]}:{line}" for name in MODULES
        if layer_of(name) == "actors" and name != "trioqueue.actors.broker"
        for target, line in imports_of(name, *parsed(name))
        if target == "trioqueue.actors.broker")
    assert not holders, "actors/ modules importing the Broker: " + ", ".join(holders)



def test_the_admin_commands_do_not_import_the_command_line() -> None:
    """cli.py imports the admin commands; what both read of the environment (the
    broker's address and tokens) is trioqueue.environment, so no import goes back."""
    back = sorted(
        f"{MODULES[name]}:{line}" for name in MODULES
        if name == "trioqueue.admin" or name.startswith("trioqueue.admin.")
        for target, line in imports_of(name, *parsed(name))
        if target == "trioqueue.cli")
    assert not back, "admin/ modules importing cli.py: " + ", ".join(back)


def module_names_bound(name: str, tree: ast.AST, is_package: bool) -> set[str]:
    """Names an import binds to a module (``import x``, ``from . import mod``)."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bound.update(a.asname or a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(name, is_package, node)
            bound.update(a.asname or a.name for a in node.names
                         if f"{base}.{a.name}" in MODULES)
    return bound


def alias_lines(name: str, tree: ast.AST, is_package: bool) -> list[int]:
    """Lines ``name = module.attr`` in a class body (``attr`` not an UPPER constant)."""
    modules = module_names_bound(name, tree, is_package)
    return [
        statement.lineno
        for cls in ast.walk(tree) if isinstance(cls, ast.ClassDef)
        for statement in cls.body
        if isinstance(statement, ast.Assign)
        and isinstance(statement.value, ast.Attribute)
        and isinstance(statement.value.value, ast.Name)
        and statement.value.value.id in modules
        and not statement.value.attr.isupper()
    ]


def test_no_new_alias_lines_in_class_bodies() -> None:
    counts = Counter({
        str(MODULES[name].relative_to(PACKAGE.parent)): len(lines)
        for name in MODULES if (lines := alias_lines(name, *parsed(name)))})
    grown = {f: (n, ALIASES_TODAY.get(f, 0)) for f, n in counts.items()
             if n > ALIASES_TODAY.get(f, 0)}
    assert not grown, "new `name = module.function` lines in a class body (compose an " \
        "owner instead): " + ", ".join(f"{f}: {n} (was {was})" for f, (n, was) in grown.items())
    shrunk = {f: (counts[f], was) for f, was in ALIASES_TODAY.items() if counts[f] < was}
    assert not shrunk, "fewer alias lines than ALIASES_TODAY says (good): lower the " \
        "count in tests/test_layers.py: " + ", ".join(
            f"{f}: {n} (listed {was})" for f, (n, was) in shrunk.items())


def test_alias_lines_are_found() -> None:
    source = ("from .queue import consuming\nfrom .errors import Refused\nimport math\n"
              "class Q:\n    pull = consuming.pull\n    LIMIT = math.INF\n"
              "    floor = math.floor\n    code = Refused.code\n    x = 1\n")
    assert alias_lines("trioqueue.core.made_up", ast.parse(source), False) == [5, 7]
