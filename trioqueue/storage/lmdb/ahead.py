"""Long data strings written to LMDB ahead of their job, a piece a transaction.

A large job's data row was put and committed in the push's own commit: one step as
long as the data, during which no other write could commit (one writer, one
LMDB write lock). Written ahead instead (``actors/ahead_writes.py`` drives it), each
piece of :data:`AHEAD_PIECE_BYTES` is its own short transaction, and other commits
run between two. The record's commit then only claims the rows (``ahead_claims``, in
the same transaction as the record): a crash before it leaves pieces no claim points
to, which :meth:`AheadRows.sweep` deletes when the store opens; a push that is
refused leaves its pieces to :meth:`AheadRows.drop_pieces`. Deleting a job deletes its
claim and pieces (``LmdbStorage._delete``); so does writing it new data.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import lmdb

from .. import keys as K
from ..kept_data import Row
from ..port import StorageFullError
from .growth import HighWaterMark

#: Bytes of one piece, one transaction each (about 0.25 ms to put and commit here).
AHEAD_PIECE_BYTES: Final = 1 << 20


class AheadRows:
    """The ``ahead`` pieces of one LMDB store and the claims that point to them.

    Given the store's environment, its named databases, its high-water mark and how
    to grow its map (the store owns the map's size): the pieces are this object's own
    writes, and the store's commits call it to claim or drop them inside their
    transaction.
    """

    __slots__ = ("_env", "_ahead", "_claims", "_progress_claims", "_outcome_claims",
                 "_mark", "_grow", "_max_map_size_bytes")

    def __init__(self, env: lmdb.Environment, dbs: Mapping[bytes, Any], mark: HighWaterMark,
                 grow: Callable[[], None], max_map_size_bytes: int) -> None:
        self._env = env
        self._ahead = dbs[K.DB_AHEAD]
        self._claims = dbs[K.DB_AHEAD_CLAIMS]
        self._progress_claims = dbs[K.DB_PROGRESS_CLAIMS]
        self._outcome_claims = dbs[K.DB_OUTCOME_CLAIMS]
        self._mark = mark
        self._grow = grow
        self._max_map_size_bytes = max_map_size_bytes

    def write(self, row_key: bytes, index: int, piece: Row) -> None:
        """Put one piece in a transaction of its own. A full store raises
        :class:`StorageFullError` with nothing written (the caller drops the pieces
        before it and takes the ordinary path, which admission decides)."""
        key = K.ahead_piece_key(row_key, index)
        while True:
            try:
                with self._env.begin(write=True) as txn:
                    txn.put(key, piece, db=self._ahead)
                break
            except lmdb.MapFullError:
                if self._env.info()["map_size"] >= self._max_map_size_bytes:
                    raise StorageFullError("no room to write a job's data ahead") from None
                self._grow()
        self._mark.forget()  # (grown by an unencoded write: measured again when asked)

    def drop_pieces(self, row_key: bytes, pieces: int) -> None:
        """Delete the pieces of rows no record took (a refused push, a failed write)."""
        with self._env.begin(write=True) as txn:
            self.delete_pieces(txn, row_key, pieces)

    def delete_pieces(self, txn: lmdb.Transaction[bytes], row_key: bytes, pieces: int
                      ) -> None:
        for index in range(pieces):
            txn.delete(K.ahead_piece_key(row_key, index), db=self._ahead)

    def drop_claim(self, txn: lmdb.Transaction[bytes], jkey: bytes, db: Any = None
                   ) -> None:
        """The job's claim (of its data, or in ``db``), if any, and its pieces, deleted
        inside ``txn``."""
        raw = txn.pop(jkey, db=self._claims if db is None else db)
        if raw is not None:
            self.delete_pieces(txn, *K.decode_claim(raw))

    def claim_progress(self, txn: lmdb.Transaction[bytes], jkey: bytes, row_key: bytes,
                       pieces: int) -> None:
        """The job's progress message is in these rows (an empty ``row_key``: in its
        record); the rows of the message before go (storage/kept_progress.py)."""
        if not row_key:
            self.drop_claim(txn, jkey, self._progress_claims)
            return
        old = txn.replace(jkey, K.encode_claim(row_key, pieces), db=self._progress_claims)
        if old is not None and bytes(old[:K.AHEAD_ROW_KEY_BYTES]) != row_key:
            self.delete_pieces(txn, *K.decode_claim(old))

    def claim(self, txn: lmdb.Transaction[bytes], jkey: bytes, row_key: bytes,
              pieces: int, db: Any = None) -> None:
        """``jkey`` (a job's, or a ``deps`` key in ``db``) claims these rows; the rows
        it claimed before go."""
        old = txn.replace(jkey, K.encode_claim(row_key, pieces),
                          db=self._claims if db is None else db)
        if old is not None and bytes(old[:K.AHEAD_ROW_KEY_BYTES]) != row_key:
            self.delete_pieces(txn, *K.decode_claim(old))

    def text(self, txn: lmdb.Transaction[bytes], row_key: bytes, pieces: int
             ) -> bytes | None:
        """The pieces joined; None when one is missing."""
        parts = self.parts(txn, row_key, pieces)
        return None if parts is None else b"".join(parts)

    def parts(self, txn: lmdb.Transaction[bytes], row_key: bytes, pieces: int
              ) -> list[bytes] | None:
        parts = []
        for index in range(pieces):
            part = txn.get(K.ahead_piece_key(row_key, index), db=self._ahead)
            if part is None:
                return None
            parts.append(part)
        return parts

    def sweep(self) -> int:
        """Delete the pieces no claim points to; how many (run when the store opens)."""
        with self._env.begin(write=True) as txn:
            if not txn.stat(self._ahead)["entries"]:
                return 0
            claimed: set[bytes] = set()
            for db in (self._claims, self._progress_claims, self._outcome_claims):
                with txn.cursor(db=db) as cur:
                    claimed.update(K.decode_claim(raw)[0] for raw in cur.iternext(keys=False))
            stale = []
            with txn.cursor(db=self._ahead) as cur:
                for key in cur.iternext(values=False):
                    if bytes(key[:K.AHEAD_ROW_KEY_BYTES]) not in claimed:
                        stale.append(bytes(key))
            for key in stale:
                txn.delete(key, db=self._ahead)
        return len(stale)
