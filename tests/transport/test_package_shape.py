"""The transport's shape: subpackages where a name prefix used to stand in for one, and
listeners given a ListenerContext (the few parts of the broker they use), not the Broker.

Read from the source (``ast``), so a module that drifts back fails here by name."""

from __future__ import annotations

import ast
from pathlib import Path

TRANSPORT = Path(__file__).resolve().parents[2] / "trioqueue" / "transport"

# A prefix that names a subpackage of the transport: its modules live in it, the prefix
# dropped (transport/http/app.py, not transport/http_app.py).
PREFIXES = {"http_": "http", "rest_": "http/rest", "ws_": "http", "sse": "http",
            "websocket": "http", "tcp": "tcp", "large_": "large"}

# Each listener, and the parameter that hands it what it uses of the broker.
LISTENERS = {
    "tcp/listener.py": ("serve_tcp", "context"),
    "http/front.py": ("serve_http", "context"),
    "http/websocket.py": ("WsEndpoint.__init__", "context"),
    "http/server.py": ("HttpServer.__init__", "context"),
}


def test_no_name_prefix_stands_in_for_a_subpackage() -> None:
    misplaced = sorted(
        f"{path.relative_to(TRANSPORT)} (belongs in transport/{package}/)"
        for path in TRANSPORT.rglob("*.py")
        for prefix, package in PREFIXES.items()
        if path.stem.startswith(prefix)
        and not str(path.parent.relative_to(TRANSPORT)).startswith(package))
    assert not misplaced, "modules named for a subpackage they are not in: " + ", ".join(
        misplaced)


def _function(tree: ast.Module, dotted: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    scope: list[ast.stmt] = tree.body
    *classes, name = dotted.split(".")
    for cls in classes:
        scope = next(n for n in scope if isinstance(n, ast.ClassDef) and n.name == cls).body
    return next(n for n in scope
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name)


def test_listeners_are_given_a_listener_context_not_the_broker() -> None:
    given: dict[str, str] = {}
    for module, (function, parameter) in LISTENERS.items():
        if not (TRANSPORT / module).exists():
            given[f"{module}:{function}"] = "no such module"
            continue
        tree = ast.parse((TRANSPORT / module).read_text())
        args = _function(tree, function).args.args
        arg = next((a for a in args if a.arg == parameter), None)
        given[f"{module}:{function}"] = (
            "no parameter " + parameter if arg is None or arg.annotation is None
            else ast.unparse(arg.annotation))
    wrong = {where: what for where, what in given.items() if what != "ListenerContext"}
    assert not wrong, f"listeners not given a ListenerContext: {wrong}"
