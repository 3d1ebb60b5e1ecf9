"""Large job data's bytes for PostgreSQL, made on the event loop a slice at a time.

PostgreSQL stores a job's data inside its record, and the store's commits run in a
worker thread. msgpack holds the interpreter lock for the whole of one call, so a
record of a million small maps encoded there held the event loop for as long as that
encoding, at the push, again at the pull (the active record) and at the
finish; a finished record decoded there for a command held it twice as long.

So the data of a push in a large frame is encoded before the command runs, a slice at
a time on the event loop, as LMDB's writes ahead are (``actors/ahead_writes.py`` drives
both): here the pieces stay in memory (:meth:`EncodedData.write`) until the record
that carries the very same object is encoded, which then joins the record's small
fields and those bytes instead of encoding the data again (:meth:`EncodedData.record`).
The bytes stay with the job while it lives, so its later records (pulled, retried,
finished) join them too; they go when the job finishes or is deleted. The data comes
last in such a record, so a read of it (:func:`packed_record`) finds the data's bytes
without walking them and leaves them to the queue's actor to decode a slice at a time.

A push refused (a duplicate id, a full store, bad options) takes no record: its data
is let go of to the broker's graveyard when its reply is sent (:meth:`release`), to be
freed a slice at a time as on LMDB.

Threads: :meth:`write`, :meth:`drop`, :meth:`expect` and :meth:`release` run on the
event loop; :meth:`record` and :meth:`forget` in the writer's worker thread, one commit
at a time. They share two dicts through single operations (each atomic under the
interpreter lock); a record takes a row by marking it, never by removing it, so a
release that comes while a commit runs cannot lose a row a record took.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import msgpack

from ...core.large_values.graveyard import Graveyard
from ...core.large_values.value_count import holds_many
from ..kept_data import PACKED_MIN_BYTES, Row
from ..keys import decode_value, encode_value
from ..value_pieces import EncodedValues, Packed, joined_map, member_pieces, value_pieces

__all__ = ["EncodedData", "encoded_record", "encoded_value", "packed_record"]

#: A value (a record's data, a result, a schedule's record) holding more values than
#: this is encoded in runs (:func:`encoded_record`, :func:`encoded_value`): about a
#: millisecond of encoding or more.
PIECES_MIN_VALUES: Final = 8192

#: How a data row written ahead begins: ``V({"d": data})``'s map header and key.
_ROW_PREFIX: Final = b"\x81\xa1d"
_DATA_KEY: Final = "data"
#: msgpack's map types (a record encoded as CBOR, which msgpack could not hold, is
#: decoded whole).
_MAP_HEADERS: Final = frozenset({*range(0x80, 0x90), 0xDE, 0xDF})


class _Bytes:
    """One data object's encoded bytes, in parts, and whether a record took them."""

    __slots__ = ("data", "parts", "taken")

    def __init__(self, data: Any, parts: list[Row]) -> None:
        self.data = data
        self.parts = parts
        self.taken = False


class EncodedData:
    """The data encoded ahead of its records, and the encodings of the live jobs that
    took them (see the module)."""

    def __init__(self) -> None:
        self._pieces: dict[bytes, list[Row]] = {}  # row key -> pieces so far
        self._ahead: dict[int, _Bytes] = {}  # id(data) -> its bytes, until released
        self._held: dict[str, tuple[str, _Bytes]] = {}  # job id -> (queue, bytes)
        # id(result) -> (result, its row): an ACK's result encoded ahead
        self._results: dict[int, tuple[Any, bytes]] = {}
        # data objects encoded ahead and kept (a schedule's template, shared by the
        # jobs its firings push): records carrying one join its bytes
        self.kept = EncodedValues()
        self._packer = msgpack.Packer(use_bin_type=True, autoreset=True)
        self.graveyard: Graveyard | None = None

    # --- on the event loop ----------------------------------------------------------

    def write(self, row_key: bytes, piece: Row) -> None:
        self._pieces.setdefault(row_key, []).append(piece)

    def drop(self, row_key: bytes) -> None:
        self._pieces.pop(row_key, None)

    def expect(self, data: Any, row_key: bytes, pieces: int) -> None:
        """The pieces under ``row_key`` are ``data``'s row (a string's UTF-8 bytes, or
        ``V({"d": data})``): kept for the record that carries ``data``."""
        parts = self._pieces.pop(row_key, [])
        if len(parts) != pieces:
            return  # (never: the record then encodes its data itself)
        self._keep(data, parts)

    def expect_row(self, data: Any, row: bytes) -> None:
        """``row`` is ``V({"d": data})``, encoded whole ahead of its record (data of a
        few thousand values, see ``actors/ahead_writes.py``): kept as :meth:`expect`
        keeps pieces."""
        self._keep(data, [row])

    def _keep(self, data: Any, parts: list[Row]) -> None:
        """``data``'s row in ``parts`` kept for the record that carries ``data``: its
        bytes as a member of that record (a CBOR row, which no record joins, is not)."""
        if type(data) is str:
            parts.insert(0, _str_header(sum(map(len, parts))))
        elif parts and bytes(parts[0][:3]) == _ROW_PREFIX:
            parts[0] = memoryview(parts[0])[3:]
        else:
            return
        self._ahead[id(data)] = _Bytes(data, parts)

    def release(self, data: Any) -> None:
        """``data``'s command is answered: its bytes go; the data too, to the graveyard,
        when no record took it."""
        entry = self._ahead.pop(id(data), None)
        if entry is not None and entry.data is data and not entry.taken and (
                self.graveyard is not None):
            self.graveyard.bury(data)

    def expect_result(self, result: Any, row: bytes) -> None:
        """``row`` is ``result``'s row (``V({"r": result})``), encoded on the loop a
        slice at a time: the finish that stores this very object writes it as it is."""
        self._results[id(result)] = (result, row)

    def release_result(self, result: Any) -> None:
        """The command that carried ``result`` is answered: its row is not needed."""
        entry = self._results.get(id(result))
        if entry is not None and entry[0] is result:
            self._results.pop(id(result), None)

    def forget_queue(self, queue: str) -> None:
        """The encodings of a queue this broker no longer owns (a cluster's)."""
        for job_id, (owner, _) in list(self._held.items()):
            if owner == queue:
                self._held.pop(job_id, None)

    # --- in the writer's thread -----------------------------------------------------

    def record(self, job_id: str, record: dict[str, Any]) -> bytes:
        """``record``'s bytes: its data's joined from those encoded ahead when the data
        is an object whose bytes are here, else encoded here (:func:`encoded_record`)."""
        if not (self._held or self._ahead or self.kept):
            return encoded_record(record)
        data = record.get(_DATA_KEY)
        held = self._held.get(job_id)
        if held is not None and held[1].data is data:
            found = held[1]
        else:
            entry = self._ahead.get(id(data))
            if (entry is None or entry.data is not data) and (
                    encoded := self.kept.of(data)) is not None:
                entry = _Bytes(data, [encoded])  # (this job's own, joined from them)
            if entry is None or entry.data is not data:
                if held is not None:
                    del self._held[job_id]  # (its data was replaced)
                return encoded_record(record)
            entry.taken = True
            found = entry
            self._held[job_id] = (record["queue"], entry)
        return _joined(record, found.parts, self._packer.pack,
                       self._packer.pack_map_header)

    def forget(self, job_id: str) -> None:
        """The job finished or was deleted: no record of it is written again."""
        self._held.pop(job_id, None)

    def result(self, result: Any) -> bytes:
        """A finished job's result row: the one encoded ahead for this very object, if
        any, else encoded here (:func:`encoded_value`)."""
        entry = self._results.get(id(result))
        if entry is not None and entry[0] is result:
            return entry[1]
        return encoded_value({"r": result})

    def value(self, value: dict[str, Any]) -> bytes:
        """Any other row's bytes (:func:`encoded_value`); a schedule's record whose
        template was encoded ahead and kept, joined from those bytes."""
        if self.kept and type(value) is dict and (
                encoded := self.kept.of(value.get(_DATA_KEY))) is not None and (
                joined := joined_map(value, _DATA_KEY, encoded)) is not None:
            return joined
        return encoded_value(value)


def encoded_record(record: dict[str, Any]) -> bytes:
    """``record``'s bytes, its data of many values encoded a run at a time and placed
    last. Encoded in one call, such data held the interpreter lock, so the event loop,
    for all of it; a run at a time, the writer's thread lets go of the lock between two
    runs as any Python code does. Placed last, a read finds its bytes without walking
    them (:func:`packed_record`)."""
    data = record.get(_DATA_KEY)
    if not holds_many(data, PIECES_MIN_VALUES):
        return encode_value(record)
    try:
        pieces: list[Row] = list(member_pieces(data))
    except (OverflowError, TypeError, ValueError):
        return encode_value(record)  # (CBOR, whole: what msgpack cannot hold)
    return _joined(record, pieces, _thread_packer.pack, _thread_packer.pack_map_header)


def encoded_value(value: dict[str, Any]) -> bytes:
    """``encode_value(value)``, a run at a time when ``value`` holds many values (a
    result, a schedule's record of a large template, a child's outcome)."""
    if holds_many(value, PIECES_MIN_VALUES):
        try:
            return b"".join(value_pieces(value))
        except (OverflowError, TypeError, ValueError):
            pass  # (CBOR, whole: what msgpack cannot hold)
    return encode_value(value)


#: The writer's thread's own packer (one commit at a time).
_thread_packer: Final = msgpack.Packer(use_bin_type=True, autoreset=True)


def _joined(record: dict[str, Any], data: list[Row], pack: Callable[[Any], bytes],
            header: Callable[[int], bytes]) -> bytes:
    """``record`` encoded with its data last, the data's bytes being ``data``."""
    try:
        parts: list[Row] = [header(len(record))]
        for key, value in record.items():
            if key != _DATA_KEY:
                parts.append(pack(key))
                parts.append(pack(value))
        parts.append(pack(_DATA_KEY))
    except (OverflowError, TypeError, ValueError):
        return encode_value(record)  # (a field msgpack cannot hold: CBOR, whole)
    parts.extend(data)
    return b"".join(parts)


def _str_header(size: int) -> bytes:
    """msgpack's header of a string of ``size`` UTF-8 bytes."""
    if size < 32:
        return bytes((0xA0 | size,))
    if size < 0x100:
        return bytes((0xD9, size))
    if size < 0x10000:
        return b"\xda" + size.to_bytes(2, "big")
    return b"\xdb" + size.to_bytes(4, "big")


def packed_record(raw: bytes) -> dict[str, Any]:
    """A stored record decoded, its data left as :class:`Packed` when the record is
    large (for the queue's actor to decode a slice at a time). The data's bytes are
    found without being decoded: at the end when it comes last (as records with data
    encoded ahead have it), else stepped over in one call."""
    if len(raw) < PACKED_MIN_BYTES or raw[0] not in _MAP_HEADERS:
        return decode_value(raw)  # type: ignore[no-any-return]
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False,
                                max_buffer_size=len(raw))
    unpacker.feed(raw)
    count = unpacker.read_map_header()
    record: dict[str, Any] = {}
    for index in range(count):
        key = unpacker.unpack()
        if key != _DATA_KEY:
            record[key] = unpacker.unpack()
            continue
        start = unpacker.tell()
        if index == count - 1:
            end = len(raw)
        else:
            unpacker.skip()
            end = unpacker.tell()
        record[key] = Packed(_ROW_PREFIX + raw[start:end])
    return record
