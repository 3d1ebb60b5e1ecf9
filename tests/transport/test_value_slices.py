"""A reply holding many values is encoded a run of values at a time, to the bytes the
codec's own encode gives (transport/large/value_slices.py)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trioqueue.core.job import JobWire
from trioqueue.transport.large import value_slices
from trioqueue.transport.large.value_slices import (
    SlicedValue,
    SlicedValueFrame,
    encode_steps,
    encoded_whole,
    heavy,
    weight,
)
from trioqueue.transport.slicing import Slicer
from trioqueue.transport.wire.codec import ABSENT, CBOR, JSON, MSGPACK, Codec
from trioqueue.transport.wire.framing import HEADER_SIZE

CODECS = [MSGPACK, CBOR, JSON]

# Every kind of value the codecs treat alone: 64-bit and huge integers (msgpack sends
# them as floats), non-finite floats (JSON sends null), bytes (base64 in JSON), absent
# entries (dropped from maps, null in arrays), and around every header width.
leaves = (st.none() | st.booleans() | st.integers() | st.floats()
          | st.integers(min_value=-(2**70), max_value=2**70)
          | st.text(max_size=20) | st.binary(max_size=20) | st.just(ABSENT))
values = st.recursive(
    leaves,
    lambda inner: (st.lists(inner, max_size=40)
                   | st.dictionaries(st.text(max_size=8), inner, max_size=40)
                   | st.lists(st.integers(0, 3), min_size=14, max_size=300)),
    max_leaves=400)


@pytest.fixture
def small_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs of a few values, so that small values are walked as large ones are."""
    monkeypatch.setattr(value_slices, "RUN_VALUES", 5)


def _whole(codec: Codec, value: Any) -> bytes:
    return JSON.encode_text(value).encode() if codec is JSON else codec.encode(value)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # (set once)
@given(value=values)
def test_the_walk_gives_the_codec_s_bytes(small_runs: None, codec: Codec, value: Any) -> None:
    assert encoded_whole(codec, value) == _whole(codec, value)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("n", [0, 1, 15, 16, 23, 24, 255, 256, 65_535, 65_536, 70_000])
def test_headers_of_every_width(codec: Codec, n: int) -> None:
    for value in ([{"a": 1}] * n, {str(i): [i] for i in range(n)}):
        assert encoded_whole(codec, value) == _whole(codec, value)


def test_a_job_in_a_reply_keeps_the_job_s_rules(small_runs: None) -> None:
    """A job object's other fields are the broker's own: msgpack's int rule looks only
    at its client-valued fields, in a run of the job as in the whole reply."""
    job = JobWire(id="1", seq=2**40, data=[{"n": 2**40}] * 30, attempts=0)
    reply = {"ok": True, "job": job, "reqId": "r"}
    for codec in CODECS:
        assert encoded_whole(codec, reply) == _whole(codec, reply)


def test_weight_counts_every_value_and_stops_at_its_limit() -> None:
    assert weight([1, [2, 3], {"a": [4]}], 100) == 3 + 2 + 1 + 1
    assert weight([[[[1]]]], 100) == 4
    assert weight([[0] * 1000] * 1000, 10_000) > 10_000
    assert not heavy({"ok": True, "job": JobWire(data=[1] * 100)})
    assert heavy({"ok": True, "job": JobWire(data=[{"a": 1}] * 10_000)})
    assert heavy({"ok": True, "result": [[1] * 1000] * 10})


@pytest.mark.parametrize("codec", [MSGPACK, CBOR], ids=lambda c: c.name)
def test_a_frame_is_made_a_slice_per_step_then_given_in_pieces(codec: Codec) -> None:
    reply = {"ok": True, "job": JobWire(id="j", data=[{"a": 1}] * 200_000), "reqId": 1}
    frame = SlicedValueFrame(codec, reply)
    slices = 0
    while not frame.encode_slice():
        slices += 1
    assert slices > 3
    pieces = []
    while not frame.sent:
        piece = frame.step()
        assert piece is not None
        pieces.append(bytes(piece))
    assert frame.unsent_bytes == 0
    data = b"".join(pieces)
    payload = codec.encode(reply)
    assert int.from_bytes(data[:HEADER_SIZE], "big") == len(payload)
    assert data[HEADER_SIZE:] == payload


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_a_message_is_made_a_slice_per_step(codec: Codec) -> None:
    reply = {"ok": True, "job": JobWire(id="j", data=[{"a": 1}] * 200_000), "reqId": 1}
    message = SlicedValue(codec, reply)
    steps = 1
    while (whole := message.step()) is None:
        steps += 1
    assert steps > 3
    assert whole == (JSON.encode_text(reply) if codec is JSON else codec.encode(reply))


def test_the_walk_yields_when_its_slice_is_over() -> None:
    steps = encode_steps(MSGPACK, [{"a": 1}] * 100_000, Slicer(0.0))
    count = 0
    try:
        while True:
            next(steps)
            count += 1
    except StopIteration:
        pass
    assert count > 10
