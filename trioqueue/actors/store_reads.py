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

from ..core.large_values.slicing import SLICE_S
from ..core.large_values.young_collections import collect_young
from ..core.queue import QueueState
from ..core.queue.finished import OUTCOMES, FinishedView, NeedData, Read
from ..storage.keys import decode_value
from ..storage.port import Storage
from ..storage.reads import fetch
from ..storage.value_pieces import Packed, PackedRecords, unpacked_steps
from .ports import Committer

#: A listing's record at least this long is decoded a slice at a time (a shorter one
#: in one call, a pause possible between two).
SLICED_RECORD_MIN_BYTES: Final = 16 * 1024
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
        if any(map(_undecoded, need.reads, answers)):
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
        storage = self._storage
        read_here = answers is None  # (else read on the spot: only Packed data let go)
        pace = _Pace()
        if answers is not None:
            self._fetched = None
        else:
            # (a record's large data comes encoded: decoded in the worker thread, it
            # held the interpreter lock, and so the event loop, for all of it)
            name = self.name
            answers = await self._committer.read_committed(
                lambda: [fetch(storage, name, read, packed=True) for read in need.reads])
        for index, answer in enumerate(answers):
            kind = type(answer)
            if need.reads[index][0] == OUTCOMES:
                await self._unpacked_outcomes(answer)
            elif kind is dict and "data" in answer:
                await self._unpacked(answer, read_here)
            elif kind is tuple and len(answer) == 2 and answer[0] is True:
                # a result read back (GetResult): its row is V({"r": result})
                result = answer[1]
                if type(result) is Packed:
                    answers[index] = (True, result := (await _decoded(result))["r"])
                elif not read_here:
                    continue
                storage.let_go(result)  # (freed in slices when done with)
            elif kind is PackedRecords or kind is list:  # (a page of finished records)
                answers[index] = await self._decoded_page(answer, pace)
        self._need = None
        for read, answer in zip(need.reads, answers, strict=True):
            self._view.supply(read, answer)

    async def _decoded_page(self, page: list[Any] | PackedRecords, pace: _Pace
                            ) -> list[Any]:
        """A page of finished records (a listing's), read undecoded as
        :class:`PackedRecords` (LMDB) or as records whose data may be :class:`Packed`
        (PostgreSQL, or data kept apart), decoded a slice at a time; every record's data
        of a list or map is let go of to the store (held by the view and the reply for
        now: freed in slices after)."""
        records: list[Any]
        if isinstance(page, PackedRecords):
            records = []
            for raw in page.raws:
                if len(raw) < SLICED_RECORD_MIN_BYTES:
                    record = decode_value(raw)
                    await pace.check()
                else:
                    record = await _decoded(Packed(raw))
                records.append(page.put_back(record))
        else:
            records = page
        for record in records:
            if type(record) is not dict or "data" not in record:
                continue
            if type(packed := record["data"]) is Packed:
                record["data"] = (await _decoded(packed))["d"]
            elif type(record["data"]) not in _CONTAINERS:
                continue
            self._storage.let_go(record["data"])
            await pace.check()
        return records

    async def _unpacked(self, record: dict[str, Any], let_go: bool) -> None:
        """``record``'s data decoded a slice at a time when it came encoded, and let go
        of (held by the view and the reply for now: freed in slices after) when it was,
        or when ``let_go`` says so."""
        data = record["data"]
        if type(data) is Packed:
            record["data"] = data = (await _decoded(data))["d"]
        elif not let_go:
            return
        self._storage.let_go(data)

    async def _unpacked_outcomes(self, outcomes: dict[str, Any]) -> None:
        """A parent's outcome rows that came encoded (a child's result of many values)
        decoded a slice at a time, and let go of (freed in slices once done with)."""
        for child, outcome in outcomes.items():
            if type(outcome) is Packed:
                outcomes[child] = decoded = await _decoded(outcome)
                self._storage.let_go(decoded)

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



def _undecoded(read: Read, answer: Any) -> bool:
    """Whether a read's answer holds a row left undecoded (a record's data, a result:
    ``(True, Packed)``, a parent's outcome rows, or a listing's page: its records, or
    their data)."""
    if read[0] == OUTCOMES:
        return any(type(outcome) is Packed for outcome in answer.values())
    kind = type(answer)
    if kind is PackedRecords:
        return True
    if kind is dict:
        return type(answer.get("data")) is Packed
    if kind is list:
        return any(type(record) is dict and type(record.get("data")) is Packed
                   for record in answer)
    return kind is tuple and len(answer) == 2 and type(answer[1]) is Packed


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
