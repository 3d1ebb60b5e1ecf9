"""PostgreSQL's records with data encoded ahead (storage/pg/encoded.py): the record
joined from its fields and its data's pieces reads back as the record, its data found
undecoded by a read for a command, and data no record took freed by the graveyard."""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from trioqueue.core import native
from trioqueue.core.large_values.graveyard import Graveyard
from trioqueue.core.writes import FinishJob, PutJob
from trioqueue.storage.keys import decode_value, encode_value
from trioqueue.storage.pg.encoded import EncodedData, packed_record
from trioqueue.storage.pg.plan import plan_batch
from trioqueue.storage.value_pieces import Packed, unpacked_steps, value_pieces
from trioqueue.utf8_views import utf8_view

_DATA = [
    [{"a": i} for i in range(50_000)],
    {"rows": [[i, "x"] for i in range(40_000)], "n": 1},
    "é" * 200_000,
]


def _ahead(encoded: EncodedData, data: Any) -> None:
    """``data`` written ahead as actors/ahead_writes.py writes it (pieces of 64 KiB)."""
    key = secrets.token_bytes(16)
    if type(data) is str:
        view = utf8_view(data)
        if native.PURE_PYTHON:  # no view of the string's own bytes: a copy of them
            assert view is None
            view = memoryview(data.encode())
        assert view is not None
        pieces: list[Any] = [view[i:i + 65536] for i in range(0, len(view), 65536)]
    else:
        row = b"".join(value_pieces({"d": data}))
        pieces = [row[i:i + 65536] for i in range(0, len(row), 65536)]
    for piece in pieces:
        encoded.write(key, piece)
    encoded.expect(data, key, len(pieces))


def _record(data: Any, state: str = "active") -> dict[str, Any]:
    return {"id": "j", "queue": "q", "data": data, "state": state, "attempts": 1,
            "opts": {"k": [1, 2]}}


def _unpacked(raw: bytes) -> Any:
    steps = unpacked_steps(raw)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


@pytest.mark.parametrize("data", _DATA, ids=["maps", "nested", "text"])
def test_a_record_joined_from_data_encoded_ahead_reads_back_as_the_record(data: Any
                                                                          ) -> None:
    encoded = EncodedData()
    _ahead(encoded, data)
    record = _record(data)
    raw = encoded.record("j", record)
    assert decode_value(raw) == record
    # the next record of the job joins the same bytes (its data is not encoded again)
    again = _record(data, state="waiting")
    assert decode_value(encoded.record("j", again)) == again
    packed = packed_record(raw)
    assert type(packed["data"]) is Packed
    assert _unpacked(packed["data"].raw)["d"] == data
    assert {k: v for k, v in packed.items() if k != "data"} == {
        k: v for k, v in record.items() if k != "data"}


def test_a_large_record_encoded_whole_is_read_with_its_data_stepped_over() -> None:
    record = {"id": "j", "data": [{"a": i} for i in range(50_000)], "state": "completed"}
    packed = packed_record(encode_value(record))  # (data not last: stepped over)
    assert packed["state"] == "completed"
    assert _unpacked(packed["data"].raw)["d"] == record["data"]
    small = {"id": "j", "data": [1, 2], "state": "completed"}
    assert packed_record(encode_value(small)) == small


def test_the_plan_takes_the_bytes_and_forgets_them_when_the_job_finishes() -> None:
    encoded = EncodedData()
    data = _DATA[0]
    _ahead(encoded, data)
    plan = plan_batch([PutJob("j", _record(data))], encoded)
    assert decode_value(plan.live_put[b"j"][1])["data"] == data
    finished = _record(data, state="completed")
    plan = plan_batch([FinishJob("j", "q", "completed", 0, finished, False, None)],
                      encoded)
    assert decode_value(plan.finished_put[b"j"][3]) == finished
    encoded.release(data)  # (answered: the record took it, nothing to free)
    assert not encoded._held and not encoded._ahead


def test_data_no_record_took_goes_to_the_graveyard_when_released() -> None:
    encoded = EncodedData()
    encoded.graveyard = graveyard = Graveyard()
    taken, refused = _DATA[0], [{"b": i} for i in range(1000)]
    _ahead(encoded, taken)
    _ahead(encoded, refused)
    encoded.record("j", _record(taken))
    encoded.release(taken)
    assert not graveyard.pending
    encoded.release(refused)
    assert graveyard.pending
