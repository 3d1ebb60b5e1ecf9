"""A PUSH's long data string, written to the store before the command runs (issue 12).

One writer commits every queue's writes, one commit at a time: a job's 8.5 MB data
row, put and committed with its record, held every other client's commit (and the
event loop) for about 2 ms. A session that decodes a ``PUSH`` whose data is one long
string (:data:`AHEAD_MIN_BYTES` or more) first has the string written here, a piece of
``Storage.ahead_piece_bytes`` a transaction with a checkpoint after each, so other
commits and tasks run between two pieces; then the command runs as any other, and its
record's commit takes the rows (storage/kept_data.py) instead of writing the data.
Only the pushing connection waits for its own pieces.

Nothing is lost either way: a push refused (a full store, a duplicate id, bad input)
leaves rows no record took, which :meth:`AheadWriter.release` deletes once the
command is answered; a crash in between leaves pieces no claim points to, deleted
when the store opens (storage/lmdb_ahead.py). A write ahead that does not fit, or a
connection closed in the middle, drops what it wrote, and the command then takes the
ordinary path, where admission decides.

The room a write ahead takes is checked first, as admission would check the command
(``admit_need``), and counted while it runs, so writes ahead of several connections at
once cannot together run into the reserve kept for finishing accepted jobs.
"""

from __future__ import annotations

import secrets
from typing import Final

import trio

from ..core.job_data import MAX_DATA_CHARS
from ..storage.keys import AHEAD_ROW_KEY_BYTES
from ..storage.port import Storage, StorageFullError
from ..utf8_views import utf8_view
from .admission import StoreRoom
from .request import OnReply, Request

__all__ = ["AHEAD_MIN_BYTES", "AheadWriter"]

#: A data string at least this long is written ahead (a shorter one goes with its
#: record: under about 0.25 ms to put and commit here).
AHEAD_MIN_BYTES: Final = 1 << 20


class AheadWriter:
    """Writes long PUSH data ahead of the command (see the module)."""

    def __init__(self, storage: Storage, room: StoreRoom | None,
                 max_chars: int = MAX_DATA_CHARS) -> None:
        self._storage = storage
        self._room = room  # None: the store has no limit
        self._max_chars = max_chars  # the data limit: longer is refused anyway
        self._piece = storage.ahead_piece_bytes
        self._taken = 0  # room held by writes ahead under way
        self.min_chars = AHEAD_MIN_BYTES  # (a shorter string is never written ahead)

    def text_of(self, request: Request) -> str | None:
        """The data string of a PUSH worth writing ahead, else None."""
        if request.cmd != "PUSH":
            return None
        data = request.msg.get("data")
        if type(data) is not str or not AHEAD_MIN_BYTES <= len(data) <= self._max_chars:
            return None  # (longer than the data limit allows: refused anyway)
        return data

    async def write(self, request: Request, text: str) -> bool:
        """Write ``text`` ahead; True when it was, and ``request``'s reply will release
        what no record took. False: nothing is left written (the ordinary path)."""
        view = utf8_view(text)
        if view is None:
            return False
        need = 0
        if self._room is not None:
            need = self._room.admit_need(request.frame_bytes, 1)
            if self._room.storage_room(exact=False) - self._taken < need:
                return False  # maybe full: admission decides, measuring exactly
        row_key = secrets.token_bytes(AHEAD_ROW_KEY_BYTES)
        written = 0
        self._taken += need
        try:
            for start in range(0, len(view), self._piece):
                self._storage.write_ahead(row_key, written, view[start:start + self._piece])
                written += 1
                await trio.lowlevel.checkpoint()
        except StorageFullError:
            self._storage.drop_ahead_pieces(row_key, written)
            return False
        except BaseException:
            # cancelled (the connection closed): what was written goes, synchronously
            self._storage.drop_ahead_pieces(row_key, written)
            raise
        finally:
            self._taken -= need
        self._storage.expect_ahead(text, row_key, written)
        # answered: the rows no record took go (release_ahead is a no-op once taken)
        request.replier = OnReply(request.replier,
                                  lambda _reply: self._storage.release_ahead(text))
        return True
