"""What the listeners use of the broker, handed in by whoever starts them.

A listener (TCP, the HTTP port and its WebSocket and HTTP sides) needs a few of the
broker's parts, not the broker: the host of each connection's session, the connection
slots every listener shares, the counts of open connections, what the live frames read
and the clock. The server builds one :class:`ListenerContext` from its broker, as
hypercorn hands its workers a ``WorkerContext``: the transport then names no actor, and
a listener's needs can be read off this one class.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import trio

from ..config import Config
from ..core.commands.stats import StatsScope
from ..core.metrics.broker_stats import ConnectionCounts
from .session import SessionHost


@dataclass(frozen=True, slots=True)
class ListenerContext:
    # each connection's session: the config, the router, the events, large data ahead
    session_host: SessionHost
    # ``max_connections``: one slot per connection, shared by every listener
    connection_slots: trio.CapacityLimiter
    # open connections per transport (Stats, the dashboard, client:connected)
    open_connections: ConnectionCounts
    # what the live frames (SSE, subscribed WebSockets) read: the router's numbers
    stats: StatsScope
    # the broker's clock, in milliseconds
    now_ms: Callable[[], int]

    @property
    def config(self) -> Config:
        return self.session_host.config
