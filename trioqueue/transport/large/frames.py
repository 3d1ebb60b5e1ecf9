"""Large frames, decoded and validated in slices so that other connections are served
meanwhile.

One call of a codec library holds the event loop, and the GIL, for as long as the
frame takes: a thread would not help. Here the work of a frame of at least
``Config.large_frame_bytes`` is cut into slices of about ``slicing.SLICE_S`` each, and
the transport awaits a checkpoint between two (:func:`decode_large`):

- **msgpack**: arrays and maps are opened by :mod:`.msgpack_steps`, at every depth, and
  msgpack decodes their items in runs that fit in a window (sized so that its worst
  content, empty maps, is still one short step).
- **CBOR**: cbor2 is not resumable, so definite-length arrays and maps are opened here,
  at every depth, and cbor2 decodes their items in runs that fit in ``WINDOW_BYTES``
  (see :class:`_CborWalk`). Not cut: an indefinite-length item too large for the
  window is decoded whole (no client of ours sends them in bulk).
- **validation**: :func:`~trioqueue.transport.wire.datamodel.validated_steps`, the rules of
  the plain walk, which also bounds the JSON text of the message. With the escapable
  bytes of the payload counted on top (a slice per ``COUNT_BYTES``), that bound lets the
  core skip measuring job data that fits (``core/job_data.py``).

Job data (a ``PUSH``'s, a ``PUSHB`` job's) is refused while it is decoded when the item
counts of its arrays and maps put it over the data limit, and measured exactly in slices
where the cheaper bound cannot settle it (:mod:`.data_sizes`).

Long strings (64 KiB and more) are made a piece at a time by both walks
(:mod:`.long_strings`): an ASCII one or a byte string in slices; other text is decoded
in slices and joined in one copy.

Frames below the threshold keep the plain inline decode: these generators cost more
per value than the C decoders, which is only worth paying where a frame is large.
"""

from __future__ import annotations

import contextlib
import io
import mmap
from functools import partial
from typing import Any, Final

import cbor2
import trio

from ...core.large_values.graveyard import Graveyard
from ...core.presized import entries_bound, merge_into, presized_dict
from ..slicing import CHECK_EVERY, Slicer, Steps, run_sliced
from ..wire.codec import CBOR, MSGPACK, Codec, cbor_decoder
from ..wire.datamodel import MAX_DEPTH, DecodeError, validated_steps
from ..wire.framing import Payload
from .data_sizes import OTHER, TOP, DataWatch, data_bound_steps
from .long_strings import bytes_steps, text_steps
from .msgpack_steps import LONG_BYTES, msgpack_steps, walked

__all__ = ["COUNT_BYTES", "LONG_STRING_BYTES", "decode_large", "decode_steps",
           "unmap_soon"]

#: Payload bytes scanned for escapable characters at once.
COUNT_BYTES: Final = 64 * 1024
#: A CBOR string at least this long is made from a view of the payload a piece at a
#: time (msgpack's walk has the same threshold, large_msgpack.LONG_BYTES).
LONG_STRING_BYTES: Final = LONG_BYTES
#: CBOR bytes one cbor2 call may decode: a run of items must fit in them.
WINDOW_BYTES: Final = 16 * 1024
#: The most items one cbor2 call decodes (a run doubles after each fit, up to this).
MAX_BATCH: Final = 4096

# Bytes that may make the JSON text of a string longer than the string: the escaped
# ones (a quote, a backslash and the control characters, at most 5 characters more
# each: \u00XX) and the first byte of a 4-byte UTF-8 sequence (2 UTF-16 units, not 1).
# Counted over the whole payload, which is an upper bound: every byte of a string is a
# byte of the payload.
_ESCAPABLE: Final = bytes(range(0x20)) + b'"\\' + bytes(range(0xF0, 0x100))
_ESCAPE_CHARS: Final = 5


async def decode_large(codec: Codec, payload: Payload, *, bound_up_to: int,
                       graveyard: Graveyard | None = None) -> tuple[Any, int | None]:
    """Decode and validate ``payload`` in slices; (value, JSON bound or None).

    Raises :class:`DecodeError` as :meth:`Codec.decode` does. The bound (an upper bound
    of the message's JSON text, in UTF-16 units) is measured only when it can come out
    at most ``bound_up_to`` (the job data limit: above it, it is of no use). What a
    refused frame made (its data over the limit, or the part before what is malformed)
    goes to ``graveyard``, to be taken apart a slice at a time once the error is let go
    of: freed in one call, a map of a million keys held the loop for all of it.
    """
    slicer = Slicer()
    return await run_sliced(decode_steps(codec, payload, slicer, bound_up_to, graveyard),
                            slicer)


def unmap_soon(payload: Payload | None) -> None:
    """Unmap a large frame's mmap in a worker thread, not waiting for it.

    Unmapping a large frame is a long call (the kernel frees every page), on whichever
    thread drops the last reference: on the event loop, unless handed over. The mmap
    releases the GIL while it unmaps. One still viewed is left to the garbage collector.
    """
    if isinstance(payload, mmap.mmap):
        trio.lowlevel.start_thread_soon(partial(_close, payload), _ignore)


def _close(body: mmap.mmap) -> None:
    with contextlib.suppress(BufferError):
        body.close()


def _ignore(_outcome: object) -> None:
    pass


def decode_steps(codec: Codec, payload: Payload, slicer: Slicer, bound_up_to: int,
                 graveyard: Graveyard | None = None) -> Steps[tuple[Any, int | None]]:
    """The work of :func:`decode_large`, as a generator that yields between slices."""
    made: list[Any] = []  # what the walk has made: buried if the frame is refused
    try:
        return (yield from _decoded_steps(codec, payload, slicer, bound_up_to, made))
    except DecodeError:
        if graveyard is not None:
            for container in made:
                graveyard.bury(container)
        made.clear()
        raise


def _decoded_steps(codec: Codec, payload: Payload, slicer: Slicer, bound_up_to: int,
                   made: list[Any]) -> Steps[tuple[Any, int | None]]:
    watch = DataWatch(bound_up_to) if bound_up_to > 0 else None
    if codec is MSGPACK:
        value = yield from msgpack_steps(payload, slicer, watch, made)
    elif codec is CBOR:
        value = yield from _cbor_steps(payload, slicer, watch, made)
    else:  # JSON (WebSocket text): json has no resumable decoder; decoded whole
        return codec.decode(payload), None
    made.append(value)  # (whole: refused while validated or measured, it goes too)
    value, chars = yield from validated_steps(value, slicer)
    if bound_up_to <= 0:
        return value, None
    if chars <= bound_up_to:
        escapable = yield from _escapable_steps(payload, slicer)
        bound = chars + _ESCAPE_CHARS * escapable
        if bound <= bound_up_to:
            return value, bound
    # Measured exactly, data by data; over the limit, refused here (DataTooLarge)
    return value, (yield from data_bound_steps(value, bound_up_to, slicer))


def _escapable_steps(payload: Payload, slicer: Slicer) -> Steps[int]:
    count = 0
    for start in range(0, len(payload), COUNT_BYTES):
        chunk = payload[start:start + COUNT_BYTES]
        count += len(chunk) - len(chunk.translate(None, _ESCAPABLE))
        if slicer.due(CHECK_EVERY):
            yield
    return count


# ------------------------------------------------------------------------------ CBOR


def _walked(initial: int) -> bool:
    """Whether an item starting with this byte is an array or map this walk descends
    into: major type 4 or 5 with a definite length, not empty (28-30 are malformed, 31
    indefinite: both are left to cbor2; empty ones are leaves)."""
    return 0x80 < initial <= 0xBF and initial != 0xA0 and (initial & 31) < 28


def _head(major: int, argument: int) -> bytes:
    """A CBOR item head: the major type and its argument, in the shortest form."""
    if argument < 24:
        return bytes([major << 5 | argument])
    for info, width in ((24, 1), (25, 2), (26, 4)):
        if argument < 1 << (8 * width):
            return bytes([major << 5 | info]) + argument.to_bytes(width, "big")
    return bytes([major << 5 | 27]) + argument.to_bytes(8, "big")


class _CborWalk:
    """One CBOR payload, walked (``pos``: where the next item starts).

    An array's or map's items are decoded by cbor2 in runs: a head for ``batch`` items
    is put in front of the next ``WINDOW_BYTES`` of the payload, and cbor2 decodes that
    array (or map) in one call, which cannot cost more than decoding ``WINDOW_BYTES``.
    If the items do not fit in the window (cbor2 runs out of bytes), the run is halved,
    down to one item; an item that does not fit alone is walked into if it is a
    definite-length array or map, else decoded by itself (see :meth:`leaf`).
    """

    __slots__ = ("buf", "view", "fp", "decoder", "file", "pos", "slicer", "batch", "watch",
                 "made")

    def __init__(self, payload: Payload, slicer: Slicer, watch: DataWatch | None,
                 made: list[Any]) -> None:
        self.buf = payload
        self.view = memoryview(payload)
        # cbor2 reads from a file: the mmap of a large frame is one; a BytesIO shares the
        # bytes it is given (no copy)
        self.fp: io.BytesIO | mmap.mmap = (
            payload if isinstance(payload, mmap.mmap) else io.BytesIO(payload))
        self.decoder = cbor_decoder(self.fp)
        self.file = self.decoder.fp  # what the decoder reads the payload through
        self.pos = 0
        self.slicer = slicer
        self.batch = MAX_BATCH
        self.watch = watch  # job data refused from its item counts (data_sizes.py)
        self.made = made  # the containers being made, outermost first (as msgpack's)

    def _argument(self, info: int) -> int:
        """The argument of the head at ``pos`` (initial byte's low bits ``info`` < 28);
        moves ``pos`` past the head."""
        pos = self.pos + 1
        if info < 24:
            self.pos = pos
            return info
        width = 1 << (info - 24)
        end = pos + width
        if end > len(self.buf):
            raise DecodeError("invalid CBOR payload: truncated item head")
        self.pos = end
        return int.from_bytes(self.buf[pos:end], "big")

    def _run(self, major: int, left: int) -> tuple[Any, int]:
        """Up to ``left`` items (map entries) at ``pos`` decoded in one cbor2 call, as a
        list (dict), and how many; (None, 0) if not even one fits in the window."""
        while True:
            count = min(left, self.batch)
            head = _head(major, count)
            window = io.BytesIO(head + self.buf[self.pos:self.pos + WINDOW_BYTES])
            decoder = self.decoder
            decoder.fp = window
            try:
                value = decoder.decode()
            except cbor2.CBORDecodeEOF:
                if count == 1:
                    return None, 0
                self.batch = max(1, count // 2)
                continue
            finally:
                decoder.fp = self.file
            self.pos += window.tell() - len(head)
            self.batch = min(MAX_BATCH, 2 * count)
            return value, count

    def container(self, depth: int, role: int = OTHER) -> Steps[Any]:
        """The array or map at ``pos`` (see :func:`_walked`; ``role``: what it is to
        the watch, see data_sizes.py)."""
        if depth > MAX_DEPTH:
            raise DecodeError(f"nesting deeper than {MAX_DEPTH}")
        initial = self.buf[self.pos]
        major = initial >> 5
        left = self._argument(initial & 31)
        watch = self.watch
        if watch is not None:
            watch.opened(role, major == 5, left)  # (before any of its items is made)
        # a map sized for its count, as in large/msgpack_steps.py (never resized as it fills)
        out: Any = (presized_dict(entries_bound(left, len(self.buf) - self.pos))
                    if major == 5 else [])
        self.made.append(out)
        while left:
            run, count = self._run(major, left)
            if count:
                # a map's later entries win, as in cbor2 (so does update)
                merge_into(out, run) if major == 5 else out.extend(run)
                left -= count
            else:  # one item too large for the window
                key = (yield from self.leaf()) if major == 5 else None
                if watch is None:
                    child = OTHER
                elif major == 5:
                    child = watch.entry(role, key, out)
                else:
                    child = watch.item(role, len(out))
                if _walked(self.buf[self.pos]):
                    value = yield from self.container(depth + 1, child)
                else:
                    value = yield from self.leaf()
                if major == 5:
                    out[key] = value  # a key that is a container: refused by validation
                else:
                    out.append(value)
                left -= 1
            if self.slicer.due(CHECK_EVERY):
                yield
        self.made.pop()
        return out

    def leaf(self) -> Steps[Any]:
        """The item at ``pos``, decoded whole; moves ``pos`` past it. A long string is
        made from a view of the payload a piece at a time (:mod:`.long_strings`; cbor2
        would copy it out of the stream first, then make it in one call)."""
        pos = self.pos
        initial = self.buf[pos]
        if 0x40 <= initial < 0x80 and 25 <= (initial & 31) < 28:  # maybe a long string
            length = self._argument(initial & 31)
            if length >= LONG_STRING_BYTES:
                start = self.pos
                end = start + length
                if end > len(self.buf):
                    raise DecodeError("invalid CBOR payload: truncated string")
                with self.view[start:end] as part:
                    if initial >= 0x60:
                        value: Any = yield from text_steps(part, self.slicer)
                    else:
                        value = yield from bytes_steps(part, self.slicer)
                self.pos = end
                return value
        fp = self.fp
        fp.seek(pos)
        value = self.decoder.decode()
        self.pos = fp.tell()
        return value


def _cbor_steps(payload: Payload, slicer: Slicer, watch: DataWatch | None,
                made: list[Any]) -> Steps[Any]:
    walk = _CborWalk(payload, slicer, watch, made)
    return (yield from walked(walk, _cbor_top(walk), "CBOR"))


def _cbor_top(walk: _CborWalk) -> Steps[Any]:
    if _walked(walk.buf[0]):
        return (yield from walk.container(1, TOP))
    return (yield from walk.leaf())
