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
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from itertools import chain, islice
from typing import Any, Final

import msgpack

__all__ = ["OPEN_MIN_MEMBERS", "value_pieces"]

#: A container with more members than this is opened (its header, then its members in
#: runs); a smaller one is packed whole as a member of its parent's run.
OPEN_MIN_MEMBERS: Final = 32
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


def _big(member: Any) -> bool:
    kind = type(member)
    return (kind is list or kind is dict) and len(member) > OPEN_MIN_MEMBERS


_CONTAINERS: Final = frozenset({list, dict})


def _has_big(part: list[Any]) -> bool:
    """Whether a member of ``part`` is a container to open: by C-level calls when the
    members are all scalars or all containers (the common runs)."""
    kinds = set(map(type, part))
    if kinds.isdisjoint(_CONTAINERS):
        return False
    if kinds <= _CONTAINERS:
        return max(map(len, part)) > OPEN_MIN_MEMBERS
    return any(map(_big, part))


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
        if _has_big(part):
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
        if _big(member):
            if start < index:
                small = part[start:index]
                yield _pack(small)[_header_len(len(small)):]
            yield from _opened(member)
            start = index + 1
    if start < len(part):
        small = part[start:]
        yield _pack(small)[_header_len(len(small)):]
