"""Queue-wide control: drain, obliterate, pause, and the persisted settings."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import slices
from .groups import Groups
from .settings import QueueSettings
from .slices import Sliced

if TYPE_CHECKING:
    from .state import QueueState


def drain(q: QueueState, now: int) -> int:
    """Drain at once (see :func:`.slices.drain`; the actor runs it in slices)."""
    return int(q.drain_work(now).run())


def drain_work(q: QueueState, now: int) -> Sliced:
    return Sliced(slices.drain(q, now), lambda removed: {"count": removed})


def obliterate(q: QueueState, now: int) -> None:
    """Obliterate at once (see :func:`.slices.obliterate`)."""
    q.obliterate_work(now).run()


def obliterate_work(q: QueueState, now: int) -> Sliced:
    return Sliced(slices.obliterate(q, now), lambda _: {})


def store_settings(q: QueueState) -> None:
    """Write the queue's settings record (its meta row), after any change to it."""
    q.writes.put_queue_meta(q.name, q.settings.to_meta())


def reset_settings(q: QueueState) -> None:
    """Back to the defaults, stored (Obliterate)."""
    q.settings = QueueSettings()
    q.groups = Groups(q.settings.groups, q.settings.group_defaults)
    q.store_settings()


def set_paused(q: QueueState, paused: bool, now: int) -> None:
    if q.settings.paused != paused:
        q.settings.paused = paused
        q.store_settings()
        q.emit("paused" if paused else "resumed", "", now)


def load_meta(q: QueueState, meta: dict[str, Any]) -> None:
    """The stored settings, before the queue's jobs are restored (recovery.rebuild)."""
    q.settings = QueueSettings.from_meta(meta)
    q.groups = Groups(q.settings.groups, q.settings.group_defaults)
