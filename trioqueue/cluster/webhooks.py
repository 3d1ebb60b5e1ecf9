"""The webhooks of a cluster (docs/scale-out.md): every broker holds every webhook.

A job's events happen on the broker that serves its queue, and that is where its
deliveries start (actors/webhook_delivery.py), so each broker needs the whole registry,
whichever broker received the AddWebhook. The registry follows the table
(``tq_broker_records``) instead of being told by the others:

* every commit that changes a webhook also raises the version of the ``webhook``
  records (``tq_record_versions``, in the same statement: storage/pg/layout.py), and
  every beat reads the versions with the leases, in its one round trip;
* a beat that finds a version other than the one this broker last loaded has the
  registry reloaded from the table (:meth:`WebhookSync.refresh`), so an AddWebhook,
  RemoveWebhook or SetWebhookEnabled through any broker reaches every broker within a
  beat (and a broker that missed a beat still catches up: it compares, never counts);
* the webhook commands themselves reload it first (the router's hook,
  cluster/crons.py): a RemoveWebhook through any broker finds a webhook added
  through another a moment before, and ListWebhooks lists the table's webhooks.

A reload keeps the objects of the webhooks still there (their delivery task and their
counters, which live in memory on each broker), drops those gone (their buffers and
tasks go too) and adds the new ones. It reads after this broker's own writes are
committed; one overtaken by a change made here meanwhile is not applied (it would undo
that change for a moment) and is tried again.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

from ..core.webhooks.registry import RECORD_KIND as WEBHOOK_RECORDS
from ..core.webhooks.registry import WebhookRegistry

log = logging.getLogger("trioqueue.webhooks")

T = TypeVar("T")
Records = dict[str, dict[str, dict[str, Any]]]
# A read of the store in a worker thread once this broker's writes are committed
# (StorageWriter.read_committed).
ReadCommitted = Callable[[Callable[[], Records]], Awaitable[Records]]

# Reloads overtaken by a change made here before one is applied (each is a round trip;
# past that, the next beat tries again).
REFRESH_TRIES = 3


class RecordStore(Protocol):
    def load_broker_records(self, kinds: Sequence[str]) -> Records: ...


class Beats(Protocol):
    """What the sync follows of the cluster (cluster/view.py)."""

    @property
    def versions(self) -> Any: ...
    async def next_beat(self) -> None: ...


class WebhookSync:
    """Keeps ``registry`` equal to the table's webhooks (see the module docstring)."""

    def __init__(self, registry: WebhookRegistry, store: RecordStore,
                 read_committed: ReadCommitted) -> None:
        self._registry = registry
        self._store = store
        self._read = read_committed
        self.reloads = 0  # reloads applied since the start

    async def refresh(self) -> bool:
        """Reload the registry from the table; False when each read was overtaken by
        a change made on this broker meanwhile (nothing applied)."""
        registry = self._registry
        store = self._store
        for _ in range(REFRESH_TRIES):
            before = registry.changes
            records = await self._read(lambda: store.load_broker_records([WEBHOOK_RECORDS]))
            if registry.changes == before:
                registry.replace(records.get(WEBHOOK_RECORDS, {}).values())
                self.reloads += 1
                return True
        return False

    async def follow(self, cluster: Beats) -> None:
        """At each beat, reload the registry when the webhooks' version moved since the
        last reload (the first beat reloads: what was loaded at the start may be a
        beat old)."""
        seen: int | None = None
        first = True
        while True:
            await cluster.next_beat()
            version = cluster.versions.get(WEBHOOK_RECORDS)
            if (first or version != seen) and await self.refresh():
                seen, first = version, False
