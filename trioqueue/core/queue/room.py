"""Room in the store for new live jobs, as the queue core sees it.

The store belongs to the I/O shell, which decides (actors/admission.py) whether a job
more still fits beside what the jobs already accepted may write; the core only asks,
at the one point each rule creates a live job, before it changes anything: a push
(through ``Ctx.storage_full``, asked by the actor for the commands that declare
``admits``), a revived dead-lettered or completed job (:func:`refuse_unless_room`,
from ``moves.revive``) and a repeat job's successor (asked before the ACK).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ..errors import STORAGE_FULL, Refused

if TYPE_CHECKING:
    from .state import QueueState


class Room(Protocol):
    def refuses(self, frame_bytes: int | None, jobs: int = 1,
                request: object = None) -> bool:
        """True when ``jobs`` more live jobs (made from a ``frame_bytes`` frame, None
        when they come from records already stored) do not fit; otherwise they are
        counted as taken."""
        ...


class _Unlimited:
    """A store with no maximum: every job fits."""

    __slots__ = ()

    def refuses(self, frame_bytes: int | None, jobs: int = 1,
                request: object = None) -> bool:
        return False


UNLIMITED: Room = _Unlimited()


# A job made live from a record the store already holds (a revival, a successor
# copied from its generation) is charged as the smallest push's frame: its record
# takes about what it took already, but it claims the same room to be finished, and a
# store that refuses the smallest push must refuse it too.
STORED_JOB_FRAME_BYTES = 64


def refuse_unless_room(q: QueueState, jobs: int = 1) -> None:
    """Refuse (retriably) a rule about to make ``jobs`` live jobs of records the store
    already holds, unless they fit."""
    if q.room.refuses(STORED_JOB_FRAME_BYTES * jobs, jobs):
        raise Refused(STORAGE_FULL)
