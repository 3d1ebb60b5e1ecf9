"""Deduplication keys (``uniqueKey``): which live job holds a key, and the policy a
push with a held key follows (answer the holder, extend its TTL, or replace it)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import Refused
from ..job import QUEUED, WAITING_CHILDREN, JobRecord
from ..split_dict import SplitDict
from . import dependencies

if TYPE_CHECKING:
    from .state import QueueState


@dataclass
class DedupKey:
    owner: str
    expires_at: float | None  # None: held until the owner leaves


class Dedup:
    """Which live job holds each ``uniqueKey``; the only writer of that map (the rules a
    push follows with a held key are the functions below)."""

    __slots__ = ("holders",)

    def __init__(self) -> None:
        # uniqueKey -> holder; a SplitDict, as jobs and locks are: one entry per live
        # job when every job has a uniqueKey (read-only outside this class)
        self.holders: SplitDict[str, DedupKey] = SplitDict()

    def get(self, unique_key: str) -> DedupKey | None:
        return self.holders.get(unique_key)

    def claim(self, unique_key: str, job: JobRecord) -> None:
        """``job`` holds ``unique_key`` now, until its ``dedup_expires_at``."""
        self.holders[unique_key] = DedupKey(job.id, job.dedup_expires_at)

    def release(self, job: JobRecord) -> None:
        """The job leaves: its key goes with it, if it still holds it."""
        if job.unique_key is not None:
            holder = self.holders.get(job.unique_key)
            if holder is not None and holder.owner == job.id:
                del self.holders[job.unique_key]

    def drop(self, unique_key: str) -> None:
        del self.holders[unique_key]

    def extend(self, holder: DedupKey, expires_at: float) -> None:
        holder.expires_at = expires_at

    def compact(self) -> tuple[int, int]:
        """Give back the map's unused room; (bytes before, bytes after)."""
        before = sys.getsizeof(self.holders)
        self.holders.compact()
        return before, sys.getsizeof(self.holders)

    def __len__(self) -> int:
        return len(self.holders)


def release_dedup_key(q: QueueState, unique_key: str, now: int,
                      owner_id: str | None = None) -> bool:
    """Release a live key (``RemoveDeduplicationKey``; with ``owner_id``, only if that
    job holds it: ``RemoveJobDeduplicationKey``); whether one was released.

    The holder goes on as it is, but no longer owns the key, across a restart too
    (``dedup_lost``, written with it): the next push with the key is admitted. A key
    past its TTL is dropped on the way, and counts as none.
    """
    holder = q.dedup.get(unique_key)
    if holder is None or (owner_id is not None and holder.owner != owner_id):
        return False
    q.dedup.drop(unique_key)
    owner = q.jobs.get(holder.owner)
    if owner is None or (holder.expires_at is not None and holder.expires_at <= now):
        return False
    owner.dedup_lost = True
    q.persist(owner)
    return True


def dedup_owner(q: QueueState, unique_key: str, now: int) -> str | None:
    """The live job that holds ``unique_key`` (None once it expired or left)."""
    holder = q.dedup.get(unique_key)
    if holder is None or (holder.expires_at is not None and holder.expires_at <= now):
        return None
    return holder.owner if holder.owner in q.jobs else None


def dedup_admit(q: QueueState, spec: dict[str, Any], unique_key: str,
                 now: int) -> tuple[str | None, JobRecord | None]:
    """A push names a held key: ``(holder id, None)`` answers the push with the holder
    (plain dedup, or an extended TTL); ``(None, job)`` replaces that queued job;
    ``(None, None)`` admits the push (no live holder, or one that has started)."""
    holder = q.dedup.get(unique_key)
    owner = None
    if holder is not None and (holder.expires_at is None or holder.expires_at > now):
        owner = q.jobs.get(holder.owner)
    if owner is None or holder is None:
        return None, None
    if spec.get("deduplication_replace"):
        if owner.state not in (QUEUED, WAITING_CHILDREN):
            return None, None
        if q.index.has_dependents(owner.id):
            raise Refused(f"Cannot replace deduplicated job {owner.id} "
                               "because live jobs depend on it")
        return None, owner
    if spec.get("deduplication_extend") and spec.get("deduplication_ttl"):
        q.dedup.extend(holder, now + spec["deduplication_ttl"])
        owner.dedup_expires_at = holder.expires_at
        q.persist(owner)  # the extension must survive a restart
    q.emit("duplicated", owner.id, now)
    return owner.id, None


def dedup_claim(q: QueueState, job: JobRecord, unique_key: str, replaced: JobRecord | None,
                 now: int) -> None:
    """The admitted job takes the key (the replaced holder, if any, is dropped)."""
    if replaced is not None:
        dependencies.drop_queued(q, replaced, now)
    else:
        holder = q.dedup.get(unique_key)
        old_owner = q.jobs.get(holder.owner) if holder is not None else None
        if old_owner is not None and old_owner.id != job.id:
            # replace of an active owner: it keeps running but no longer owns the
            # key, and remembers that across a restart
            old_owner.dedup_lost = True
            q.persist(old_owner)
    ttl = job.deduplication_ttl
    job.dedup_expires_at = None if ttl is None else now + ttl
    q.dedup.claim(unique_key, job)
