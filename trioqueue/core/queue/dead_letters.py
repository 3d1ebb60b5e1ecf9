"""What a queue knows of its dead-letter entries without reading storage.

A dead-lettered job is a finished record (state ``failed``) in storage, with its DLQ
entry in ``record["dlq"]``. The rules of the DLQ (FIFO eviction past ``maxEntries``,
expiry past ``maxAge``, auto-retry with backoff, filters and stats) need the entries'
order, reasons and retry counts at every bury and every timer tick, where the core may
not read storage. So each queue keeps a small index of them in memory: a
:class:`Mark` per entry (about 200 bytes), rebuilt from the stored records at startup
(:func:`trioqueue.core.recovery.rebuild`). Memory rather than a storage index because
the DLQ is bounded by ``maxEntries`` (10,000 by default), the marks are tiny next to the
records, and the timer reads them on the trio thread every tick, where a store read is
not allowed; the price is a walk of the failed records at startup.

Every question is O(log n) or O(1): :class:`EntryOrder` keeps the entries by
``(enteredAt, arrival)`` in chunks (the oldest, a cursor, a count of those older than
an instant), and the auto-retry order is one FIFO per retry count: an entry retried
``n`` times is due ``interval * 2^n`` after it entered, so within one count the oldest
is due first whatever the interval is set to, and the next due entry is the first of
at most ``maxAutoRetries`` FIFOs.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator
from dataclasses import dataclass

from ..chained_order import ChainedOrder
from ..split_dict import SplitDict
from .dlq_config import DlqConfig

Key = tuple[int, int, str]  # (enteredAt, arrival number, job id)
CHUNK = 512  # keys per chunk of EntryOrder: a removal moves at most this many


def _last(chunk: list[Key]) -> Key:
    return chunk[-1]


class EntryOrder:
    """Keys in order, in chunks of about ``CHUNK`` (a sorted list that never moves more
    than a chunk, nor copies more than the list of chunks, on a change)."""

    __slots__ = ("_chunks", "_len")

    def __init__(self) -> None:
        self._chunks: list[list[Key]] = []
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def add(self, key: Key) -> None:
        chunks = self._chunks
        self._len += 1
        if not chunks or key > chunks[-1][-1]:  # the usual case: newer than all
            if not chunks or len(chunks[-1]) >= CHUNK:
                chunks.append([key])
            else:
                chunks[-1].append(key)
            return
        i = bisect_left(chunks, key, key=_last)
        chunk = chunks[i]
        insort(chunk, key)
        if len(chunk) > 2 * CHUNK:
            chunks[i:i + 1] = [chunk[:CHUNK], chunk[CHUNK:]]

    def remove(self, key: Key) -> bool:
        chunks = self._chunks
        i = bisect_left(chunks, key, key=_last)
        if i == len(chunks):
            return False
        chunk = chunks[i]
        j = bisect_left(chunk, key)
        if j == len(chunk) or chunk[j] != key:
            return False
        del chunk[j]
        if not chunk:
            del chunks[i]
        self._len -= 1
        return True

    def first(self) -> Key | None:
        return self._chunks[0][0] if self._chunks else None

    def last(self) -> Key | None:
        return self._chunks[-1][-1] if self._chunks else None

    def after(self, cursor: Key | None) -> Iterator[Key]:
        """Keys past ``cursor`` (all with None), oldest first. Nothing may be added or
        removed while the iterator is in use; take a page, then change."""
        chunks = self._chunks
        if cursor is None:
            i, j = 0, 0
        else:
            i = bisect_right(chunks, cursor, key=_last)
            j = bisect_right(chunks[i], cursor) if i < len(chunks) else 0
        for chunk in chunks[i:i + 1]:
            yield from chunk[j:]
        for chunk in chunks[i + 1:]:
            yield from chunk

    def count_before(self, key: Key) -> int:
        """How many keys sort before ``key`` (O(chunks), a sum in C)."""
        chunks = self._chunks
        i = bisect_left(chunks, key, key=_last)
        inside = bisect_left(chunks[i], key) if i < len(chunks) else 0
        return sum(map(len, chunks[:i])) + inside


@dataclass(slots=True)
class Mark:
    """One entry as the index keeps it."""

    key: Key
    reason: str
    retry_count: int  # auto-retries before this entry (carried by the revived job)
    retry_base: int  # its next auto-retry counts from here (entered, or a skipped try)

    @property
    def job_id(self) -> str:
        return self.key[2]

    @property
    def entered_at(self) -> int:
        return self.key[0]


class DeadLetters:
    """The marks of one queue's DLQ entries: by id, in entry order, per retry count."""

    __slots__ = ("marks", "order", "by_retries", "by_reason", "_arrivals",
                 "retries_held_until")

    def __init__(self) -> None:
        self.marks: SplitDict[str, Mark] = SplitDict()  # never copied whole as it grows
        self.order = EntryOrder()
        self.by_retries: dict[int, ChainedOrder[None]] = {}
        self.by_reason: dict[str, int] = {}
        self._arrivals = 0
        # No auto-retry runs before this (ms): the store had no room for the last one,
        # so the timer waits a while rather than asking again at every step.
        self.retries_held_until = 0

    def __len__(self) -> int:
        return len(self.marks)

    def add(self, job_id: str, entered_at: int, reason: str, retry_count: int) -> Mark:
        self.discard(job_id)
        self._arrivals += 1
        mark = Mark((int(entered_at), self._arrivals, job_id), reason, retry_count,
                    int(entered_at))
        self.marks[job_id] = mark
        self.order.add(mark.key)
        fifo = self.by_retries.get(retry_count)
        if fifo is None:
            fifo = self.by_retries[retry_count] = ChainedOrder()
        fifo[job_id] = None
        self.by_reason[reason] = self.by_reason.get(reason, 0) + 1
        return mark

    def discard(self, job_id: str) -> Mark | None:
        mark = self.marks.pop(job_id, None)
        if mark is None:
            return None
        self.order.remove(mark.key)
        fifo = self.by_retries[mark.retry_count]
        del fifo[job_id]
        if not fifo:
            del self.by_retries[mark.retry_count]
        left = self.by_reason[mark.reason] - 1
        if left:
            self.by_reason[mark.reason] = left
        else:
            del self.by_reason[mark.reason]
        return mark

    def clear(self) -> None:
        self.marks.clear()
        self.order = EntryOrder()
        self.by_retries.clear()
        self.by_reason.clear()

    def oldest(self) -> Mark | None:
        key = self.order.first()
        return None if key is None else self.marks[key[2]]

    def newest(self) -> Mark | None:
        key = self.order.last()
        return None if key is None else self.marks[key[2]]

    def in_order(self, after: Key | None = None) -> Iterator[Mark]:
        """Marks oldest first, past ``after`` (see :meth:`EntryOrder.after`)."""
        marks = self.marks
        for key in self.order.after(after):
            yield marks[key[2]]

    # --- auto-retry

    def next_retry_at(self, mark: Mark, config: DlqConfig) -> int | None:
        if not config.auto_retry or mark.retry_count >= config.max_auto_retries:
            return None
        return mark.retry_base + config.retry_delay(mark.retry_count)

    def first_retry(self, config: DlqConfig) -> tuple[int, Mark] | None:
        """The entry whose auto-retry is due first, with when (None: none will be);
        never before :attr:`retries_held_until`."""
        if not config.auto_retry:
            return None
        best: tuple[int, Mark] | None = None
        for count, fifo in self.by_retries.items():
            if count >= config.max_auto_retries:
                continue
            mark = self.marks[fifo.first()[0]]
            at = max(mark.retry_base + config.retry_delay(count), self.retries_held_until)
            if best is None or at < best[0]:
                best = (at, mark)
        return best

    def postpone(self, mark: Mark, now: int) -> None:
        """A due auto-retry that could not run (its id or key is held): the next try
        counts from now, so the timer does not spin on it."""
        mark.retry_base = now
        self.by_retries[mark.retry_count].move_to_end(mark.job_id)

    def pending_retry(self, config: DlqConfig) -> int:
        if not config.auto_retry:
            return 0
        return sum(len(fifo) for count, fifo in self.by_retries.items()
                   if count < config.max_auto_retries)

    # --- expiry

    def expired_count(self, now: int, config: DlqConfig) -> int:
        """Entries past ``maxAge`` not yet removed (the timer removes them a slice at
        a time)."""
        if config.max_age is None:
            return 0
        return self.order.count_before((now - config.max_age + 1, -1, ""))

    def next_wakeup(self, config: DlqConfig) -> int | None:
        """When the queue's timer has DLQ work: at once while over ``maxEntries``, else
        the oldest entry's expiry or the first auto-retry, whichever comes first."""
        if not self.marks:
            return None
        if len(self.marks) > config.max_entries:
            return 0
        best: int | None = None
        oldest = self.oldest()
        if config.max_age is not None and oldest is not None:
            best = oldest.entered_at + config.max_age
        first = self.first_retry(config)
        if first is not None and (best is None or first[0] < best):
            best = first[0]
        return best
