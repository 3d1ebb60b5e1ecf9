"""A parent's copy of a child's large result, written ahead in pieces.

When a child completes, its parent keeps the child's result in the child's outcome row
(``deps``), written in the child's own commit so a crash cannot separate them. The
row is a copy, not a pointer to the child's result row: removing the child
(``removeOnComplete``, ``Clean``) must not lose the parent's value. For a result of a
million small maps that copy is 4 MB made and put in the ``ACK``'s commit, one step
of the event loop.

So when an ``ACK`` carries a result of many values and a parent waits for its job,
``actors/large_values.py`` writes the result's bytes (its row without the row's head)
ahead into the ``ahead`` rows, a piece a transaction, as a progress message is
(:mod:`.kept_progress`). The outcome row that carries that very result is then written
without it: its other fields and :data:`OUTCOME_KEPT`; its commit claims the pieces in
``outcome_claims``, under the same key as the outcome row. Only the first outcome row
of the result takes them (a child with several parents copies it for the others as
before). A later row of the same pair drops the claim and its pieces, the parent's
delete deletes both with its rows, and pieces no claim points to (a crash before the
commit) are swept when the store opens.

Read back, the pieces are joined after the row's other fields: the bytes are those of
the whole outcome row, so a large one goes to the parent's actor undecoded as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, NamedTuple

import msgpack

from .keys import decode_value, encode_value

__all__ = ["OUTCOME_KEPT", "KeptOutcomes", "OutcomeClaim", "joined_outcome", "kept_stub"]

#: The field of an outcome row written without its result, the result's bytes being in
#: the pieces its claim names.
OUTCOME_KEPT: Final = "resultKept"
_RESULT: Final = "result"
#: A stub row is the outcome's small fields: anything longer is an ordinary row.
_STUB_MAX_BYTES: Final = 4096
_MARK: Final = OUTCOME_KEPT.encode()


class OutcomeClaim(NamedTuple):
    """The rows written ahead that hold one result's bytes (msgpack)."""

    row_key: bytes
    pieces: int


class KeptOutcomes:
    """Results written ahead for their parents' outcome rows, not taken yet (the
    module). A take is staged and becomes final at :meth:`settle` (the commit
    succeeded), or is undone at :meth:`discard`."""

    __slots__ = ("ahead", "_taken", "staging")

    def __init__(self) -> None:
        # id(result) -> (result, its rows)
        self.ahead: dict[int, tuple[Any, OutcomeClaim]] = {}
        self._taken: list[int] = []
        self.staging = False

    def expect(self, result: Any, claim: OutcomeClaim) -> None:
        self.ahead[id(result)] = (result, claim)

    def forget_ahead(self, result: Any) -> OutcomeClaim | None:
        """No outcome row will take ``result``'s rows now: the rows to drop, if none
        took them."""
        entry = self.ahead.get(id(result))
        if entry is None or entry[0] is not result:
            return None
        del self.ahead[id(result)]
        return entry[1]

    def take(self, outcome: Any) -> tuple[bytes, OutcomeClaim] | None:
        """The stub row of ``outcome`` and the rows its commit claims, when its result
        was written ahead and no row took it yet; None otherwise."""
        if type(outcome) is not dict or _RESULT not in outcome:
            return None
        result = outcome[_RESULT]
        entry = self.ahead.get(id(result))
        if entry is None or entry[0] is not result or id(result) in self._taken:
            return None
        stub = {key: value for key, value in outcome.items() if key != _RESULT}
        stub[OUTCOME_KEPT] = True
        self._taken.append(id(result))
        self.staging = True
        return encode_value(stub), entry[1]

    def settle(self) -> None:
        for key in self._taken:
            self.ahead.pop(key, None)
        self._taken.clear()
        self.staging = False

    def discard(self) -> None:
        self._taken.clear()
        self.staging = False


def kept_stub(raw: bytes) -> dict[str, Any] | None:
    """The outcome row ``raw`` decoded when it is a stub whose result was written
    ahead; None for any other row (looked at without decoding it)."""
    if len(raw) > _STUB_MAX_BYTES or _MARK not in raw:
        return None
    row = decode_value(raw)
    return row if type(row) is dict and row.get(OUTCOME_KEPT) is True else None


def joined_outcome(stub: dict[str, Any], pieces: Callable[[], list[bytes] | None],
                   job: str) -> bytes:
    """The whole outcome row: the stub's fields, then the result, its bytes being the
    pieces. A piece missing is a broken store: it raises, naming the row."""
    parts = pieces()
    if parts is None:
        raise RuntimeError(f"dependency outcome {job!r}: its result's rows are missing")
    head = [_packer.pack_map_header(len(stub))]
    for key, value in stub.items():
        if key != OUTCOME_KEPT:
            head.append(_packer.pack(key))
            head.append(_packer.pack(value))
    head.append(_packer.pack(_RESULT))
    return b"".join(head + parts)


_packer: Final = msgpack.Packer(use_bin_type=True, autoreset=True)
