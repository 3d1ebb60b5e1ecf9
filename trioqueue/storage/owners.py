"""How a refused broker names the broker that owns the store, in the same words on
every store (``lmdb/owner.py``, ``pg/owner.py``)."""

from __future__ import annotations

from datetime import UTC, datetime


def since_words(when: datetime) -> str:
    """A moment as an owner's ``since``: UTC, to the second."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def owner_words(pid: object, host: object, since: str | None) -> str:
    """``pid 1234 on host x, since 2026-01-02T03:04:05Z``, or what is known of it."""
    if pid is None and host is None:
        return "its pid not recorded yet"
    words = f"pid {pid} on host {host}"
    return f"{words}, since {since}" if since else words
