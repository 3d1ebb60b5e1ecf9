"""The I/O shell's answers to the core's reads of finished jobs.

The core asks for reads (:mod:`trioqueue.core.queue.finished`) and never touches the
store; whoever drives it (the queue actor, recovery, the test harness) answers each
read here, from the :class:`~trioqueue.storage.port.Storage` port.
"""

from __future__ import annotations

from typing import Any

from ..core.queue.finished import (
    COUNT,
    GET,
    IDS,
    LIST,
    OUTCOMES,
    RANKS,
    RESULT,
    FinishedView,
    Read,
)
from .port import Storage


def fetch(storage: Storage, queue: str, read: Read, packed: bool = False) -> Any:
    """The answer to one read, for the queue ``queue`` (blocks for a blocking store:
    run it off the trio thread there). ``packed``: a record's large data may come as
    :class:`~.value_pieces.Packed`, and a listing's page as
    :class:`~.value_pieces.PackedRecords`, for the caller to decode (see
    :meth:`~.port.Storage.get_finished_packed`, ``list_finished_packed``)."""
    kind = read[0]
    args: tuple[Any, ...] = read[1:]
    arg: Any = args[0] if args else None
    if kind == GET:
        return storage.get_finished_packed(arg) if packed else storage.get_finished(arg)
    if kind == RESULT:
        return storage.get_result_packed(arg) if packed else storage.get_result(arg)
    if kind == OUTCOMES:
        return storage.dep_outcomes_packed(arg) if packed else storage.dep_outcomes(arg)
    if kind == COUNT:
        return storage.count_finished(queue, arg)
    if kind == LIST:
        state, asc, offset, limit = args
        listed = storage.list_finished_packed if packed else storage.list_finished
        return listed(queue, state, asc=asc, offset=offset, limit=limit)
    if kind == RANKS:
        state, positions, others = args
        return storage.finished_ranks(queue, state, positions, others)
    if kind == IDS:
        state, after, limit = args
        return tuple(storage.finished_ids_page(queue, state, after=after, limit=limit))
    raise ValueError(f"unknown read {read!r}")


def direct_view(storage: Storage, queue: str) -> FinishedView:
    """A view that fetches each read from ``storage`` when it is made: for a driver that
    runs the core synchronously and keeps the store current between calls (recovery,
    the test harness)."""
    return FinishedView(queue, fallback=lambda read: fetch(storage, queue, read))
