"""Who may use the HTTP port: bearer tokens and the per-address request budget.

Both are bunqueue's: ``Authorization: Bearer <token>`` checked against the same tokens as
``Auth`` (trimmed, constant time), and a fixed window of ``http_rate_limit_max_requests``
requests per ``http_rate_limit_window_ms`` per client address, answered 429 past it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..session import token_accepted


def bearer_token(headers: Iterable[tuple[Any, Any]]) -> str | None:
    """The token of an ``Authorization: Bearer ...`` header (None without one).

    Two ``Authorization`` headers give a token that matches nothing: which one counts
    would depend on who reads them (a proxy in front may check the other). The HTTP
    port refuses such a request before this (``http_origin``); this keeps any other
    reader from letting the first decide.
    """
    found: str | None = None
    for name, value in headers:
        key = name.decode("latin-1") if isinstance(name, bytes) else str(name)
        if key.lower() != "authorization":
            continue
        if found is not None:
            return ""
        text = value.decode("latin-1") if isinstance(value, bytes) else str(value)
        scheme, _, token = text.strip().partition(" ")
        # another scheme: a token that matches nothing
        found = token.strip() if scheme.lower() == "bearer" else ""
    return found


def authorized(tokens: list[str], headers: Iterable[tuple[Any, Any]]) -> bool:
    """With no tokens configured everyone is; otherwise a matching bearer token."""
    return token_accepted(tokens, bearer_token(headers))


class RequestBudget:
    """Requests per client address in fixed windows (bunqueue's protocol limiter).

    One counter per address seen in the current window; the whole table is dropped when
    the window turns, so it holds at most the addresses of one window (bounded by
    ``max_addresses`` besides: past it new addresses share one counter, so a flood of
    spoofed sources cannot grow memory).
    """

    def __init__(self, window_ms: float, max_requests: int, max_addresses: int = 100_000
                 ) -> None:
        self.window_s = window_ms / 1000
        self.max_requests = max_requests
        self.max_addresses = max_addresses
        self._window_start = -1.0
        self._counts: dict[str, int] = {}

    def take(self, address: str, now: float) -> bool:
        """Count one request of ``address`` at ``now`` (seconds); False when over."""
        if self.window_s <= 0 or self.max_requests <= 0:
            return True
        if now - self._window_start >= self.window_s:
            self._window_start = now
            self._counts = {}
        counts = self._counts
        if address not in counts and len(counts) >= self.max_addresses:
            address = "*"
        used = counts.get(address, 0) + 1
        counts[address] = used
        return used <= self.max_requests

    def first_refusal(self, address: str) -> bool:
        """Whether the request just refused to ``address`` was its first refusal of
        this window (``ratelimit:hit`` is told once per address and window)."""
        return self._counts.get(address) == self.max_requests + 1

    def retry_after_s(self, now: float) -> int:
        """Whole seconds until the window turns (the Retry-After header)."""
        return max(1, int(self._window_start + self.window_s - now + 0.999))
