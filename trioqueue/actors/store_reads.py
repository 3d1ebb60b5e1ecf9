"""How a queue actor answers the core's reads of finished jobs from the store.

The core never reads storage: a command that needs finished jobs, results or outcome
rows returns a :class:`~trioqueue.core.queue.finished.NeedData`, and the actor answers
it and runs the command again. For a store that answers in microseconds (LMDB, memory)
that happens on the spot, after an explicit commit; for a store whose calls block
(PostgreSQL) the actor's own task commits (awaited, in the writer's hop) and reads in a
worker thread while the queue takes nothing else. A record read on the spot whose large
data comes undecoded (:class:`~trioqueue.storage.value_pieces.Packed`: a job's data of
many values) is decoded by the actor's own task too, a slice at a time, the queue
taking nothing else meanwhile. :class:`StoreReads` holds these
steps; :class:`~trioqueue.actors.queue_actor.QueueActor` is the one class built on it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

import trio

from ..core.queue import QueueState
from ..core.queue.finished import FinishedView, NeedData, Read
from ..core.young_collections import collect_young
from ..storage.keys import decode_value
from ..storage.port import Storage
from ..storage.reads import fetch
from ..storage.value_pieces import Packed, PackedRecords, unpacked_steps
from .ports import Committer

#: A listing's record at least this long is decoded a slice at a time (a shorter one
#: in one call, a pause possible between two).
SLICED_RECORD_MIN_BYTES: Final = 16 * 1024
#: Work between two pauses while a listing's records are decoded, in seconds.
SLICE_S: Final = 0.0005
_CONTAINERS: Final = frozenset({list, dict})

# Rounds of reads one command may ask for before it is taken for a bug (a PUSHB asks
# once for all its dependencies; a children query twice: the rows, then the children).
MAX_REFETCHES = 8


class StoreReads:
    """The read steps of a queue actor (the attributes are the actor's)."""

    name: str
    _committer: Committer
    _storage: Storage
    _view: FinishedView
    _need: NeedData | None
    _fetched: list[Any] | None  # answers read on the spot, holding Packed data
    _refetches: int

    def _fetch(self, need: NeedData, q: QueueState) -> None:
        """Answer the core's reads, then the command runs again (never awaits).

        The store is made current first (an explicit commit of what this broker has
        applied, not a side effect of reading), so the answers include every write a
        reply was already promised for. A command that had changed anything before
        asking broke the core's promise to read first: that is a bug, so it crashes.
        """
        self._check_unchanged(need, q)
        self._committer.commit_now()
        for read in need.reads:
            self._view.supply(read, fetch(self._storage, self.name, read))

    def _needs_data(self, need: NeedData, q: QueueState) -> bool:
        """Answer a command's reads now; True when a blocking store must be read by the
        actor's own task first (see _fetch_off_thread: the rest of the batch waits)."""
        if self._committer.off_thread:
            self._check_unchanged(need, q)
            self._need = need
            return True
        self._check_unchanged(need, q)
        self._committer.commit_now()
        storage, name = self._storage, self.name
        answers = [fetch(storage, name, read, packed=True) for read in need.reads]
        if any(map(_undecoded, answers)):
            self._need, self._fetched = need, answers
            return True  # decoded by the actor's task, a slice at a time
        for read, answer in zip(need.reads, answers, strict=True):
            self._view.supply(read, answer)
        return False

    def _check_unchanged(self, need: NeedData, q: QueueState) -> None:
        if q.writes.ops:
            raise RuntimeError(f"{need}: asked after changing the queue")
        if q.writes:  # (earlier commands' cluster rows alone: claims settled, messages
            # consumed, which the actor submits with the next job writes; now instead)
            self._committer.submit(q.take_writes())
        self._refetches += 1
        if self._refetches > MAX_REFETCHES:
            raise RuntimeError(f"{need}: still missing after {MAX_REFETCHES} rounds")

    async def _fetch_off_thread(self) -> None:
        """The reads a command asked for, from a store whose calls block: commit what
        is pending (awaited, in the writer's hop), then read in a worker thread; or the
        answers already read whose data is still encoded, decoded a slice at a time.
        The queue takes nothing else meanwhile, so the answers cannot go stale before
        the command runs again."""
        need = self._need
        assert need is not None
        answers = self._fetched
        if answers is not None:
            self._fetched = None
            pace = _Pace()
            for index, answer in enumerate(answers):
                answers[index] = await self._decoded_answer(answer, pace)
        else:
            storage, name = self._storage, self.name
            answers = await self._committer.read_committed(
                lambda: [fetch(storage, name, read) for read in need.reads])
            for answer in answers:
                if type(answer) is dict and "data" in answer:
                    storage.let_go(answer["data"])  # (freed in slices when done with)
        self._need = None
        for read, answer in zip(need.reads, answers, strict=True):
            self._view.supply(read, answer)

    async def _decoded_answer(self, answer: Any, pace: _Pace) -> Any:
        """An answer read with its records or their data undecoded, decoded a slice at
        a time; the data so decoded is let go of to the store (held by the view and the
        reply for now: freed in slices after)."""
        if type(answer) is PackedRecords:
            records = []
            for raw in answer.raws:
                if len(raw) < SLICED_RECORD_MIN_BYTES:
                    record = decode_value(raw)
                    await pace.check()
                else:
                    record = await _decoded(Packed(raw))
                records.append(answer.put_back(record))
            answer = records
        for record in answer if type(answer) is list else (answer,):
            if type(record) is not dict or "data" not in record:
                continue
            if type(packed := record["data"]) is Packed:
                record["data"] = (await _decoded(packed))["d"]
            elif type(record["data"]) not in _CONTAINERS:
                continue
            self._storage.let_go(record["data"])
            await pace.check()
        return answer

    @contextmanager
    def reading_directly(self) -> Iterator[None]:
        """While the shell itself drives the core (recovery), misses are fetched at
        once, after committing what recovery has written so far."""
        def direct(read: Read) -> Any:
            if not self._committer.off_thread:
                self._committer.commit_now()
            return fetch(self._storage, self.name, read)

        self._view.fallback = direct
        try:
            yield
        finally:
            self._view.fallback = None



def _undecoded(answer: Any) -> bool:
    """Whether a read's answer holds records or data still encoded."""
    kind = type(answer)
    if kind is PackedRecords:
        return True
    if kind is dict:
        return type(answer.get("data")) is Packed
    return kind is list and any(type(record) is dict and type(record.get("data")) is Packed
                                for record in answer)


class _Pace:
    """A pause once a slice's time has passed, for work done in many small calls."""

    __slots__ = ("_began",)

    def __init__(self) -> None:
        self._began = time.perf_counter()

    async def check(self) -> None:
        if time.perf_counter() - self._began >= SLICE_S:
            collect_young()
            await trio.lowlevel.checkpoint()
            self._began = time.perf_counter()


async def _decoded(packed: Packed) -> Any:
    """A stored row decoded a slice at a time, every other task running between two."""
    steps = unpacked_steps(packed.raw)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
        collect_young()
        await trio.lowlevel.checkpoint()
