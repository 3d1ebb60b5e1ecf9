"""The event hub: job lifecycle events from queue actors, fanned out to subscribers.

Queue actors publish the events of a batch in one call. A subscriber is a callable
that must not block (sessions put events in their own bounded outbox and drop a
subscriber that falls behind), so one slow reader never slows a queue.

In a cluster (docs/scale-out.md, "Events across brokers") the hub has two kinds of
subscribers and two kinds of events. *Local* subscribers are this broker's clients
(SubscribeEvents, WebSocket, SSE); *streams* are other brokers' ``ClusterEvents``
connections. The events of the queues this broker serves (:meth:`EventHub.publish`)
go to both; the events another broker served and cluster/peers/events.py relays here
(:meth:`EventHub.publish_relayed`) go to the local subscribers only, so an event is
never sent back to a broker, nor on to a third one: each broker's stream carries its
own queues' events once, and a subscriber gets each event once, from its owner.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .ports import EventSink

Subscriber = Callable[[list[dict[str, Any]]], None]
# Asked when a client subscribes: True if the events of every live peer already reach
# this hub; else False, and the callback is called once they do (or could not).
RelayGate = Callable[[Callable[[], None]], bool]


class EventHub:
    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []  # this broker's clients
        self._streams: list[Subscriber] = []  # other brokers' ClusterEvents streams
        self.published = 0
        self.relayed = 0  # events of other brokers' queues, republished here
        #: Called whenever :attr:`listening` may have changed (PeerEvents wakes on it).
        self.listening_changed: Callable[[], None] | None = None
        #: Set by PeerEvents in a cluster; see :meth:`when_relayed`.
        self.relay_gate: RelayGate | None = None

    def subscribe(self, subscriber: Subscriber, *, stream: bool = False) -> None:
        """Add a subscriber; ``stream``: another broker's, which gets only the events
        of this broker's own queues."""
        if stream:
            self._streams.append(subscriber)
            return
        self._subscribers.append(subscriber)
        if len(self._subscribers) == 1 and self.listening_changed is not None:
            self.listening_changed()

    def unsubscribe(self, subscriber: Subscriber) -> None:
        if subscriber in self._streams:
            self._streams.remove(subscriber)
        elif subscriber in self._subscribers:
            self._subscribers.remove(subscriber)
            if not self._subscribers and self.listening_changed is not None:
                self.listening_changed()

    @property
    def active(self) -> bool:
        """Whether anyone listens (queues skip building events otherwise)."""
        return bool(self._subscribers or self._streams)

    @property
    def listening(self) -> bool:
        """Whether a client of this broker listens (other brokers' streams aside)."""
        return bool(self._subscribers)

    @property
    def streams(self) -> int:
        """Other brokers' ClusterEvents streams subscribed here."""
        return len(self._streams)

    def publish(self, events: list[dict[str, Any]]) -> None:
        """Events of this broker's queues: to every subscriber, streams included."""
        self.published += len(events)
        for subscriber in list(self._subscribers):
            subscriber(events)
        for stream in list(self._streams):
            stream(events)

    def publish_relayed(self, events: list[dict[str, Any]]) -> None:
        """Events another broker published, relayed here: to the local subscribers
        only (never to a stream, so no event goes round or twice)."""
        self.relayed += len(events)
        for subscriber in list(self._subscribers):
            subscriber(events)

    def when_relayed(self, done: Callable[[], None]) -> bool:
        """True when the events of every live peer reach this hub already (or this
        broker is in no cluster); else False, and ``done`` is called once they do or
        their connection failed (bounded by the peer connect timeout)."""
        gate = self.relay_gate
        return gate is None or gate(done)


class EventRelease:
    """Publishes a batch's job events as a reply is delivered: with a store that commits
    off the trio thread, the events wait in the writer with the replies, for the commit
    that makes them true."""

    __slots__ = ("sink",)

    def __init__(self, sink: EventSink) -> None:
        self.sink = sink

    def deliver(self, reply: dict[str, Any]) -> None:
        self.sink.publish(reply["events"])
