"""A cluster's membership and queue leases in dicts, for tests of the broker's cluster
logic: the operations of :class:`.pg.PgCluster`, with the same rules, where a
clock given to it (seconds, any origin) stands in for the database's ``now()``.

Several brokers of a test share one :class:`MemoryCluster` as they would share one
database. It does not fence commits (a ``MemoryStorage`` takes no
``Fence``): the fencing itself is PostgreSQL's, tested against it. The jobs
it loads and looks up are those of the ``MemoryStorage`` given to it, if
any (the one store the test's brokers share); without one, there are none.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..storage.memory import MemoryStorage
from ..storage.port import FINISHED, LIVE, Beat, Claimed, Recovered

__all__ = ["Member", "MemoryCluster"]


@dataclass
class Member:
    """A row of tq_brokers."""

    address: str
    started_at: float
    heartbeat: float


class MemoryCluster:
    """:class:`.pg.PgCluster`'s operations in dicts. ``brokers`` and
    ``leases`` are its two tables, open to a test as the database's are (to age a
    heartbeat, for one)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 store: MemoryStorage | None = None) -> None:
        self._clock = clock
        self._store = store
        self.brokers: dict[str, Member] = {}
        self.leases: dict[str, tuple[str | None, int]] = {}  # queue -> (owner, epoch)
        # kind -> version of the broker records: a test raises one as a commit of
        # another broker would (a MemoryStorage takes no cluster writes)
        self.versions: dict[str, int] = {}

    def _live(self, broker_id: str | None, lease_s: float, now: float) -> bool:
        member = None if broker_id is None else self.brokers.get(broker_id)
        return member is not None and member.heartbeat > now - lease_s

    def join(self, broker_id: str, address: str) -> None:
        now = self._clock()
        for queue, (owner, epoch) in self.leases.items():
            if owner == broker_id:  # (an earlier process under this id: see pg/layout.py)
                self.leases[queue] = (None, epoch)
        self.brokers[broker_id] = Member(address, now, now)

    def beat(self, broker_id: str, lease_s: float) -> Beat | None:
        now = self._clock()
        if not self._live(broker_id, lease_s, now):
            return None  # stale or gone: never made live again by a renewal
        live = {bid: m.address for bid, m in self.brokers.items()
                if m.heartbeat > now - lease_s}
        self.brokers[broker_id].heartbeat = now
        return Beat(live, dict(self.leases), dict(self.versions))

    def claim(self, queue: str, broker_id: str, lease_s: float) -> int | None:
        now = self._clock()
        if not self._live(broker_id, lease_s, now):
            return None
        owner, epoch = self.leases.get(queue, (None, 0))
        if owner == broker_id or (owner is not None and self._live(owner, lease_s, now)):
            return None
        self.leases[queue] = (broker_id, epoch + 1)
        return epoch + 1

    def release(self, queue: str, broker_id: str, epoch: int) -> bool:
        if self.leases.get(queue) != (broker_id, epoch):
            return False
        self.leases[queue] = (None, epoch)
        return True

    def leave(self, broker_id: str) -> None:
        for queue, (owner, epoch) in self.leases.items():
            if owner == broker_id:
                self.leases[queue] = (None, epoch)
        self.brokers.pop(broker_id, None)

    def load_queues(self, queues: Sequence[str]) -> Recovered:
        if self._store is None:
            return Recovered()
        names = set(queues)
        everything = self._store.load()
        return Recovered(
            live_jobs=[r for r in everything.live_jobs if r["queue"] in names],
            queue_meta={q: m for q, m in everything.queue_meta.items() if q in names},
            finished_counts={key: n for key, n in everything.finished_counts.items()
                             if key[0] in names})

    def load_broker_records(self, kinds: Sequence[str]
                            ) -> dict[str, dict[str, dict[str, Any]]]:
        if self._store is None:
            return {}
        records = self._store.load().broker_records
        return {kind: dict(records[kind]) for kind in kinds if kind in records}

    def queues_of(self, job_ids: Sequence[str]) -> dict[str, str]:
        return {job_id: queue for job_id, (queue, _) in self.locate_jobs(job_ids).items()}

    def locate_jobs(self, job_ids: Sequence[str]) -> dict[str, tuple[str, bool]]:
        if self._store is None:
            return {}
        wanted = set(job_ids)
        found = {r["id"]: (r["queue"], True) for r in self._store.load().live_jobs
                 if r["id"] in wanted}
        finished = self._store.queues_of_finished(list(wanted - found.keys()))
        found.update((job_id, (queue, False)) for job_id, queue in finished.items())
        return found

    def claim_ids(self, broker_id: str, lease_s: float, wanted: Sequence[tuple[str, str]],
                  looks: Sequence[str]) -> dict[str, Claimed]:
        """(Where the ids are, and no claims: the races between brokers that claims
        settle are PostgreSQL's, tested against it.)"""
        found = self.locate_jobs([job_id for job_id, _ in wanted] + list(looks))
        return {job_id: Claimed(queue, LIVE if live else FINISHED)
                for job_id, (queue, live) in found.items()}

    def inbox(self, queues: Sequence[str], limit: int) -> list[tuple[int, str, Any]]:
        """(Messages between brokers are PostgreSQL's: none here.)"""
        return []

    def waits_of(self, queues: Sequence[str]) -> list[tuple[str, str, str]]:
        return []

    def inbox_queues(self) -> list[str]:
        return []

    def wait_inbox(self, timeout_s: float) -> bool:
        """(No inbox here: waits out the timeout, from the caller's thread.)"""
        time.sleep(timeout_s)
        return False
