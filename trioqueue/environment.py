"""The settings ``trioqueue serve`` and the admin commands both read from the
environment: the broker's address and its tokens, so that a command run with the
broker's environment finds the broker ``serve`` was told of.

Apart from the command line (:mod:`trioqueue.cli`), which imports the admin commands:
they read these without importing it back.
"""

from __future__ import annotations

from collections.abc import Mapping

from .config import visible_chars

# setting -> environment names, most specific first
SHARED_ENV_NAMES: dict[str, tuple[str, ...]] = {
    "host": ("TRIOQUEUE_HOST", "HOST"),
    "tcp_port": ("TRIOQUEUE_TCP_PORT", "TCP_PORT"),
    "auth_tokens": ("TRIOQUEUE_AUTH_TOKENS", "AUTH_TOKENS"),
}


def first_set(env: Mapping[str, str], names: tuple[str, ...]) -> tuple[str, str] | None:
    """The first of these variables that is set: (its name, its value)."""
    for name in names:
        if name in env:
            return name, env[name]
    return None


def parse_port(value: str, name: str) -> int:
    try:
        port = int(value.strip())
    except ValueError:
        raise SystemExit(f"Invalid {name}: {value!r} (expected a port number)") from None
    if not 0 <= port <= 65535:
        raise SystemExit(f"Invalid {name}: {value!r} (expected 0-65535)")
    return port


def parse_tokens(value: str, source: str) -> list[str]:
    """Comma-separated tokens, trimmed. A blank entry is an error, never "auth off":
    ``AUTH_TOKENS=""`` or ``","`` silently serving everyone is how auth fails open."""
    tokens = [t.strip() for t in value.split(",")]
    if not all(tokens):
        raise SystemExit(f"Invalid {source}: {value!r} has a blank token (comma-separated "
                         f"non-blank tokens; leave {source} unset to run without auth)")
    for n, token in enumerate(tokens, 1):
        if not visible_chars(token):
            raise SystemExit(f"Invalid {source}: token {n} has no visible character (only "
                             f"spaces, zero-width or format characters such as U+200B)")
    return tokens
