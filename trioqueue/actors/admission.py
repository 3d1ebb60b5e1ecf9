"""Admission of new jobs near a full store: the per-batch measure and the estimate of
what an admitted command adds (see docs/durability.md, "Full storage")."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Protocol

from ..config import Config

# What one admitted command is taken to add to the store, before it is committed and
# can be measured: twice its frame (a record carries its data plus the broker's fields,
# and B-tree pages are not full) plus a fixed cost per job (key, index node, page
# slack). An estimate, so that one batch of many pushes cannot run far into the
# reserve; the reserve absorbs its error.
ADMIT_FRAME_FACTOR = 2
ADMIT_JOB_BYTES = 512


def admit_estimate(frame_bytes: int | None, jobs: int = 1) -> int:
    """The bytes the records of ``jobs`` jobs made from a ``frame_bytes`` frame may add
    (what they will need to be pulled and finished comes on top: Broker.admit_need)."""
    return ADMIT_FRAME_FACTOR * (frame_bytes or 0) + ADMIT_JOB_BYTES * jobs


def disk_limit_bytes(disk_bytes: int, config: Config) -> int:
    """The used bytes past which new jobs are refused on a disk where the store could
    take ``disk_bytes`` (its file, and what the file system can still give it): less
    the store's reserve for that size (what its own bookkeeping and the finishes of
    accepted jobs may write beyond the estimates) and the room left to other writers
    of the disk (``disk_reserve_bytes``). Negative: no new job fits."""
    return (disk_bytes - config.reserve_bytes_for(disk_bytes)
            - config.disk_reserve_bytes_for(disk_bytes))


class StoreLimit:
    """The used bytes past which new jobs are refused: the store's maximum less its
    reserve, or what its disk allows (:func:`disk_limit_bytes`), whichever is smaller.

    What the store could take on its disk does not change as the store itself grows
    (the file takes what the file system gives), only as other writers use the disk.
    So a cheap ask reuses a measure up to ``disk_measure_interval_ms`` old (two
    syscalls cost more than the rest of an admission), and an exact ask, made when the
    store may be nearly full, measures again. A store with no disk of its own (in
    memory, a database server) has its maximum alone.
    """

    __slots__ = ("max_limit_bytes", "_disk_bytes", "_config", "_now_s", "_interval_s",
                 "_disk_limit", "_measured_at")

    def __init__(self, max_limit_bytes: int, disk_bytes: Callable[[], int | None],
                 config: Config, now_s: Callable[[], float] = time.monotonic) -> None:
        self.max_limit_bytes = max_limit_bytes  # the maximum, less its reserve
        self._disk_bytes = disk_bytes
        self._config = config
        self._now_s = now_s
        self._interval_s = config.disk_measure_interval_ms / 1000
        self._disk_limit: int | None = None  # from the last measure; None: no disk
        self._measured_at = -math.inf

    def bytes(self, *, fresh: bool = False) -> int:
        """The limit now; ``fresh``: with the disk measured now, not reused."""
        now = self._now_s()
        if fresh or now - self._measured_at >= self._interval_s:
            disk = self._disk_bytes()
            self._disk_limit = None if disk is None else disk_limit_bytes(disk, self._config)
            self._measured_at = now
        if self._disk_limit is None:
            return self.max_limit_bytes
        return min(self.max_limit_bytes, self._disk_limit)


class StoreRoom(Protocol):
    def storage_room(self, *, exact: bool) -> int:
        """Bytes new jobs may still take (see Broker.storage_room)."""

    def admit_need(self, frame_bytes: int | None, jobs: int) -> int:
        """Bytes a command creating ``jobs`` jobs from a ``frame_bytes`` frame takes
        from that room: its records and what they will need to finish."""


class Admission:
    """Whether new jobs still fit, for one batch of commands (or one PUSHF).

    The store is measured once, when the batch's first job-creating command asks, and
    what the batch admits after that is counted with an estimate (:func:`admit_estimate`
    and what those jobs will need to finish), so a batch costs one measurement, not one
    per job. The first measure is the store's cheap upper bound
    (:meth:`~trioqueue.storage.port.Storage.space_bound`, one LMDB call); only when
    that bound says "maybe full" is the exact figure taken, after committing what is
    pending so the measure includes it. Refusing on the bound alone would refuse jobs
    that fit; taking the exact figure every time would cost
    every batch a read transaction and one stat per database.
    """

    __slots__ = ("_store", "_room", "_exact", "_last", "_last_refused")

    def __init__(self, store: StoreRoom) -> None:
        self._store = store
        self._room: int | None = None  # bytes new jobs may still take; < 0 when full
        self._exact = False
        # The command last asked about and the answer it got: a handler that needs a
        # stored read first (NeedData) runs again with the same request, which must
        # get the same answer, not be charged twice (it was refused at 2x its need).
        self._last: object = None
        self._last_refused = False

    def refuses(self, frame_bytes: int | None, jobs: int = 1, request: object = None) -> bool:
        """True when a command creating ``jobs`` jobs from a ``frame_bytes`` frame would
        take the store past its admission limit; otherwise its need is counted as taken.
        Asked again for the same ``request`` (not None), it answers as the first time."""
        if request is not None and request is self._last:
            return self._last_refused
        self._last = request
        self._last_refused = refused = self._charge(self._store.admit_need(frame_bytes, jobs))
        return refused

    def _charge(self, need: int) -> bool:
        if self._room is None:
            self._room = self._store.storage_room(exact=False)
        if need > self._room and not self._exact:
            self._room = self._store.storage_room(exact=True)
            self._exact = True
        if need > self._room:
            return True
        self._room -= need
        return False
