"""The live jobs of one place, in listing order: ``(createdAt, id)``, paged in O(page).

GetJobs lists jobs ordered by ``(createdAt, id)`` before its offset and limit. Sorting a
queue's jobs per call costs O(n log n) (a second at a million jobs) and walking to an
offset O(offset), so each listable place (waiting, prioritized, delayed, active,
waiting-children) keeps a :class:`CreationOrder`.

The structure is a two-level bucket tree over the creation time, chosen so that the hot
path pays three dict operations per add or remove and nothing else:

- every job sits in the group of its exact creation millisecond (a dict of ids, whose
  length is the group's count, for free);
- the milliseconds present are kept, sorted, per *span* of ``2**SPAN_BITS`` ms (16 s),
  with a count of jobs per span (the one counter the hot path updates);
- the spans present are kept sorted.

A page at offset ``k`` sums span counts until the span holding ``k``, then millisecond
group sizes inside it, then sorts the ids of the one or two groups the page touches. A
million jobs pushed in bursts span a few dozen spans; spread evenly over twelve days they
fill 65,536 spans, which a page still sums at C speed. Adding the first job of a
millisecond or span, or removing the last, costs a ``bisect`` insert into a short list.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import deque
from collections.abc import Iterator, Sequence

SPAN_BITS = 14  # 16,384 ms per span
EMPTY_SLACK = 1024  # empty groups kept before the oldest emptied are dropped
DROP_PER_CALL = 4  # emptied groups a removal drops at most: no removal walks the order


class CreationOrder:
    __slots__ = ("_groups", "_spans", "_span_n", "_span_ms", "size", "_empties")

    def __init__(self) -> None:
        # span key -> createdAt ms -> ids. Per span: jobs pushed over hours have a group
        # per millisecond, a million of them, and one dict that size copies itself whole
        # as it grows (32 ms at a million int keys here); a span's holds at most 16,384.
        self._groups: dict[int, dict[int, dict[str, None]]] = {}
        self._spans: list[int] = []  # span keys present, sorted
        self._span_n: dict[int, int] = {}  # span key -> jobs in it
        self._span_ms: dict[int, list[int]] = {}  # span key -> ms present, sorted
        self.size = 0
        # The milliseconds whose group was left empty, oldest first: kept (a worker
        # taking and finishing jobs of one millisecond would otherwise build and drop
        # the same group per job) until more than EMPTY_SLACK, then the oldest are
        # dropped, DROP_PER_CALL at a time (one filled again meanwhile is skipped).
        self._empties: deque[int] = deque()

    def __len__(self) -> int:
        return self.size

    def add(self, created_at: int, job_id: str) -> None:
        # (_group written out here and in discard: once per job pushed and pulled)
        by_ms = self._groups.get(created_at >> SPAN_BITS)
        group = None if by_ms is None else by_ms.get(created_at)
        if group is None:
            group = self._new_group(created_at)
        group[job_id] = None
        # a group's span is counted from the group's making on (see _new_group)
        self._span_n[created_at >> SPAN_BITS] += 1
        self.size += 1

    def _new_group(self, created_at: int) -> dict[str, None]:
        """The group of a millisecond not present yet, with its span made present (and
        counted, from 0) if it was not: the hot path then only adds to the counts."""
        group: dict[str, None] = {}
        span = created_at >> SPAN_BITS
        present = self._span_ms.get(span)
        if present is None:
            self._span_ms[span] = [created_at]
            self._span_n[span] = 0
            self._groups[span] = {created_at: group}
            insort(self._spans, span)
        else:
            insort(present, created_at)
            self._groups[span][created_at] = group
        return group

    def _group(self, ms: int) -> dict[str, None] | None:
        by_ms = self._groups.get(ms >> SPAN_BITS)
        return None if by_ms is None else by_ms.get(ms)

    def holds(self, created_at: int, job_id: str) -> bool:
        group = self._group(created_at)
        return group is not None and job_id in group

    def discard(self, created_at: int, job_id: str) -> None:
        by_ms = self._groups.get(created_at >> SPAN_BITS)
        group = None if by_ms is None else by_ms.get(created_at)
        if group is None or job_id not in group:
            return
        del group[job_id]
        self.size -= 1
        span = created_at >> SPAN_BITS
        self._span_n[span] -= 1
        if not group:
            empties = self._empties
            empties.append(created_at)
            if len(empties) > EMPTY_SLACK:
                self._drop_empty()

    def _drop_empty(self) -> None:
        empties = self._empties
        for _ in range(DROP_PER_CALL):
            if len(empties) <= EMPTY_SLACK:
                break
            ms = empties.popleft()
            span = ms >> SPAN_BITS
            by_ms = self._groups.get(span)
            if by_ms is None or by_ms.get(ms, True):
                continue  # dropped already, or filled again
            del by_ms[ms]
            present = self._span_ms[span]
            del present[bisect_left(present, ms)]
            if not present:
                del self._groups[span]
                del self._span_ms[span]
                del self._span_n[span]
                del self._spans[bisect_left(self._spans, span)]

    def ids(self) -> Iterator[str]:
        """Every id in ascending order."""
        for group in self.groups():
            yield from sorted(group)

    def groups(self) -> Iterator[dict[str, None]]:
        """The non-empty millisecond groups in ascending order, each a live dict: a walk
        that removes jobs as it goes (the spans and milliseconds to visit are copied as
        it reaches them, and a group dropped meanwhile is skipped)."""
        for span in list(self._spans):
            for ms in list(self._span_ms.get(span, ())):
                group = self._group(ms)
                if group:
                    yield group


def page(orders: Sequence[CreationOrder], *, asc: bool, offset: int,
         limit: int) -> list[tuple[int, str]]:
    """``(createdAt, id)`` of the jobs at ``offset .. offset+limit`` of the merged order of
    ``orders`` (disjoint places, e.g. waiting and prioritized for a paused listing),
    ascending or descending; O(spans + ms in one span + page)."""
    total = sum(o.size for o in orders)
    if limit <= 0 or offset >= total:
        return []
    # A descending page is the mirrored ascending range, reversed at the end.
    start = offset if asc else max(total - offset - limit, 0)
    stop = min(offset + limit, total) if asc else total - offset
    out: list[tuple[int, str]] = []
    seen = 0
    for span in _merged(o._spans for o in orders):
        n = sum(o._span_n.get(span, 0) for o in orders)
        if seen + n <= start:
            seen += n
            continue
        for ms in _merged(o._span_ms.get(span, ()) for o in orders):
            groups = [g for o in orders if (g := o._group(ms))]
            size = sum(map(len, groups))
            if seen + size <= start:
                seen += size
                continue
            ids = sorted(i for g in groups for i in g)
            lo = max(start - seen, 0)
            hi = min(stop - seen, size)
            out.extend((ms, job_id) for job_id in ids[lo:hi])
            seen += size
            if seen >= stop:
                return out if asc else out[::-1]
    return out if asc else out[::-1]


def ranks(orders: Sequence[CreationOrder], keys: Sequence[tuple[int, str]]) -> list[int]:
    """For each ``(createdAt, id)`` of ``keys`` (ascending), how many jobs of ``orders``
    come before it in the merged order of :func:`page` (a key need not be held).

    One sweep for all the keys: O(spans + ms in the spans they fall in + the sizes of
    the groups they fall in), the cost of :func:`page`; a millisecond's ids are sorted
    once however many keys fall in it.
    """
    out: list[int] = []
    spans = _merged(o._spans for o in orders)
    si, seen = 0, 0  # jobs in spans[:si]
    here = -1  # the span whose milliseconds are in ms_list, with cumulative sizes
    ms_list: list[int] = []
    sizes_before: list[int] = []
    sorted_group: tuple[int, list[str]] = (0, [])
    for created, job_id in keys:
        span = created >> SPAN_BITS
        while si < len(spans) and spans[si] < span:
            seen += sum(o._span_n.get(spans[si], 0) for o in orders)
            si += 1
        n = seen
        if si < len(spans) and spans[si] == span:
            if here != span:
                here = span
                ms_list = _merged(o._span_ms.get(span, ()) for o in orders)
                sizes_before = [0]
                for ms in ms_list:
                    sizes_before.append(sizes_before[-1] + sum(
                        len(g) for o in orders if (g := o._group(ms)) is not None))
            j = bisect_left(ms_list, created)
            n += sizes_before[j]
            if j < len(ms_list) and ms_list[j] == created:
                if sorted_group[0] != created or not sorted_group[1]:
                    sorted_group = (created, sorted(
                        i for o in orders if (g := o._group(created)) for i in g))
                n += bisect_left(sorted_group[1], job_id)
        out.append(n)
    return out


def walk(orders: Sequence[CreationOrder]) -> Iterator[tuple[int, list[str]]]:
    """``(createdAt, ids)`` of each millisecond held in any of ``orders``, ascending,
    ids sorted: the merged order of :func:`page`, in one walk for work that goes
    through it a slice at a time and removes jobs as it goes (Clean). The spans are
    copied once at the start, a span's milliseconds when the walk reaches it, and a
    millisecond's ids as it is taken, so removals under the walk are safe; a group
    emptied meanwhile is skipped."""
    for span in _merged(o._spans for o in orders):
        for ms in _merged(o._span_ms.get(span, ()) for o in orders):
            ids = sorted(i for o in orders if (g := o._group(ms)) for i in g)
            if ids:
                yield ms, ids


def _merged(sorted_lists: Iterator[Sequence[int]] | Iterator[list[int]]) -> list[int]:
    lists = [s for s in sorted_lists if s]
    if len(lists) == 1:
        return list(lists[0])
    return sorted(set().union(*lists))


class Places:
    """One :class:`CreationOrder` per listable place of a queue, kept by
    :func:`~trioqueue.core.queue.lifecycle.count` as jobs enter and leave."""

    __slots__ = ("waiting", "prioritized", "delayed", "active", "waiting_children")

    def __init__(self) -> None:
        self.waiting = CreationOrder()
        self.prioritized = CreationOrder()
        self.delayed = CreationOrder()
        self.active = CreationOrder()
        self.waiting_children = CreationOrder()

    def of(self, visible_state: str) -> CreationOrder:
        """The order of a client-visible live state (``waiting-children`` spelled as on
        the wire)."""
        return getattr(self, visible_state.replace("-", "_"))  # type: ignore[no-any-return]
