"""A PUSH's (or an Update's) large data, written to the store before the command runs.

One writer commits every queue's writes, one commit at a time: a job's 8.5 MB data
row, put and committed with its record, held every other client's commit (and the
event loop) for as long as that data took to write. A session that decodes a ``PUSH``
whose data is one long string (:data:`AHEAD_MIN_BYTES` or more) first has the string
written here, a piece of ``Storage.ahead_piece_bytes`` a transaction with a checkpoint
after each, so other commits and tasks run between two pieces; then the command runs as
any other, and its record's commit takes the rows (storage/kept_data.py) instead of
writing the data. Only the pushing connection waits for its own pieces.

Data of many small values (a list or map in a frame of :data:`AHEAD_MIN_VALUE_BYTES`
or more) is written ahead the same way, encoded as its data row would be
(storage/value_pieces.py) a slice at a time: encoded with its record, a million small
maps held the loop for one encoding of all of them, twice. So is each job's data of a
``PUSHB`` or ``PUSHF`` in such a frame that holds more than :data:`AHEAD_MIN_VALUES`
values (the batch's records are encoded in one call each, with their data, when
committed): the records' commit takes the rows of each. What msgpack cannot hold (an integer past 64
bits) takes the ordinary path, as a string that is not UTF-8 does.

Data of more than :data:`ENCODE_MIN_VALUES` values that is not written ahead (a
``PUSH`` in a smaller frame, a batch job of fewer values than that, many of which make
one commit) has its row encoded here instead, a slice at a time when it holds many,
and handed to the store (``expect_encoded``): the commit that takes the job puts that
row as it is, encoding none of the data. Whether data is worth it is decided by how
many values it holds (``core/large_values/value_count.py``), looked at no further than the
threshold, so a small push costs one comparison of its frame's size.

Nothing is lost either way: a push refused (a full store, a duplicate id, bad input)
leaves rows no record took, which :meth:`AheadWriter.release` deletes once the
command is answered; a crash in between leaves pieces no claim points to, deleted
when the store opens (storage/lmdb/ahead.py). A write ahead that does not fit, or a
connection closed in the middle, drops what it wrote, and the command then takes the
ordinary path, where admission decides.

The room a write ahead takes is checked first, as admission would check the command
(``admit_need``), and counted while it runs, so writes ahead of several connections at
once cannot together run into the reserve kept for finishing accepted jobs.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from typing import Any, Final

import trio

from ..core.job_data import MAX_DATA_CHARS
from ..core.large_values.value_count import weight
from ..storage.keys import AHEAD_ROW_KEY_BYTES, encode_value
from ..storage.port import Storage, StorageFullError
from ..storage.value_pieces import value_pieces
from ..utf8_views import utf8_view
from .admission import StoreRoom
from .request import OnReply, Request

__all__ = ["AHEAD_MIN_BYTES", "AheadWriter"]

#: A data string at least this long is written ahead (a shorter one goes with its
#: record: under about 0.25 ms to put and commit here).
AHEAD_MIN_BYTES: Final = 1 << 20
#: A list or map in a frame at least this long is written ahead (encoding one of many
#: small values costs far more than putting its bytes: about 5 ms for 256 KiB of
#: small integers, in one call).
AHEAD_MIN_VALUE_BYTES: Final = 256 * 1024
#: A PUSHB job's data holding more values than this (its members and all they hold)
#: is written ahead: encoding it with its record costs about a millisecond or more.
AHEAD_MIN_VALUES: Final = 8192
#: A job's data holding more values than this, not written ahead, has its row encoded
#: ahead of the commit (see the module): a commit takes the jobs of many commands at
#: once, and encoding a few thousand values each in it made one step of tens of ms.
ENCODE_MIN_VALUES: Final = 1024
#: Every value takes a byte of a frame at least: a smaller frame carries none to encode.
ENCODE_MIN_FRAME_BYTES: Final = ENCODE_MIN_VALUES
#: Work between two pauses while data of many values is encoded, in seconds.
ENCODE_SLICE_S: Final = 0.0005

#: The commands whose jobs' data may each be written ahead (a flow's is in ``input``).
_FLOW: Final = "PUSHF"
_BATCHES: Final = frozenset({"PUSHB", _FLOW})
#: The commands whose one ``data`` is a job's (an Update's replaces a live job's).
_ONE_DATA: Final = frozenset({"PUSH", "Update"})


class AheadWriter:
    """Writes long PUSH data ahead of the command (see the module)."""

    def __init__(self, storage: Storage, room: StoreRoom | None,
                 max_chars: int = MAX_DATA_CHARS) -> None:
        self._storage = storage
        self._room = room  # None: the store has no limit
        self._max_chars = max_chars  # the data limit: longer is refused anyway
        self._piece = storage.ahead_piece_bytes
        self._taken = 0  # room held by writes ahead under way
        # (a smaller frame never carries data to write or encode ahead)
        self.min_chars = ENCODE_MIN_FRAME_BYTES

    def data_of(self, request: Request) -> Any:
        """The data of a PUSH or an Update worth writing (or encoding) ahead: a long
        string, or a list or map of many values; or a PUSHB's or PUSHF's jobs (each
        job's data is looked at by :meth:`write`, with pauses); else None. (An Update
        has no data limit: data past it is written ahead too.)"""
        cmd = request.cmd
        frame_bytes = request.frame_bytes or 0
        if cmd in _BATCHES:
            jobs = request.msg.get("jobs")
            if type(jobs) is list and jobs and frame_bytes > ENCODE_MIN_FRAME_BYTES:
                return jobs
            return None
        if cmd not in _ONE_DATA:
            return None
        data: Any = request.msg.get("data")
        kind = type(data)
        if kind is str:
            if len(data) < AHEAD_MIN_BYTES or (
                    cmd == "PUSH" and len(data) > self._max_chars):
                return None  # (longer than the data limit allows: refused anyway)
            return data
        if (kind is list or kind is dict) and data and (
                frame_bytes >= AHEAD_MIN_VALUE_BYTES
                or _values_in(data, ENCODE_MIN_VALUES) > ENCODE_MIN_VALUES):
            return data  # (over the data limit: refused while the frame was decoded)
        return None

    async def write(self, request: Request, data: Any) -> bool:
        """Write ``data`` ahead (for a PUSHB: each of its jobs' data that holds many
        values), or encode its row ahead; True when anything was, and ``request``'s
        reply will release what no record took. False: nothing is left written (the
        ordinary path)."""
        need = 0
        large = (request.frame_bytes or 0) >= AHEAD_MIN_VALUE_BYTES
        if self._room is not None:
            jobs = len(data) if request.cmd in _BATCHES else 1
            need = self._room.admit_need(request.frame_bytes, jobs)
            if self._room.storage_room(exact=False) - self._taken < need:
                return False  # maybe full: admission decides, measuring exactly
        self._taken += need
        try:
            if request.cmd in _BATCHES:
                written = await self._write_jobs(data, request.cmd == _FLOW, large)
            elif type(data) is str or large:
                written = [data] if await self._write_one(data) else []
            else:
                sliced = _values_in(data, AHEAD_MIN_VALUES) > AHEAD_MIN_VALUES
                written = [data] if await self._encode_one(data, sliced=sliced) else []
        finally:
            self._taken -= need
        if not written:
            return False
        release = self._storage.release_ahead

        def released(_reply: dict[str, Any]) -> None:
            # answered: the rows no record took go (a no-op for those taken)
            for each in written:
                release(each)

        request.replier = OnReply(request.replier, released)
        return True

    async def _write_jobs(self, jobs: list[Any], flow: bool, large: bool) -> list[Any]:
        """Each job's data that holds many values (a flow's job has it in its
        ``input``), written ahead (in a large frame) or its row encoded ahead; the data
        so handled. Looking at the jobs pauses as encoding does; a job written ahead
        stays so when a later one cannot be (it takes the ordinary path)."""
        written: list[Any] = []
        clock = time.perf_counter
        began = clock()
        try:
            for job in jobs:
                if flow and type(job) is dict:
                    job = job.get("input")
                data = job.get("data") if type(job) is dict else None
                values = _values_in(data, AHEAD_MIN_VALUES)
                if values > AHEAD_MIN_VALUES:
                    done = await (self._write_one(data) if large
                                  else self._encode_one(data, sliced=True))
                    began = clock()
                elif values > ENCODE_MIN_VALUES:
                    done = await self._encode_one(data, sliced=False)
                else:
                    done = False
                if done:
                    written.append(data)
                if clock() - began >= ENCODE_SLICE_S:
                    await trio.lowlevel.checkpoint()
                    began = clock()
        except BaseException:
            # cancelled (the connection closed): no reply will release them
            for data in written:
                self._storage.release_ahead(data)
            raise
        return written

    async def _encode_one(self, data: Any, *, sliced: bool) -> bool:
        """Encode one job's ``data`` row ahead of its record (a slice at a time when
        ``sliced``, else in one call: a few thousand values) and expect a record to
        take it; False: what msgpack cannot hold, left to the ordinary path."""
        try:
            if sliced:
                parts: list[bytes] = []
                clock = time.perf_counter
                began = clock()
                for part in value_pieces({"d": data}):
                    parts.append(part)
                    if clock() - began >= ENCODE_SLICE_S:
                        await trio.lowlevel.checkpoint()
                        began = clock()
                row = b"".join(parts)
            else:
                row = encode_value({"d": data})
        except (OverflowError, TypeError, ValueError):
            return False  # (what msgpack cannot hold: the ordinary path, CBOR)
        self._storage.expect_encoded(data, row)
        return True

    async def _write_one(self, data: Any) -> bool:
        """Write one job's ``data`` ahead and expect a record to take it; False:
        nothing of it is left written."""
        if type(data) is str:
            view = utf8_view(data)
            if view is None:
                return False
            pieces: Iterator[bytes | memoryview | None] = (
                view[start:start + self._piece] for start in range(0, len(view), self._piece))
        else:
            pieces = self._encoded(data)
        row_key = secrets.token_bytes(AHEAD_ROW_KEY_BYTES)
        written = 0
        try:
            clock = time.perf_counter
            began = clock()
            for piece in pieces:
                if piece is not None:
                    self._storage.write_ahead(row_key, written, piece)
                    written += 1
                elif clock() - began < ENCODE_SLICE_S:
                    continue  # (encoding: a pause once a slice of work has passed)
                await trio.lowlevel.checkpoint()
                began = clock()
        except (StorageFullError, OverflowError, TypeError, ValueError):
            # full, or data msgpack cannot hold: the ordinary path (CBOR, admission)
            self._storage.drop_ahead_pieces(row_key, written)
            return False
        except BaseException:
            # cancelled (the connection closed): what was written goes, synchronously
            self._storage.drop_ahead_pieces(row_key, written)
            raise
        self._storage.expect_ahead(data, row_key, written)
        return True

    def _encoded(self, data: Any) -> Iterator[bytes | None]:
        """``data``'s row (``V({"d": data})``, as the record's commit would write it)
        in pieces of about ``self._piece`` bytes; ``None`` between two: a pause may
        come there."""
        parts: list[bytes] = []
        size = 0
        for part in value_pieces({"d": data}):
            parts.append(part)
            size += len(part)
            if size >= self._piece:
                yield b"".join(parts)
                parts.clear()
                size = 0
            else:
                yield None
        if parts:
            yield b"".join(parts)



def _values_in(data: Any, limit: int) -> int:
    """How many values ``data`` (a list or map) holds, looked at no further than
    ``limit`` (more than ``limit``: at least that many); 0 for anything else."""
    kind = type(data)
    if kind is dict:
        return weight(list(data.values()), limit)
    if kind is list:
        return weight(data, limit)
    return 0
