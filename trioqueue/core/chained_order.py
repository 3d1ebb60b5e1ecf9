"""An ordered map that never copies more than a few thousand entries at once.

The stall detector keeps every active job in heartbeat order (``StallWatch``), and an
``OrderedDict`` grows as a dict does, copying itself whole, in one insert that grows
with its size, inside the step that leased the job, and every other queue waited for it.
:class:`ChainedOrder` keeps the same order in a chain of ``OrderedDict`` links of at
most ``LINK_MAX_ENTRIES`` entries each (new keys go to the last link, a new one once it
is full) and finds a key's link through a :class:`~trioqueue.core.split_dict.SplitDict`,
so no operation copies more than one link. Links emptied by removals are dropped,
wherever they are in the chain, so a job stuck at the front does not keep the emptied
links behind it.

The operations are those of ``OrderedDict`` that the detector uses, at the same O(1);
each costs one SplitDict operation more.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Generic, TypeVar, cast

from .split_dict import SplitDict

V = TypeVar("V")
D = TypeVar("D")

# A link's own growth copies at most this many entries: well under a millisecond.
LINK_MAX_ENTRIES = 8192

_MISSING = object()

class ChainedOrder(Generic[V]):
    """``str`` keys in order, each with a value; see the module docstring."""

    __slots__ = ("_links", "_where", "_tail", "_tail_no", "_next_no")

    def __init__(self) -> None:
        # Link number -> link; a dict keeps the numbers in the chain's order (links are
        # only ever added at the end, and the front link takes moves to the front).
        self._links: dict[int, OrderedDict[str, V]] = {}
        self._where: SplitDict[str, int] = SplitDict()  # key -> its link's number
        self._tail: OrderedDict[str, V] | None = None
        self._tail_no = -1
        self._next_no = 0

    def __len__(self) -> int:
        return len(self._where)

    def __bool__(self) -> bool:
        return len(self._where) > 0

    def __contains__(self, key: object) -> bool:
        return key in self._where

    def __getitem__(self, key: str) -> V:
        return self._links[self._where[key]][key]

    def __setitem__(self, key: str, value: V) -> None:
        """Set ``key``'s value; a new key goes to the end."""
        no = self._where.get(key)
        if no is not None:
            self._links[no][key] = value
            return
        tail = self._tail
        if tail is None or len(tail) >= LINK_MAX_ENTRIES:
            tail = self._new_tail()
        tail[key] = value
        self._where[key] = self._tail_no

    def _new_tail(self) -> OrderedDict[str, V]:
        tail: OrderedDict[str, V] = OrderedDict()
        self._tail, self._tail_no = tail, self._next_no
        self._links[self._next_no] = tail
        self._next_no += 1
        return tail

    def __delitem__(self, key: str) -> None:
        if self.pop(key, _MISSING) is _MISSING:
            raise KeyError(key)

    def pop(self, key: str, default: D) -> V | D:
        """Remove ``key`` and return its value, or ``default`` when it is absent."""
        no = self._where.pop(key, None)  # (per ack: written out, no helper call)
        if no is None:
            return default
        link = self._links[no]
        value = link.pop(key)
        if not link:
            self._drop(no)
        return value

    def _drop(self, no: int) -> None:
        """An emptied link leaves the chain (the tail too: the next key makes a new one)."""
        del self._links[no]
        if no == self._tail_no:
            self._tail, self._tail_no = None, -1

    def move_to_end(self, key: str, last: bool = True) -> None:
        """``key`` to the end, or with ``last=False`` to the front (KeyError if absent)."""
        no = self._where[key]
        if last:
            if no == self._tail_no:
                self._links[no].move_to_end(key)
                return
            # (per heartbeat: written out, no helper calls)
            link = self._links[no]
            value = link.pop(key)
            if not link:
                self._drop(no)
            tail = self._tail
            if tail is None or len(tail) >= LINK_MAX_ENTRIES:
                tail = self._new_tail()
            tail[key] = value
            self._where[key] = self._tail_no
            return
        first_no = next(iter(self._links))
        if no != first_no:  # into the first link (which may pass the bound: rare)
            value = cast(V, self.pop(key, _MISSING))  # (present: looked up above)
            self._links[first_no][key] = value
            self._where[key] = first_no
        self._links[first_no].move_to_end(key, last=False)

    def __iter__(self) -> Iterator[str]:
        """Keys from the front. Nothing may be added or removed meanwhile."""
        for link in self._links.values():
            yield from link

    def first(self) -> tuple[str, V]:
        """The front key and its value (KeyError when empty)."""
        for link in self._links.values():
            for item in link.items():
                return item
        raise KeyError("first(): the order is empty")

    def popitem(self, last: bool = True) -> tuple[str, V]:
        """Remove and return the last (or, ``last=False``, the first) key and value."""
        if not self._links:
            raise KeyError("popitem(): the order is empty")
        no = next(reversed(self._links)) if last else next(iter(self._links))
        link = self._links[no]
        key, value = link.popitem(last=last)
        del self._where[key]
        if not link:
            self._drop(no)
        return key, value

    def clear(self) -> None:
        self._links.clear()
        self._where.clear()
        self._tail, self._tail_no = None, -1
