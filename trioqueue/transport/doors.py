"""Who comes in: connections per client address, and connections not yet authenticated.

``max_connections`` alone lets whoever opens sockets fastest keep everyone else out:
one client holding ten thousand idle sockets (auth off), or sockets that never
authenticate and are reopened as soon as the broker closes them (auth on). Two rules
keep the doors open:

- **Per address** (``max_connections_per_address``): the connections of one client
  address at once, over the TCP port and the HTTP port together (the WebSocket and HTTP
  connections there). One past it is refused as one past ``max_connections`` is. IPv6
  addresses are counted per /64, the block one host is usually given; an IPv4 address
  mapped into IPv6 counts as itself.
- **Not yet authenticated** (``max_unauthenticated_connections``, tokens set): TCP and
  WebSocket connections that have not sent a valid ``Auth`` are kept in arrival order.
  A new one past the cap, or a connection that finds ``max_connections`` reached, takes
  the place of the oldest of them, which gets a notice and the close. A login needs one
  round trip; to close it before it authenticates, that many newer connections must
  arrive first, so sockets that never authenticate cannot keep logins out however many
  addresses they come from, and authenticated clients always find room (a full broker
  refuses only when every connection in it has authenticated).

The count per address covers a connection from its accept to its close; the
unauthenticated cap has no effect without tokens (every connection is authenticated
from the start).
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Any, Protocol

import trio

from ..config import Config

log = logging.getLogger("trioqueue.limits")

# How long a connection that made room waits for the slot of the one it closed: that
# one ends in a few task steps, in turns when many end at once (limits.Teardowns).
ROOM_WAIT_S = 2.0

EVICTED = ("Closed to make room: not authenticated, and the oldest of too many such "
           "connections (send Auth first)")


def too_many_from_address(limit: int) -> str:
    return f"Too many connections from this address (max {limit})"


class Evictable(Protocol):
    """A connection not yet authenticated, as the doors see it: something to close."""

    def evict(self) -> bool:
        """Close to make room; False if it was closing already."""
        ...


def client_address(sock: Any) -> str:
    """The key a connection is counted under: its peer's IP address (IPv6: its /64)."""
    try:
        peer = sock.getpeername()
    except OSError:
        return "?"
    if not isinstance(peer, tuple):
        return "local"  # a Unix socket: one local client
    host = str(peer[0]).partition("%")[0]
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return host


class Doors:
    """The connections of each address, and those not yet authenticated (see module)."""

    def __init__(self, config: Config) -> None:
        self.per_address = config.max_connections_per_address
        self.max_unauthenticated = (config.max_unauthenticated_connections
                                    if config.auth_tokens else 0)
        self._addresses: dict[str, int] = {}
        # not yet authenticated, oldest first (a dict keeps insertion order)
        self._unauthenticated: dict[Evictable, None] = {}
        self.evictions = 0
        self._refused = 0
        self._logged_at = -1e9
        self._evicted = 0  # since the last log line
        self._evictions_logged_at = -1e9

    # ------------------------------------------------------------------ per address

    def enter(self, address: str) -> bool:
        """Count a new connection of ``address``; False (not counted) past the cap."""
        held = self._addresses.get(address, 0)
        if self.per_address and held >= self.per_address:
            self._note_refusal()
            return False
        self._addresses[address] = held + 1
        return True

    def leave(self, address: str) -> None:
        held = self._addresses.get(address, 0) - 1
        if held > 0:
            self._addresses[address] = held
        else:
            self._addresses.pop(address, None)

    def held_by(self, address: str) -> int:
        return self._addresses.get(address, 0)

    def _note_refusal(self) -> None:
        self._refused += 1
        now = trio.current_time()
        if now - self._logged_at >= 1.0:
            log.warning("refused %d connection(s) in the last second: "
                        "max_connections_per_address (%d) reached", self._refused,
                        self.per_address)
            self._refused = 0
            self._logged_at = now

    # ------------------------------------------------------------------ not authenticated

    @property
    def unauthenticated(self) -> int:
        return len(self._unauthenticated)

    def arrived(self, connection: Evictable) -> None:
        """A connection not yet authenticated: past the cap, the oldest makes room."""
        if not self.max_unauthenticated:
            return
        self._unauthenticated[connection] = None
        while len(self._unauthenticated) > self.max_unauthenticated:
            if not self._evict_oldest():
                break

    def settled(self, connection: Evictable) -> None:
        """Authenticated, or gone: no longer one that can be closed to make room."""
        self._unauthenticated.pop(connection, None)

    def _evict_oldest(self) -> bool:
        while self._unauthenticated:
            oldest = next(iter(self._unauthenticated))
            del self._unauthenticated[oldest]
            if oldest.evict():
                self._note_eviction()
                return True
        return False

    def _note_eviction(self) -> None:
        self.evictions += 1
        self._evicted += 1
        now = trio.current_time()
        if now - self._evictions_logged_at >= 1.0:
            log.warning("closed %d connection(s) not authenticated in the last second to "
                        "make room (max_unauthenticated_connections %d, or "
                        "max_connections reached)", self._evicted, self.max_unauthenticated)
            self._evicted = 0
            self._evictions_logged_at = now

    async def slot(self, limit: trio.CapacityLimiter) -> bool:
        """Take a slot of ``max_connections`` (``limit``) for the current task; at the
        limit, close the oldest connection not yet authenticated and take its slot
        once it has ended. False when there is none to close (the caller refuses)."""
        try:
            limit.acquire_nowait()
            return True
        except trio.WouldBlock:
            pass
        if not self.max_unauthenticated or not self._evict_oldest():
            return False
        with trio.move_on_after(ROOM_WAIT_S):
            await limit.acquire()
            return True
        return False
