"""The event hub: job lifecycle events from queue actors, fanned out to subscribers.

Queue actors publish the events of a batch in one call. A subscriber is a callable
that must not block (sessions put events in their own bounded outbox and drop a
subscriber that falls behind), so one slow reader never slows a queue.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .ports import EventSink

Subscriber = Callable[[list[dict[str, Any]]], None]


class EventHub:
    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []
        self.published = 0

    def subscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.append(subscriber)

    def unsubscribe(self, subscriber: Subscriber) -> None:
        if subscriber in self._subscribers:
            self._subscribers.remove(subscriber)

    @property
    def active(self) -> bool:
        """Whether anyone listens (queues skip building events otherwise)."""
        return bool(self._subscribers)

    def publish(self, events: list[dict[str, Any]]) -> None:
        self.published += len(events)
        for subscriber in list(self._subscribers):
            subscriber(events)


class EventRelease:
    """Publishes a batch's job events as a reply is delivered: with a store that commits
    off the trio thread, the events wait in the writer with the replies, for the commit
    that makes them true."""

    __slots__ = ("sink",)

    def __init__(self, sink: EventSink) -> None:
        self.sink = sink

    def deliver(self, reply: dict[str, Any]) -> None:
        self.sink.publish(reply["events"])
