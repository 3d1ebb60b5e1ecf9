"""Deduplication keys (``uniqueKey``): which live job holds a key."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..job import Job

if TYPE_CHECKING:
    from .state import QueueState


@dataclass
class DedupKey:
    owner: str
    expires_at: float | None  # None: held until the owner leaves


def _release_key(q: QueueState, job: Job) -> None:
    if job.unique_key is not None:
        holder = q.dedup.get(job.unique_key)
        if holder is not None and holder.owner == job.id:
            del q.dedup[job.unique_key]


def dedup_owner(q: QueueState, unique_key: str, now: int) -> str | None:
    """The live job that holds ``unique_key`` (None once it expired or left)."""
    holder = q.dedup.get(unique_key)
    if holder is None or (holder.expires_at is not None and holder.expires_at <= now):
        return None
    return holder.owner if holder.owner in q.jobs else None

