"""Runs of a msgpack container's items, each decoded in one call from a window of its
bytes.

A list or map of many items is made a run at a time: a head for ``count`` items put in
front of a window of the bytes that follow, fewer items while they do not fit. A map's
entries come as an array of twice as many items (its keys and values in turn): msgpack
interns every string key of a map it makes, into the interpreter's one table of
interned strings, which then grows by resizes of its own (each one long step, as a map
of a million distinct keys is made) and keeps their slots after. Shared by a frame's
decoding (``transport/large_msgpack.py``) and a stored value's reading back
(``storage/value_pieces.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import msgpack

__all__ = ["WindowRuns"]

_packer: Final = msgpack.Packer(autoreset=True)


class WindowRuns:
    """Decodes runs of items from windows of ``window_bytes``, at most ``max_items``
    each, with decoders made by ``unpacker`` (given the window's size); ``batch``: how
    many items the next run tries, sized from the last one."""

    __slots__ = ("window_bytes", "max_items", "batch", "_unpacker")

    def __init__(self, window_bytes: int, max_items: int,
                 unpacker: Callable[[int], msgpack.Unpacker]) -> None:
        self.window_bytes = window_bytes
        self.max_items = max_items
        self.batch = max_items
        self._unpacker = unpacker

    def run(self, buf: Any, pos: int, left: int, is_map: bool) -> tuple[Any, int, int]:
        """Up to ``left`` items (a map's entries) at ``pos`` of ``buf`` decoded in one
        call, as a list (a map's: its keys and values in turn), how many, and the bytes
        they took; (None, 0, 0) when not even one fits in the window."""
        while True:
            count = min(left, self.batch)
            head = _packer.pack_array_header(2 * count if is_map else count)
            window = head + buf[pos:pos + self.window_bytes]
            unpacker = self._unpacker(len(window))
            unpacker.feed(window)
            try:
                value = unpacker.unpack()
            except (msgpack.OutOfData, ValueError):
                # ValueError: a string longer than the window is refused by its length
                # (the limit is the window's); alone, it gets the whole value's limit
                if count == 1:
                    return None, 0, 0
                self.batch = max(1, count // 2)
                continue
            used = unpacker.tell() - len(head)
            # the next run sized from this one's bytes per item, to fill about 7/8 of
            # the window (doubling instead made every other run overflow it: a parse of
            # a whole window for nothing)
            self.batch = max(1, min(self.max_items,
                                    self.window_bytes * 7 * count // (8 * used or 1)))
            return value, count, used
