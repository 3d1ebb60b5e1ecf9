"""Values of many small values that are not job data, made ready before the command.

An ``ACK``'s result and a ``Progress``'s progress may hold a million small maps (the
frame's limit is all that bounds them). The core handles a command in one call: the
result's row was encoded with the job's finish (``encode_result``), and an object's
progress turned into its compact JSON text (its message, as bunqueue's
``JSON.stringify``), each one long step of the event loop. A session that decodes such a
command (a list or map in a frame of :data:`~.ahead_writes.AHEAD_MIN_VALUE_BYTES` or
more, holding more than :data:`~.ahead_writes.AHEAD_MIN_VALUES` values) hands it here
first:

* a result's row is encoded a slice at a time (``storage/value_pieces.py``: exactly
  ``encode_result``'s bytes) and handed to the store, whose finish of that very object
  writes it as it is (``Storage.expect_result``; released once the command is
  answered, whether a finish took it or not). PostgreSQL, which commits in a worker
  thread, takes it too: encoded there, it held the interpreter lock, so the loop;
  when a parent waits for the job, the result's bytes are also written ahead into the
  store, a piece a transaction, for the parent's outcome row to take rather than copy
  in the ``ACK``'s commit (``Storage.expect_outcome``, storage/kept_outcomes.py);
* a progress's JSON text is made a slice at a time (``core/large_values/json_slices.py``, the
  encoder the core uses) and put in the command in its place: the core makes the same
  message of that text as of the value (text that is not a number is the message);
  that message (or a long one the command names itself) is then written ahead into
  the store, a piece a transaction, and the job's record takes the pieces instead of
  holding the text (``Storage.expect_progress``, storage/kept_progress.py): kept in
  the record, every write of it copied the 8 MB twice and put it in one step;

and either value is let go of to the store's graveyard, taken apart a slice at a time
once the command, its events and its reply are done with it. What the encoder cannot
make (a value msgpack cannot hold, a cycle) is left as it is, for the core's own path.
``ACKB``'s results are each looked at the same way.

A ``Cron``'s job template of many values is job data that stays: the schedule's record
and every job its firings push carry it. Its msgpack bytes are made here a slice at a
time and kept by the store for that very object (``Storage.keep_encoded``): the
record and the firings' jobs are written from them, never encoded again in one call.
The command holds them until it is answered; the scheduler holds them while the
schedule keeps that template (actors/scheduler.py).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any, Final

import trio

from ..core.large_values.json_slices import json_steps
from ..core.large_values.slicing import Slicer, run_paused
from ..core.large_values.value_count import holds_many
from ..storage.keys import AHEAD_ROW_KEY_BYTES
from ..storage.port import Storage, StorageFullError
from ..storage.value_pieces import member_pieces, value_pieces
from ..utf8_views import utf8_view
from .ahead_writes import AHEAD_MIN_VALUE_BYTES, AHEAD_MIN_VALUES, ENCODE_SLICE_S
from .request import OnReply, Request

__all__ = ["LargeValues", "encoded_in_slices"]

#: The head of a result's row in msgpack: ``{"r": ...}``.
_RESULT_HEAD: Final = b"\x81\xa1r"
_RESULT: Final = "ACK"
_RESULTS: Final = "ACKB"
_PROGRESS: Final = "Progress"
_CRON: Final = "Cron"
#: The message field that holds each command's value.
_FIELDS: Final = {_RESULT: "result", _RESULTS: "results", _PROGRESS: "progress",
                  _CRON: "data"}


class LargeValues:
    """Makes a command's large result or progress ready a slice at a time (the module)."""

    def __init__(self, storage: Storage,
                 waited_on: Callable[[str], bool] | None = None) -> None:
        self._storage = storage
        self.min_chars = AHEAD_MIN_VALUE_BYTES
        # whether a parent waits for a job (its outcome row will copy the result)
        self._waited_on = waited_on

    def value_of(self, request: Request) -> Any:
        """The large value of an ``ACK``, ``ACKB`` or ``Progress`` in a large frame, or
        None (any other command, or a value of few values: looked at no further than
        about :data:`AHEAD_MIN_VALUES` values)."""
        name = _FIELDS.get(request.cmd)
        if name is None or (request.frame_bytes or 0) < AHEAD_MIN_VALUE_BYTES:
            return None
        value = request.msg.get(name)
        if request.cmd == _RESULTS:
            return value if type(value) is list and value else None
        if holds_many(value, AHEAD_MIN_VALUES):
            return value
        if request.cmd == _PROGRESS:
            message = _message_of(request.msg)
            if type(message) is str and len(message) >= AHEAD_MIN_VALUE_BYTES:
                return message  # (a long message as it is: written ahead)
        return None

    async def prepare(self, request: Request, value: Any) -> None:
        """Make ``value`` ready (see the module); the command then runs as any other."""
        if request.cmd == _CRON:
            await self._keep_template(request, value)
            return
        if request.cmd == _PROGRESS:
            if type(value) is not str:
                text = await _json_text(value)
                if text is None:
                    return
                request.msg["progress"] = text
                self._storage.let_go(value)
            await self._message_ahead(request)
            return
        results = value if request.cmd == _RESULTS else [value]
        ids = request.msg.get("ids") if request.cmd == _RESULTS else [request.msg.get("id")]
        encoded: list[Any] = []
        copied: list[Any] = []
        try:
            for index, result in enumerate(results):
                if request.cmd == _RESULTS and not holds_many(result, AHEAD_MIN_VALUES):
                    await trio.lowlevel.checkpoint()
                    continue
                if (row := await _result_row(result)) is not None:
                    self._storage.expect_result(result, row)
                    encoded.append(result)
                    if self._waited(ids, index) and await self._outcome_ahead(result, row):
                        copied.append(result)
                self._storage.let_go(result)
        except BaseException:
            self._release(encoded, copied)  # (cancelled: no reply will release them)
            raise
        if encoded:
            request.replier = OnReply(request.replier,
                                      lambda _reply: self._release(encoded, copied))

    def _release(self, encoded: list[Any], copied: list[Any]) -> None:
        for result in encoded:
            self._storage.release_result(result)
        for result in copied:
            self._storage.release_outcome(result)  # (a no-op once a row took them)

    def _waited(self, ids: Any, index: int) -> bool:
        """Whether a parent waits for the job of the ``index``-th result."""
        if self._waited_on is None or not self._storage.keeps_values_ahead:
            return False
        job_id = ids[index] if type(ids) is list and index < len(ids) else None
        return type(job_id) is str and self._waited_on(job_id)

    async def _outcome_ahead(self, result: Any, row: bytes) -> bool:
        """The result's bytes (its row without the row's head) written ahead a piece a
        transaction, for the parent's outcome row to take (kept_outcomes.py); False
        when the store is full (the row then copies it, as before)."""
        if row[:3] != _RESULT_HEAD:
            return False
        storage = self._storage
        piece = storage.ahead_piece_bytes
        row_key = secrets.token_bytes(AHEAD_ROW_KEY_BYTES)
        view = memoryview(row)[3:]
        written = 0
        try:
            for start in range(0, len(view), piece):
                storage.write_ahead(row_key, written, view[start:start + piece])
                written += 1
                await trio.lowlevel.checkpoint()
        except StorageFullError:
            storage.drop_ahead_pieces(row_key, written)
            return False
        except BaseException:
            storage.drop_ahead_pieces(row_key, written)
            raise
        finally:
            view.release()
        storage.expect_outcome(result, row_key, written)
        return True

    async def _keep_template(self, request: Request, data: Any) -> None:
        """A schedule's template encoded a slice at a time and kept by the store until
        the command is answered (the scheduler keeps it longer, if the schedule is
        stored with it)."""
        encoded = await encoded_in_slices(member_pieces(data))
        if encoded is None:
            return
        storage = self._storage
        storage.keep_encoded(data, encoded)

        def released(_reply: dict[str, Any]) -> None:
            storage.drop_encoded(data)

        request.replier = OnReply(request.replier, released)

    async def _message_ahead(self, request: Request) -> None:
        """The progress message the command will set, when long, written ahead a piece a
        transaction (a store that takes no writes ahead keeps it in the record)."""
        message = _message_of(request.msg)
        piece = self._storage.ahead_piece_bytes
        if not (piece and self._storage.keeps_values_ahead) or type(
                message) is not str or len(message) < AHEAD_MIN_VALUE_BYTES:
            return
        storage = self._storage
        row_key = secrets.token_bytes(AHEAD_ROW_KEY_BYTES)
        written = 0
        try:
            for part in _utf8_pieces(message, piece):
                storage.write_ahead(row_key, written, part)
                written += 1
                await trio.lowlevel.checkpoint()
        except (StorageFullError, UnicodeEncodeError):
            # full, or text with no UTF-8 form: the record holds it, as before
            storage.drop_ahead_pieces(row_key, written)
            return
        except BaseException:
            storage.drop_ahead_pieces(row_key, written)  # (cancelled: no reply comes)
            raise
        storage.expect_progress(message, row_key, written)

        def released(_reply: dict[str, Any]) -> None:
            storage.release_progress(message)  # (a no-op once a record took them)

        request.replier = OnReply(request.replier, released)


def _message_of(msg: dict[str, Any]) -> Any:
    """The value a ``Progress`` makes its message of: its ``message`` when it names
    one, else its progress (text that is not a number)."""
    return msg.get("message") if "message" in msg else msg.get("progress")


def _utf8_pieces(text: str, piece: int) -> Iterator[bytes | memoryview]:
    """``text``'s UTF-8 bytes in pieces of about ``piece`` bytes: an ASCII string's own
    buffer, sliced; any other's characters encoded a piece at a time."""
    view = utf8_view(text) if text.isascii() else None
    if view is not None:
        for start in range(0, len(view), piece):
            yield view[start:start + piece]
        return
    step = max(1, piece // 4)
    for start in range(0, len(text), step):
        yield text[start:start + step].encode()


async def encoded_in_slices(pieces: Iterator[bytes]) -> bytes | None:
    """The ``pieces`` joined, made a slice at a time; None when msgpack cannot hold the
    value (its record's own encoding then falls back as it always does)."""
    parts: list[bytes] = []
    clock = time.perf_counter
    began = clock()
    try:
        for part in pieces:
            parts.append(part)
            if clock() - began >= ENCODE_SLICE_S:
                await trio.lowlevel.checkpoint()
                began = clock()
    except (OverflowError, TypeError, ValueError):
        return None
    joined = b"".join(parts)
    await trio.lowlevel.checkpoint()  # (the join copies it all: not in the command's step)
    return joined


async def _result_row(result: Any) -> bytes | None:
    """``encode_result(result)``, a slice at a time; None when msgpack cannot hold it
    (the finish's own encoding then falls back as it always does)."""
    return await encoded_in_slices(value_pieces({"r": result}))


async def _json_text(value: Any) -> str | None:
    """The core's compact JSON text of ``value``, a slice at a time; None when it has
    none (the core's own path then says what it does)."""
    slicer = Slicer()
    try:
        parts = await run_paused(json_steps(value, slicer), slicer,
                                 trio.lowlevel.checkpoint)
    except (RecursionError, TypeError, ValueError):
        return None
    text = "".join(parts)
    await trio.lowlevel.checkpoint()  # (the join copies it all: its own step)
    return text
