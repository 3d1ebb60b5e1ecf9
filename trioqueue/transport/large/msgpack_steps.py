"""A large msgpack payload, walked so that no single call makes all of a long string.

msgpack's ``Unpacker`` is resumable but makes each string in one call, once all of it
has been fed: a long string held the loop while it was made. Here arrays and maps are
opened by this walk, at every depth, and their items decoded by msgpack in runs that
fit in ``WINDOW_BYTES`` (as :class:`~trioqueue.transport.large.frames._CborWalk` does
for CBOR: a head for ``batch`` items put in front of the next window, halved while the
items do not fit, and sized after each run from its bytes per item). An item too large
for the window is walked into if it is an array or a map; a long string or byte string
is made a piece at a time (:mod:`.long_strings`); anything else (an ext type, a short
string near a window's end) is decoded alone.

The rules are the codec's: the same ``Unpacker`` options decode every run, so what comes
out, and what is refused, is what :meth:`MsgpackCodec.decode` gives (tests/transport/
test_large_frames.py compares them).
"""

from __future__ import annotations

from typing import Any, Final, Protocol

import msgpack

from ...core.large_values.msgpack_runs import WindowRuns
from ...core.presized import entries_bound, presized_dict
from ..slicing import CHECK_EVERY, Slicer, Steps
from ..wire.codec import msgpack_unpacker
from ..wire.datamodel import MAX_DEPTH, DecodeError
from ..wire.framing import Payload
from .data_sizes import OTHER, TOP, DataWatch
from .long_strings import bytes_steps, text_steps

__all__ = ["msgpack_steps", "walked"]

#: msgpack bytes one run of items may take.
WINDOW_BYTES: Final = 16 * 1024
#: The most items one run decodes (a run doubles after each fit, up to this).
MAX_BATCH: Final = 4096
#: A string or byte string at least this long is made a piece at a time.
LONG_BYTES: Final = 64 * 1024

_MAP, _ARRAY, _STR, _BIN = 0, 1, 2, 3
# initial byte -> (kind, width of the length that follows)
_SIZED: Final = {0xDE: (_MAP, 2), 0xDF: (_MAP, 4), 0xDC: (_ARRAY, 2), 0xDD: (_ARRAY, 4),
                 0xD9: (_STR, 1), 0xDA: (_STR, 2), 0xDB: (_STR, 4),
                 0xC4: (_BIN, 1), 0xC5: (_BIN, 2), 0xC6: (_BIN, 4)}


class _MsgpackWalk:
    """One msgpack payload, walked (``pos``: where the next item starts)."""

    __slots__ = ("buf", "view", "pos", "slicer", "runs", "watch", "made")

    def __init__(self, payload: Payload, slicer: Slicer, watch: DataWatch | None,
                 made: list[Any] | None = None) -> None:
        self.buf = payload
        self.view = memoryview(payload)
        self.pos = 0
        self.slicer = slicer
        self.runs = WindowRuns(WINDOW_BYTES, MAX_BATCH, msgpack_unpacker)
        self.watch = watch  # job data refused from its item counts (data_sizes.py)
        # the containers being made, outermost first: what a refusal leaves
        self.made = made if made is not None else []

    def _sized(self) -> tuple[int, int, int] | None:
        """(kind, length or count, head size) of the item at ``pos`` if it is a map,
        an array, a string or a byte string; None for anything else."""
        initial = self.buf[self.pos]
        if 0x80 <= initial <= 0x8F:
            return _MAP, initial & 0x0F, 1
        if 0x90 <= initial <= 0x9F:
            return _ARRAY, initial & 0x0F, 1
        if 0xA0 <= initial <= 0xBF:
            return _STR, initial & 0x1F, 1
        sized = _SIZED.get(initial)
        if sized is None:
            return None
        kind, width = sized
        start = self.pos + 1
        if start + width > len(self.buf):
            raise DecodeError("invalid msgpack payload: truncated item head")
        return kind, int.from_bytes(self.buf[start:start + width], "big"), 1 + width

    def item(self, depth: int, role: int = OTHER) -> Steps[Any]:
        """The item at ``pos``; moves ``pos`` past it (``role``: what it is to the
        watch, see data_sizes.py)."""
        sized = self._sized()
        if sized is not None:
            kind, size, head = sized
            if kind in (_MAP, _ARRAY) and size:
                return (yield from self._container(kind, size, head, depth, role))
            if kind in (_STR, _BIN) and size >= LONG_BYTES:
                return (yield from self._long(kind, size, head))
        return self._alone()

    def _container(self, kind: int, left: int, head: int, depth: int, role: int
                   ) -> Steps[Any]:
        if depth > MAX_DEPTH:
            raise DecodeError(f"nesting deeper than {MAX_DEPTH}")
        watch = self.watch
        if watch is not None:
            watch.opened(role, kind == _MAP, left)  # (before any of its items is made)
        self.pos += head
        # a map sized for its count (bounded by the bytes left to hold it): it never
        # resizes as it fills, each resize a copy of every entry in one call
        out: Any = (presized_dict(entries_bound(left, len(self.buf) - self.pos))
                    if kind == _MAP else [])
        self.made.append(out)
        while left:
            run, count, used = self.runs.run(self.buf, self.pos, left, kind == _MAP)
            if count:
                self.pos += used
                if kind == _MAP:
                    # its keys and values in turn; a later entry wins, as in msgpack
                    # (so does update)
                    pairs = iter(run)  # (twice as many items as entries: even)
                    out.update(zip(pairs, pairs, strict=False))
                else:
                    out.extend(run)
                left -= count
            else:  # one item too large for the window
                if kind == _MAP:
                    key = yield from self.item(depth + 1)
                    child = OTHER if watch is None else watch.entry(role, key, out)
                    out[key] = yield from self.item(depth + 1, child)
                else:
                    child = OTHER if watch is None else watch.item(role, len(out))
                    out.append((yield from self.item(depth + 1, child)))
                left -= 1
            if self.slicer.due(CHECK_EVERY):
                yield
        self.made.pop()
        return out

    def _long(self, kind: int, size: int, head: int) -> Steps[Any]:
        start = self.pos + head
        end = start + size
        if end > len(self.buf):
            raise DecodeError("invalid msgpack payload: truncated string")
        with self.view[start:end] as part:
            if kind == _STR:
                value: Any = yield from text_steps(part, self.slicer)
            else:
                value = yield from bytes_steps(part, self.slicer)
        self.pos = end
        return value

    def _alone(self) -> Any:
        """The item at ``pos`` decoded by itself (it is not a long string)."""
        rest = len(self.buf) - self.pos
        first = min(rest, LONG_BYTES + WINDOW_BYTES)  # more than any item here but an ext
        unpacker = msgpack_unpacker(rest, first)
        unpacker.feed(self.view[self.pos:self.pos + first])
        try:
            value = unpacker.unpack()
        except msgpack.OutOfData:  # a long ext type: fed the rest
            unpacker.feed(self.view[self.pos + first:])
            value = unpacker.unpack()
        self.pos += unpacker.tell()
        return value


def msgpack_steps(payload: Payload, slicer: Slicer, watch: DataWatch | None = None,
                  made: list[Any] | None = None) -> Steps[Any]:
    """The value of a large msgpack payload, decoded as :func:`MsgpackCodec.decode`
    would, in slices; with a ``watch``, job data over its limit is refused (raising
    :class:`~trioqueue.transport.large.data_sizes.DataTooLarge`) as soon as that is certain.
    ``made``: where the containers being made are kept while open (on a failure, what
    was made so far, for the caller to free in slices)."""
    walk = _MsgpackWalk(payload, slicer, watch, made)
    return (yield from walked(walk, walk.item(1, TOP), "msgpack"))


class _Walk(Protocol):
    pos: int
    view: memoryview


def walked(walk: _Walk, top: Steps[Any], what: str) -> Steps[Any]:
    """``top``, a walk's one item, run to its end: it must be the whole payload, and any
    failure is a :class:`DecodeError` naming ``what`` (the codec); the walk's view of
    the payload is released however it ends. (The CBOR walk's too: large/frames.py.)"""
    try:
        value = yield from top
        if walk.pos != len(walk.view):
            raise DecodeError(f"invalid {what} payload: extra bytes after the item")
        return value
    except DecodeError:
        raise
    except Exception as exc:
        raise DecodeError(f"invalid {what} payload: {exc}") from exc
    finally:
        walk.view.release()
