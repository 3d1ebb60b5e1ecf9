"""Storage that fails on purpose, for fault tests (yours too).

:class:`FaultyStorage` wraps any :class:`~trioqueue.storage.port.Storage` and can:

- fail the Nth commit (``fail_commit_at=N``, 1-based) or the Nth fsync
  (``fail_sync_at``) with an ``OSError``, as a dying disk would: the broker must stop
  acknowledging and exit, and a restart must lose nothing it acknowledged;
- be full (``full = True``): every commit raises
  :class:`~trioqueue.storage.port.StorageFullError` with nothing applied;
- be slow (``commit_delay_s``): each commit blocks that long first, as a saturated
  disk would (it blocks the broker's thread, which is what a slow synchronous commit
  does), unless ``apply_blocks=True`` says so to the writer, which then commits in a
  worker thread (:attr:`~trioqueue.storage.port.Storage.apply_blocks`, as a network
  store would declare). By default the wrapper declares what the wrapped store does.

Counters (``commits``, ``syncs``) say how far a run got.

:func:`step_wall_clock` steps the wall clock (``time.time``) of this process, as NTP or
an administrator would; :class:`~trioqueue.actors.clock.TrioClock` with
``wall_offset_ms`` starts a broker as if the wall clock had stepped before it started.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..core.writes import Writes
from ..storage.port import FinishedCursor, FinishedPage, Recovered, Storage, StorageFullError


class InjectedFault(OSError):
    """The failure a FaultyStorage was told to raise."""


class FaultyStorage(Storage):
    def __init__(self, inner: Storage, *, fail_commit_at: int | None = None,
                 fail_sync_at: int | None = None, commit_delay_s: float = 0.0,
                 apply_blocks: bool | None = None) -> None:
        self.inner = inner
        self.apply_blocks = inner.apply_blocks if apply_blocks is None else apply_blocks
        self.fail_commit_at = fail_commit_at
        self.fail_sync_at = fail_sync_at
        self.commit_delay_s = commit_delay_s
        self.full = False
        self.commits = 0
        self.syncs = 0

    def apply(self, batches: Sequence[Writes]) -> None:
        if not any(batches):
            return
        self.commits += 1
        if self.commit_delay_s:
            time.sleep(self.commit_delay_s)
        if self.fail_commit_at is not None and self.commits >= self.fail_commit_at:
            raise InjectedFault(f"injected failure of commit {self.commits}")
        if self.full:
            raise StorageFullError("injected: the store is full")
        self.inner.apply(batches)

    def sync(self) -> None:
        self.syncs += 1
        if self.fail_sync_at is not None and self.syncs >= self.fail_sync_at:
            raise InjectedFault(f"injected failure of fsync {self.syncs}")
        self.inner.sync()

    # Reads and the rest go straight through.

    def load(self) -> Recovered:
        return self.inner.load()

    def get_finished(self, job_id: str) -> dict[str, Any] | None:
        return self.inner.get_finished(job_id)

    def get_result(self, job_id: str) -> tuple[bool, Any]:
        return self.inner.get_result(job_id)

    def list_finished(self, queue: str, state: str, *, asc: bool, offset: int,
                      limit: int) -> list[dict[str, Any]]:
        return self.inner.list_finished(queue, state, asc=asc, offset=offset, limit=limit)

    def count_finished(self, queue: str, state: str) -> int:
        return self.inner.count_finished(queue, state)

    def iter_finished_ids(self, queue: str, state: str) -> Iterator[str]:
        return self.inner.iter_finished_ids(queue, state)

    def finished_ids_page(self, queue: str, state: str, *, after: FinishedCursor | None,
                          limit: int) -> FinishedPage:
        return self.inner.finished_ids_page(queue, state, after=after, limit=limit)

    def finished_ranks(self, queue: str, state: str, positions: Sequence[int],
                       others: Sequence[str]) -> list[tuple[int, str, tuple[int, ...]]]:
        return self.inner.finished_ranks(queue, state, positions, others)

    def dep_outcomes(self, parent_id: str) -> dict[str, dict[str, Any]]:
        return self.inner.dep_outcomes(parent_id)

    @property
    def max_bytes(self) -> int | None:
        return self.inner.max_bytes

    def used_bytes(self) -> int:
        return self.inner.used_bytes()

    def used_bytes_bound(self) -> int:
        return self.inner.used_bytes_bound()

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:
        # Port methods added later (and adapter extras) reach the wrapped store.
        return getattr(self.inner, name)


@contextmanager
def step_wall_clock(offset_ms: float) -> Iterator[None]:
    """Within the block, ``time.time()`` is ``offset_ms`` away from the real wall clock."""
    real = time.time
    time.time = lambda: real() + offset_ms / 1000.0
    try:
        yield
    finally:
        time.time = real
