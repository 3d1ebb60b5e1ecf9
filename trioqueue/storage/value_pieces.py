"""A stored value's msgpack bytes made a piece at a time, for data of many small values.

:func:`~.keys.encode_value` packs a value in one call. For job data of a million small
maps that one call held the event loop for most of a hundred milliseconds, and a large
job's data row was encoded that way when its record was first written. Here the same
bytes come out in pieces: msgpack is a stream with no lengths but each container's
count, so a container is its header followed by its members' bytes, and a run of
members packed as an array, its header cut off, is those members' bytes exactly (a
map's run as the array of its keys and values in turn). Containers of more than
members are packed whole in runs whose length follows the time the last run took, so
each piece is about a slice of work, and that hold at most :data:`RUN_MAX_VALUES`
values (counted by ``core/large_values/value_count.py``'s weight): a member holding more is opened
so, however small its containers (31 lists of 31 lists of 31 ... hold a million).

What msgpack cannot hold (an integer past 64 bits, a type it does not know) raises as
:func:`~.keys.encode_value`'s packer does, possibly after some pieces: the caller then
stores the value the ordinary way, whose CBOR fallback it does not repeat here.

Read back, such a value is decoded the same way (:func:`unpacked_steps`): a list or
map of more than :data:`WINDOW_BYTES` is opened, its members decoded in runs of at
most that many bytes (bytes bound the values), a member longer than that opened in
turn; a pause possible after each run. A record read for a command carries it as
:class:`Packed` until the queue's actor has decoded it so.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator
from itertools import chain, islice
from typing import Any, Final

import msgpack

from ..core.large_values.msgpack_runs import WindowRuns
from ..core.large_values.value_count import RUN_MAX_VALUES, run_values
from ..core.presized import entries_bound, presized_dict
from .keys import decode_value

__all__ = ["RUN_MAX_VALUES", "Packed", "PackedRecords", "member_pieces", "unpacked_steps",
           "value_pieces"]

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


def member_pieces(value: Any) -> Iterator[bytes]:
    """The bytes msgpack gives ``value`` itself (a member of a stored map, as a job's
    data is of its record), in pieces as :func:`value_pieces` makes a member's."""
    kind = type(value)
    if kind is list or kind is dict:
        yield from _opened(value)
    else:
        yield _pack(value)


def _opened(value: list[Any] | dict[Any, Any]) -> Iterator[bytes]:
    if isinstance(value, list):
        yield _packer.pack_array_header(len(value))
        yield from _runs(iter(value), False)
    else:
        yield _packer.pack_map_header(len(value))
        yield from _runs(chain.from_iterable(value.items()), True)


def _runs(members: Iterator[Any], is_map: bool) -> Iterator[bytes]:
    """The ``members`` of a container (a map's keys and values in turn) as runs of
    bytes: as many members as take about :data:`RUN_S`, at most as hold
    :data:`RUN_MAX_VALUES` values; a member holding more alone is opened."""
    run = FIRST_RUN
    clock = time.perf_counter
    held: list[Any] = []
    step = 2 if is_map else 1
    while True:
        if len(held) < step * run:
            held += islice(members, step * run - len(held))
        part = held[:step * run]
        if not part:
            return
        started = clock()
        values = part[1::2] if is_map else part
        count = run_values(values)
        if count > RUN_MAX_VALUES and len(values) > 1:
            # (too many values for one call: a shorter run, down to the member alone)
            run = max(1, len(values) * RUN_MAX_VALUES // count // 2)
            continue
        del held[:len(part)]
        if count > RUN_MAX_VALUES:
            if is_map:
                yield _pack(part[0])
            yield from _opened(values[0])
        else:
            yield _pack(part)[_header_len(len(part)):]
        spent = clock() - started
        # the next run: as many members as fit in RUN_S at this run's pace
        run = max(1, min(MAX_RUN, int(len(values) * RUN_S / spent) if spent > 0
                         else run * 2))


# --- reading back --------------------------------------------------------------------

#: Stored bytes one call decodes at most (a run of members, or one member whole): a
#: member longer than this, if a list or map, is opened. Bytes bound the values they
#: hold, however the containers nest.
WINDOW_BYTES: Final = 16 * 1024
#: The most members one run decodes.
MAX_RUN_MEMBERS: Final = 4096


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
    return (yield from _Unpacking(raw).item())


def _unpacker(size: int) -> msgpack.Unpacker:
    return msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=size)


class _Unpacking:
    """One stored value read back (``pos``: where the next item starts): a list or map
    longer than :data:`WINDOW_BYTES` is opened, its members decoded in runs that fit
    in that window (a head for ``count`` members put in front of the window's bytes,
    fewer while they do not fit); any other item in one call."""

    __slots__ = ("raw", "view", "pos", "runs", "deadline")

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.view = memoryview(raw)
        self.pos = 0
        self.runs = WindowRuns(WINDOW_BYTES, MAX_RUN_MEMBERS, _unpacker)
        self.deadline = time.perf_counter() + RUN_S

    def _container(self) -> tuple[bool, int, int] | None:
        """(is a map, members, head bytes) of a list or map at ``pos``; else None."""
        raw, pos = self.raw, self.pos
        first = raw[pos]
        if 0x80 <= first <= 0x9F:
            return first < 0x90, first & 0x0F, 1
        if first in (0xDC, 0xDE):
            return first == 0xDE, int.from_bytes(raw[pos + 1:pos + 3], "big"), 3
        if first in (0xDD, 0xDF):
            return first == 0xDF, int.from_bytes(raw[pos + 1:pos + 5], "big"), 5
        return None

    def item(self) -> Generator[None, None, Any]:
        """The item at ``pos``; moves ``pos`` past it."""
        container = self._container()
        if container is not None and len(self.raw) - self.pos > WINDOW_BYTES:
            is_map, count, head = container
            if count:
                return (yield from self._opened(is_map, count, head))
        return self._alone()

    def _opened(self, is_map: bool, left: int, head: int) -> Generator[None, None, Any]:
        self.pos += head
        # a map sized for its count: never resized as it fills (each resize a copy of
        # every entry in one call)
        out: Any = (presized_dict(entries_bound(left, len(self.raw) - self.pos))
                    if is_map else [])
        while left:
            run, count, used = self.runs.run(self.raw, self.pos, left, is_map)
            if count:
                self.pos += used
                if is_map:  # (its keys and values in turn: no key interned)
                    pairs = iter(run)
                    out.update(zip(pairs, pairs, strict=False))
                else:
                    out.extend(run)
                left -= count
            else:  # one member too long for the window: opened, or decoded alone
                if is_map:
                    key = self._alone()
                    out[key] = yield from self.item()
                else:
                    out.append((yield from self.item()))
                left -= 1
            if time.perf_counter() >= self.deadline:
                yield
                self.deadline = time.perf_counter() + RUN_S
        return out

    def _alone(self) -> Any:
        """The item at ``pos`` decoded in one call (not a list or map to open)."""
        rest = len(self.raw) - self.pos
        first = min(rest, 2 * WINDOW_BYTES)
        unpacker = _unpacker(rest)
        unpacker.feed(self.view[self.pos:self.pos + first])
        try:
            value = unpacker.unpack()
        except msgpack.OutOfData:  # a long string: fed the rest
            unpacker.feed(self.view[self.pos + first:])
            value = unpacker.unpack()
        self.pos += unpacker.tell()
        return value


class EncodedValues:
    """Data objects whose msgpack bytes were made ahead, a slice at a time (a
    schedule's job template), each kept while anything holds it: every record that
    carries this very object (a firing's job, the schedule's own record) is written
    from these bytes instead of encoding the object again. Keyed by the object's
    identity, checked against the object itself; each :meth:`keep` is undone by one
    :meth:`drop`. Read by a store's writer thread too: single dict operations only."""

    __slots__ = ("_by_id",)

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[Any, bytes, int]] = {}  # id -> (data, bytes, holds)

    def __bool__(self) -> bool:
        return bool(self._by_id)

    def keep(self, data: Any, encoded: bytes) -> None:
        entry = self._by_id.get(id(data))
        holds = entry[2] if entry is not None and entry[0] is data else 0
        self._by_id[id(data)] = (data, encoded, holds + 1)

    def drop(self, data: Any) -> None:
        entry = self._by_id.get(id(data))
        if entry is None or entry[0] is not data:
            return
        if entry[2] > 1:
            self._by_id[id(data)] = (data, entry[1], entry[2] - 1)
        else:
            del self._by_id[id(data)]

    def of(self, data: Any) -> bytes | None:
        """msgpack's bytes of this very object, if kept."""
        entry = self._by_id.get(id(data))
        return entry[1] if entry is not None and entry[0] is data else None


def joined_map(value: dict[Any, Any], key: str, encoded: bytes) -> bytes | None:
    """``encode_value(value)`` as msgpack, with ``value[key]`` last and its bytes
    ``encoded`` (made before): the same map once decoded, its member not encoded
    again. None when a field is something msgpack cannot hold (the caller encodes the
    whole value, CBOR included, as it always does)."""
    packer = msgpack.Packer(use_bin_type=True, autoreset=True)  # (any thread's)
    try:
        parts: list[bytes] = [packer.pack_map_header(len(value))]
        for name, member in value.items():
            if name != key:
                parts.append(packer.pack(name))
                parts.append(packer.pack(member))
        parts.append(packer.pack(key))
    except (OverflowError, TypeError, ValueError):
        return None
    parts.append(encoded)
    return b"".join(parts)
