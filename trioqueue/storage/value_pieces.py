"""A stored value's msgpack bytes made a piece at a time, for data of many small values.

:func:`~.keys.encode_value` packs a value in one call. For job data of a million small
maps that one call held the event loop for most of a hundred milliseconds, and a large
job's data row was encoded that way when its record was first written. Here the same
bytes come out in pieces: msgpack is a stream with no lengths but each container's
count, so a container is its header followed by its members' bytes, and a run of
members packed as an array, its header cut off, is those members' bytes exactly (a
map's run as the array of its keys and values in turn). Containers of more than
:data:`OPEN_MIN_MEMBERS` are opened so; smaller ones are packed whole, in runs whose
length follows the time the last run took, so each piece is about a slice of work.

What msgpack cannot hold (an integer past 64 bits, a type it does not know) raises as
:func:`~.keys.encode_value`'s packer does, possibly after some pieces: the caller then
stores the value the ordinary way, whose CBOR fallback it does not repeat here.

Read back, such a value is decoded the same way (:func:`unpacked_steps`): containers of
16 members or more are opened, their members decoded one call each, a pause possible
every few members; a record read for a command carries it as :class:`Packed` until the
queue's actor has decoded it so.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator
from itertools import chain, islice
from typing import Any, Final

import msgpack

from ..core.value_count import OPEN_MIN_MEMBERS, has_big, is_big
from .keys import decode_value

__all__ = ["OPEN_MIN_MEMBERS", "Packed", "PackedRecords", "unpacked_steps", "value_pieces"]

#: Work aimed at per run (one C call), in seconds.
RUN_S: Final = 0.0002
#: Members in the first run of a container; later runs scale with the time taken.
FIRST_RUN: Final = 16
MAX_RUN: Final = 1 << 16

_packer = msgpack.Packer(use_bin_type=True, autoreset=True)
_pack = _packer.pack


def _header_len(count: int) -> int:
    """Bytes of a msgpack array (or map) header for ``count`` members."""
    return 1 if count < 16 else 3 if count < 0x10000 else 5


def value_pieces(value: Any) -> Iterator[bytes]:
    """The bytes :func:`~.keys.encode_value` gives ``value`` (a map), in pieces of about
    a slice of work each; a pause is possible between any two pieces."""
    if type(value) is not dict:
        yield _pack(value)
        return
    # the map and its values are opened whatever their size (a job's data may be a
    # small map around everything else)
    yield _packer.pack_map_header(len(value))
    for key, member in value.items():
        yield _pack(key)
        kind = type(member)
        if kind is list or kind is dict:
            yield from _opened(member)
        else:
            yield _pack(member)




def _opened(value: list[Any] | dict[Any, Any]) -> Iterator[bytes]:
    if isinstance(value, list):
        yield _packer.pack_array_header(len(value))
        yield from _runs(iter(value), False)
    else:
        yield _packer.pack_map_header(len(value))
        yield from _runs(chain.from_iterable(value.items()), True)


def _runs(members: Iterator[Any], is_map: bool) -> Iterator[bytes]:
    """The ``members`` of a container (a map's keys and values in turn) as runs of
    bytes."""
    run = FIRST_RUN
    clock = time.perf_counter
    while True:
        # (a map's run: its pairs, so twice as many members)
        part = list(islice(members, 2 * run if is_map else run))
        if not part:
            return
        started = clock()
        if has_big(part):
            yield from _mixed(part)
        else:
            yield _pack(part)[_header_len(len(part)):]
        spent = clock() - started
        count = len(part) // 2 if is_map else len(part)
        # the next run: as many members as fit in RUN_S at this run's pace
        run = max(1, min(MAX_RUN, int(count * RUN_S / spent) if spent > 0 else run * 2))


def _mixed(part: list[Any]) -> Iterator[bytes]:
    """A run holding containers to open: the small members between them packed in
    runs, each large one opened in its turn."""
    start = 0
    for index, member in enumerate(part):
        if is_big(member):
            if start < index:
                small = part[start:index]
                yield _pack(small)[_header_len(len(small)):]
            yield from _opened(member)
            start = index + 1
    if start < len(part):
        small = part[start:]
        yield _pack(small)[_header_len(len(small)):]


# --- reading back --------------------------------------------------------------------

#: First bytes of msgpack containers of 16 members or more (array16/32, map16/32):
#: opened when read back; a smaller one is decoded whole as a member.
_WIDE_ARRAYS: Final = frozenset({0xDC, 0xDD})
_WIDE_MAPS: Final = frozenset({0xDE, 0xDF})
#: Members decoded between two looks at the clock.
_LOOK_EVERY: Final = 64


class Packed:
    """A stored value's bytes, decoded by whoever takes it, a slice at a time
    (:func:`unpacked_steps`), in place of its data in a record read back."""

    __slots__ = ("raw",)

    def __init__(self, raw: bytes) -> None:
        self.raw = raw


class PackedRecords:
    """A page of finished records read for a listing, undecoded: ``raws``, each a
    record's bytes, and ``put_back``, which puts a decoded record's data back in place
    when it was kept apart (as :class:`Packed`, to decode in turn). Decoded in one call,
    a page of 250 records of 8,000 integers each held the loop for tens of ms."""

    __slots__ = ("raws", "put_back")

    def __init__(self, raws: list[bytes],
                 put_back: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        self.raws = raws
        self.put_back = put_back


def unpacked_steps(raw: bytes) -> Generator[None, None, Any]:
    """``decode_value(raw)``, made in slices: the generator yields (a pause may come)
    each time about :data:`RUN_S` of work has passed and returns the value. A CBOR
    value (what msgpack could not hold) is decoded in one call."""
    first = raw[0] if raw else 0
    if 0xA0 <= first <= 0xBB or first == 0xBF or not raw:
        return decode_value(raw)
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False,
                                max_buffer_size=len(raw))
    unpacker.feed(raw)
    clock = [time.perf_counter() + RUN_S]
    # the map and its values are opened whatever their size (as value_pieces does)
    return (yield from _unpacked(unpacker, raw, clock, 2))


def _unpacked(unpacker: msgpack.Unpacker, raw: bytes, clock: list[float], opened: int = 0
              ) -> Generator[None, None, Any]:
    """The next value of ``unpacker``: a wide container opened and filled member by
    member (wide members opened in turn), anything else decoded in one call; the
    first ``opened`` levels open containers of any size."""
    first = raw[unpacker.tell()]
    if opened:
        if 0x90 <= first <= 0x9F:
            first = 0xDC  # (a small array, opened as a wide one)
        elif 0x80 <= first <= 0x8F:
            first = 0xDE
    if first in _WIDE_ARRAYS:
        count = unpacker.read_array_header()
        items: list[Any] = []
        append = items.append
        for index in range(count):
            if opened > 1 or raw[unpacker.tell()] in _WIDE:
                append((yield from _unpacked(unpacker, raw, clock, opened and opened - 1)))
            else:
                append(unpacker.unpack())
            if not index % _LOOK_EVERY:
                yield from _pause(clock)
        return items
    if first in _WIDE_MAPS:
        count = unpacker.read_map_header()
        pairs: dict[Any, Any] = {}
        for index in range(count):
            key = unpacker.unpack()
            if opened > 1 or raw[unpacker.tell()] in _WIDE:
                pairs[key] = yield from _unpacked(unpacker, raw, clock, opened and opened - 1)
            else:
                pairs[key] = unpacker.unpack()
            if not index % _LOOK_EVERY:
                yield from _pause(clock)
        return pairs
    return unpacker.unpack()


_WIDE: Final = _WIDE_ARRAYS | _WIDE_MAPS


def _pause(clock: list[float]) -> Generator[None, None, None]:
    """A yield when the slice's time is up (``clock[0]``: when it ends)."""
    now = time.perf_counter()
    if now >= clock[0]:
        yield
        clock[0] = time.perf_counter() + RUN_S
