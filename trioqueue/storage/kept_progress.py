"""A job's long progress message kept apart from its record, written ahead in pieces.

An object's progress becomes its compact JSON text, the job's progress message: for a
million small maps, 8 MB of text. Kept inside the record, every write of the record
(the progress itself, the finish, a retry) encoded it twice (the record whole, then
without its data) and put it, one step of the event loop of tens of milliseconds.

So the text of a large ``Progress`` is written ahead of the command
(actors/large_values.py), a piece a transaction into the ``ahead`` rows, as a long
data string is (storage/lmdb/ahead.py), and the record that carries that very string
takes the pieces: it is written without its message, :data:`PROGRESS_KEPT` naming
the rows, and its commit claims them (``progress_claims``, one row per job). Later
writes of the record with the same string name the same rows and write no text. A
new progress replaces the claim (the old pieces go in the same commit), a short one
drops it; deleting the job deletes the claim and its pieces. A crash before the
record's commit leaves pieces no claim points to, swept when the store opens.

Read back (a finished job's record, recovery), the pieces are joined and the message
put back in place (:func:`~.kept_data.with_data`); a recovered live job's message is
held as stored, so its next write does not write it again.

A job's held message is forgotten when the job finishes (its last write, normally): a
finished job read back and written again (a retry) writes its message in its record,
and the old claim stays until the job is deleted.
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

__all__ = ["PROGRESS_FIELD", "PROGRESS_KEPT", "KeptProgress", "ProgressClaim"]

#: The record field of the message, and the one that names its rows when kept apart:
#: ``[row key, pieces]``.
PROGRESS_FIELD: Final = "progressMessage"
PROGRESS_KEPT: Final = "progressKept"


class ProgressClaim(NamedTuple):
    """The rows written ahead that hold one progress message's UTF-8 bytes."""

    row_key: bytes
    pieces: int


#: What :meth:`KeptProgress.apart` asks of the commit: claim these rows for the job,
#: or (:data:`DROP`) drop the job's claim and its rows.
DROP: Final = ProgressClaim(b"", 0)


class KeptProgress:
    """Progress messages written ahead (not taken yet) and those stored apart, per job
    (see the module). Changes are staged by :meth:`apart` and :meth:`forget`, and take
    effect at :meth:`settle` (the commit succeeded) or go at :meth:`discard`."""

    __slots__ = ("held", "ahead", "_staged", "_taken", "active", "staging")

    def __init__(self) -> None:
        # job id -> (the message, its rows): stored apart for that job
        self.held: dict[str, tuple[str, ProgressClaim]] = {}
        # id(text) -> (text, its rows): written ahead, no record took them yet
        self.ahead: dict[int, tuple[str, ProgressClaim]] = {}
        self._staged: dict[str, tuple[str, ProgressClaim] | None] = {}
        self._taken: list[int] = []
        self.active = False  # anything held, written ahead or staged
        self.staging = False

    def _refresh(self) -> None:
        self.active = bool(self.held or self.ahead or self._staged)

    def expect(self, text: str, claim: ProgressClaim) -> None:
        """``text``'s UTF-8 bytes are in ``claim``'s rows: the next record whose
        message is this very string takes them."""
        self.ahead[id(text)] = (text, claim)
        self.active = True

    def forget_ahead(self, text: str) -> ProgressClaim | None:
        """No record will take ``text``'s rows now: the rows to drop, if none took
        them."""
        entry = self.ahead.get(id(text))
        if entry is None or entry[0] is not text:
            return None
        del self.ahead[id(text)]
        self._refresh()
        return entry[1]

    def hold(self, job_id: str, text: str, claim: ProgressClaim) -> None:
        """A recovered record's message, as stored."""
        self.held[job_id] = (text, claim)
        self.active = True

    def _stored(self, job_id: str) -> tuple[str, ProgressClaim] | None:
        if job_id in self._staged:
            return self._staged[job_id]
        return self.held.get(job_id)

    def apart(self, job_id: str, record: dict[str, Any]
              ) -> tuple[dict[str, Any], ProgressClaim | None]:
        """The record to encode (without its message when that is kept apart) and what
        its commit does to the job's claim: rows to claim, :data:`DROP`, or None."""
        text = record.get(PROGRESS_FIELD)
        stored = self._stored(job_id)
        if stored is not None and stored[0] is text:
            return _without_message(record, stored[1]), None
        entry = self.ahead.get(id(text)) if type(text) is str else None
        if entry is not None and entry[0] is text and id(text) not in self._taken:
            self._taken.append(id(text))
            self._staged[job_id] = entry
            self.staging = True
            return _without_message(record, entry[1]), entry[1]
        if stored is not None:  # another message now, in the record: the rows go
            self._staged[job_id] = None
            self.staging = True
            return record, DROP
        return record, None

    def forget(self, job_id: str) -> None:
        """The job finished or was deleted: its message is not held any more (its rows
        stay with a finished record, or go with the job's delete)."""
        if job_id in self.held or job_id in self._staged:
            self._staged[job_id] = None
            self.staging = True

    def settle(self) -> None:
        self.staging = False
        for job_id, stored in self._staged.items():
            if stored is None:
                self.held.pop(job_id, None)
            else:
                self.held[job_id] = stored
        self._staged.clear()
        for key in self._taken:
            self.ahead.pop(key, None)
        self._taken.clear()
        self._refresh()

    def discard(self) -> None:
        self.staging = False
        self._staged.clear()
        self._taken.clear()
        self._refresh()


def _without_message(record: dict[str, Any], claim: ProgressClaim) -> dict[str, Any]:
    rest = dict(record)
    del rest[PROGRESS_FIELD]
    rest[PROGRESS_KEPT] = [claim.row_key, claim.pieces]
    return rest
