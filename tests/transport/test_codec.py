"""Payload codecs: detection, round trips, hostile input, and the wire rules bunqueue needs."""

from __future__ import annotations

import copy
import datetime
import decimal
import math
import pickle
import uuid
from typing import Any

import cbor2
import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trioqueue.core.job import JobRecord
from trioqueue.transport.wire.codec import (
    ABSENT,
    CBOR,
    JSON,
    MAX_DEPTH,
    MSGPACK,
    Codec,
    DecodeError,
    detect_codec,
    encode_frames,
)
from trioqueue.transport.wire.framing import FrameDecoder

ALL_CODECS = [MSGPACK, CBOR, JSON]
BINARY_CODECS = [MSGPACK, CBOR]
INT32_MIN = -(2**31)
UINT32_MAX = 2**32 - 1


def json_like(*, binary: bool, finite: bool = False, ints: Any = None) -> Any:
    leaves = (
        st.none()
        | st.booleans()
        | (ints if ints is not None else st.integers(INT32_MIN, UINT32_MAX))
        | st.floats(allow_nan=False, allow_infinity=not finite)
        | st.text(max_size=20)
    )
    if binary:
        leaves = leaves | st.binary(max_size=20)
    return st.recursive(
        leaves,
        lambda children: (
            st.lists(children, max_size=5)
            | st.dictionaries(st.text(max_size=8), children, max_size=5)
        ),
        max_leaves=30,
    )


def nested_lists(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


def msgpack_ints(value: Any) -> list[Any]:
    """Every number a msgpack decoder sees in ``value``, without our codec's help."""
    found: list[Any] = []

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            for item in v.values():
                walk(item)
        elif isinstance(v, list):
            for item in v:
                walk(item)
        elif isinstance(v, int) and not isinstance(v, bool):
            found.append(v)

    walk(value)
    return found


# --------------------------------------------------------------------------- detection


@pytest.mark.parametrize("first_byte", range(256))
def test_detection_table(first_byte: int) -> None:
    expected: Codec | None = None
    if 0xA0 <= first_byte <= 0xBB or first_byte == 0xBF:
        expected = CBOR
    elif 0x80 <= first_byte <= 0x8F or first_byte in (0xDE, 0xDF):
        expected = MSGPACK
    assert detect_codec(first_byte) is expected


def test_detection_of_real_request_maps() -> None:
    request = {"cmd": "PUSH", "queue": "emails", "data": {"to": "a@b"}}
    assert detect_codec(msgpack.packb(request)[0]) is MSGPACK
    assert detect_codec(cbor2.dumps(request)[0]) is CBOR
    big = {f"k{i}": i for i in range(70000)}
    assert detect_codec(msgpack.packb(big)[0]) is MSGPACK
    assert detect_codec(cbor2.dumps(big)[0]) is CBOR
    # Indefinite-length CBOR maps, as streaming encoders write them.
    assert detect_codec(bytes.fromhex("bf616101ff")[0]) is CBOR
    assert CBOR.decode(bytes.fromhex("bf616101ff")) == {"a": 1}


def test_codec_names() -> None:
    assert [c.name for c in ALL_CODECS] == ["msgpack", "cbor", "json"]


# ------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("codec", BINARY_CODECS, ids=lambda c: c.name)
@given(value=json_like(binary=True))
def test_binary_codecs_round_trip(codec: Codec, value: Any) -> None:
    assert codec.decode(codec.encode(value)) == value


@given(value=json_like(binary=False, finite=True))
def test_json_round_trips(value: Any) -> None:
    assert JSON.decode(JSON.encode(value)) == value
    assert JSON.decode(JSON.encode_text(value)) == value


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.name)
def test_tuples_encode_as_arrays(codec: Codec) -> None:
    assert codec.decode(codec.encode({"a": (1, "x", (2,))})) == {"a": [1, "x", [2]]}


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.name)
def test_unknown_types_are_refused_on_encode(codec: Codec) -> None:
    with pytest.raises(TypeError):
        codec.encode({"a": object()})


# ---------------------------------------------------------------------- msgpack ints


def test_msgpack_big_int_goes_out_as_float64() -> None:
    out = MSGPACK.encode({"t": 1764412345123})
    assert b"\xcb" in out
    assert b"\xcf" not in out and b"\xd3" not in out
    decoded = msgpack.unpackb(out)
    assert decoded == {"t": 1764412345123.0}
    assert type(decoded["t"]) is float


@pytest.mark.parametrize("value", [0, -1, 127, INT32_MIN, UINT32_MAX, 2**31, -(2**15)])
def test_msgpack_ints_in_32_bit_range_stay_ints(value: int) -> None:
    decoded = msgpack.unpackb(MSGPACK.encode({"n": value}))["n"]
    assert decoded == value
    assert type(decoded) is int


@pytest.mark.parametrize("value", [INT32_MIN - 1, UINT32_MAX + 1, 2**63, -(2**63), 2**64 - 1])
def test_msgpack_ints_outside_32_bit_range_become_floats(value: int) -> None:
    decoded = msgpack.unpackb(MSGPACK.encode({"n": value}))["n"]
    assert decoded == float(value)
    assert type(decoded) is float


def test_msgpack_int_rule_applies_at_any_depth_and_keeps_bools() -> None:
    value = {
        "a": [{"b": 2**40}, 7, True],
        "c": (2**33, [-(2**35)]),
        "d": False,
        "e": {"f": {"g": 2**50}},
        "big": 10**30,
    }
    decoded = msgpack.unpackb(MSGPACK.encode(value))
    assert decoded == {
        "a": [{"b": float(2**40)}, 7, True],
        "c": [float(2**33), [float(-(2**35))]],
        "d": False,
        "e": {"f": {"g": float(2**50)}},
        "big": float(10**30),
    }
    assert decoded["a"][2] is True and decoded["d"] is False
    assert type(decoded["a"][1]) is int


def test_msgpack_int_beyond_float_range_becomes_infinity() -> None:
    decoded = msgpack.unpackb(MSGPACK.encode({"up": 10**400, "down": -(10**400)}))
    assert decoded == {"up": math.inf, "down": -math.inf}


def test_msgpack_int_marker_bytes_inside_strings_do_not_corrupt_output() -> None:
    value = {"s": "\xcf\xd3", "b": b"\xcf\xd3", "n": 5}
    out = MSGPACK.encode(value)
    assert msgpack.unpackb(out) == value


@given(value=json_like(binary=True, ints=st.integers(-(2**70), 2**70)))
def test_msgpack_never_emits_64_bit_ints(value: Any) -> None:
    decoded = msgpack.unpackb(MSGPACK.encode(value))
    assert all(INT32_MIN <= n <= UINT32_MAX for n in msgpack_ints(decoded))


def test_msgpack_encode_does_not_mutate_its_input() -> None:
    inner = {"t": 2**40, "gone": ABSENT}
    value = {"inner": inner, "list": [ABSENT, 2**41], "keep": 1}
    snapshot = copy.deepcopy(value)
    MSGPACK.encode(value)
    assert value == snapshot
    assert value["inner"] is inner


# --------------------------------------------------------------------------- ABSENT


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.name)
def test_absent_map_entries_are_dropped_on_encode(codec: Codec) -> None:
    value = {"a": 1, "b": ABSENT, "c": {"d": ABSENT, "e": [ABSENT, 2]}}
    assert codec.decode(codec.encode(value)) == {"a": 1, "c": {"e": [None, 2]}}


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.name)
def test_absent_at_top_level_encodes_as_null(codec: Codec) -> None:
    assert codec.decode(codec.encode(ABSENT)) is None


def test_absent_is_a_falsy_singleton_that_survives_copy_and_pickle() -> None:
    assert not ABSENT
    assert repr(ABSENT) == "ABSENT"
    assert copy.copy(ABSENT) is ABSENT
    assert copy.deepcopy(ABSENT) is ABSENT
    assert pickle.loads(pickle.dumps(ABSENT)) is ABSENT
    assert type(ABSENT)() is ABSENT


# -------------------------------------------------------------- JS undefined on decode


def test_msgpack_ext0_map_entry_is_dropped() -> None:
    payload = bytes.fromhex("82 a1 61 d4 00 00 a1 62 01".replace(" ", ""))
    assert MSGPACK.decode(payload) == {"b": 1}


def test_msgpack_ext0_in_array_becomes_none() -> None:
    payload = bytes.fromhex("93 01 d4 00 00 c7 01 00 00".replace(" ", ""))
    assert MSGPACK.decode(payload) == [1, None, None]


def test_msgpack_ext0_nested_and_at_top_level() -> None:
    assert MSGPACK.decode(bytes.fromhex("81a16181a162d40000")) == {"a": {}}
    assert MSGPACK.decode(bytes.fromhex("d40000")) is None


@pytest.mark.parametrize("ext_type", [1, 5, 127, -1, -2, -128])
@pytest.mark.parametrize("marker", [b"\xd7", b"\xc7\x08"])  # fixext 8, ext 8
def test_msgpack_other_extension_types_are_refused(ext_type: int, marker: bytes) -> None:
    payload = b"\x81\xa1a" + marker + (ext_type & 0xFF).to_bytes(1, "big") + b"\x00" * 8
    with pytest.raises(DecodeError):
        MSGPACK.decode(payload)


def test_msgpack_timestamps_are_refused() -> None:
    with pytest.raises(DecodeError):
        MSGPACK.decode(msgpack.packb({"a": msgpack.Timestamp(1, 0)}))


def test_cbor_undefined_is_treated_as_absent() -> None:
    assert CBOR.decode(bytes.fromhex("a2616101616cf7")) == {"a": 1}
    assert CBOR.decode(bytes.fromhex("8201f7")) == [1, None]


# --------------------------------------------------------------------------- map keys


@pytest.mark.parametrize("codec", BINARY_CODECS, ids=lambda c: c.name)
def test_numeric_keys_become_strings_like_javascript(codec: Codec) -> None:
    raw = {1: "a", -2: "b", 1.5: "c", 2.0: "d", "s": {3: "e"}}
    payload = msgpack.packb(raw) if codec is MSGPACK else cbor2.dumps(raw)
    assert codec.decode(payload) == {"1": "a", "-2": "b", "1.5": "c", "2": "d", "s": {"3": "e"}}


@pytest.mark.parametrize(
    "payload",
    [
        bytes.fromhex("81c4016101"),  # bin key
        bytes.fromhex("81c001"),  # nil key
        bytes.fromhex("81c301"),  # bool key
        bytes.fromhex("81910101"),  # array key
        bytes.fromhex("818001"),  # map key
        bytes.fromhex("81a16181c4016101"),  # bin key, nested
    ],
)
def test_msgpack_non_scalar_keys_are_refused(payload: bytes) -> None:
    with pytest.raises(DecodeError):
        MSGPACK.decode(payload)


@pytest.mark.parametrize(
    "payload",
    [
        bytes.fromhex("a1416101"),  # byte-string key
        bytes.fromhex("a1f601"),  # null key
        bytes.fromhex("a1f501"),  # true key
        bytes.fromhex("a1810101"),  # array key
        bytes.fromhex("a1a00101"),  # map key
    ],
)
def test_cbor_non_scalar_keys_are_refused(payload: bytes) -> None:
    with pytest.raises(DecodeError):
        CBOR.decode(payload)


def test_duplicate_keys_last_one_wins() -> None:
    assert MSGPACK.decode(bytes.fromhex("82a16101a16102")) == {"a": 2}
    assert CBOR.decode(bytes.fromhex("a2616101616102")) == {"a": 2}
    assert JSON.decode('{"a":1,"a":2}') == {"a": 2}


# ---------------------------------------------------------------------------- nesting


def nested_payloads(depth: int) -> dict[str, bytes]:
    return {
        "msgpack": b"\x91" * depth + b"\xc0",
        "msgpack-maps": b"\x81\xa1a" * depth + b"\xc0",
        "cbor": b"\x81" * depth + b"\xf6",
        "cbor-maps": b"\xa1\x61a" * depth + b"\xf6",
        "json": b"[" * depth + b"]" * depth,
        "json-maps": b'{"a":' * depth + b"null" + b"}" * depth,
    }


CODEC_BY_NAME = {"msgpack": MSGPACK, "cbor": CBOR, "json": JSON}


@pytest.mark.parametrize("kind", list(nested_payloads(1)))
def test_nesting_up_to_the_limit_is_accepted(kind: str) -> None:
    codec = CODEC_BY_NAME[kind.split("-")[0]]
    codec.decode(nested_payloads(MAX_DEPTH)[kind])


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 1000, 100_000])
@pytest.mark.parametrize("kind", list(nested_payloads(1)))
def test_nesting_beyond_the_limit_is_refused(kind: str, depth: int) -> None:
    codec = CODEC_BY_NAME[kind.split("-")[0]]
    with pytest.raises(DecodeError):
        codec.decode(nested_payloads(depth)[kind])


def test_limit_counts_containers_not_scalars() -> None:
    assert MSGPACK.decode(MSGPACK.encode(nested_lists(MAX_DEPTH))) == nested_lists(MAX_DEPTH)


# ------------------------------------------------------------------------- CBOR tags


@pytest.mark.parametrize(
    "payload",
    [
        cbor2.dumps({"at": datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)}),
        cbor2.dumps({"at": datetime.date(2020, 1, 1)}),
        cbor2.dumps(cbor2.CBORTag(1, 1700000000)),
        cbor2.dumps({"x": cbor2.CBORTag(1234, "x")}),
        cbor2.dumps(cbor2.CBORTag(2**40, 1)),
        cbor2.dumps({"n": decimal.Decimal("1.5")}),
        cbor2.dumps({"id": uuid.UUID(int=1)}),
        cbor2.dumps({"s": {1, 2}}),
        bytes.fromhex("d81c81d81d00"),  # an array containing itself
        cbor2.dumps(["aaaa", "aaaa"], string_referencing=True),
        bytes.fromhex("d9d9f7a0"),  # self-described CBOR
        bytes.fromhex("c26161"),  # bignum wrapping a text string
    ],
    ids=lambda p: p.hex()[:16],
)
def test_cbor_tags_are_refused(payload: bytes) -> None:
    with pytest.raises(DecodeError):
        CBOR.decode(payload)


def test_cbor_value_sharing_payload_is_refused() -> None:
    shared = [1]
    with pytest.raises(DecodeError):
        CBOR.decode(cbor2.dumps({"a": shared, "b": shared}, value_sharing=True))


def test_cbor_simple_values_are_refused() -> None:
    with pytest.raises(DecodeError):
        CBOR.decode(bytes.fromhex("a16161f0"))


def test_cbor_bignums_decode_to_ints() -> None:
    value = {"p": 2**100, "n": -(2**100), "edge": 2**64}
    assert CBOR.decode(cbor2.dumps(value)) == value


def test_cbor_huge_bignum_is_refused_cleanly() -> None:
    payload = b"\xc2\x5a\x00\x10\x00\x00" + b"\xff" * 0x100000
    with pytest.raises(DecodeError):
        CBOR.decode(payload)
    with pytest.raises(DecodeError):
        CBOR.decode(cbor2.dumps(-(2**600)))


def test_cbor_encode_passes_through_64_bit_ints() -> None:
    assert CBOR.decode(CBOR.encode({"t": 1764412345123, "u": 2**64 - 1})) == {
        "t": 1764412345123,
        "u": 2**64 - 1,
    }


# ------------------------------------------------------------------------------- JSON


def test_json_encode_is_compact_utf8() -> None:
    assert JSON.encode_text({"a": [1, "é"]}) == '{"a":[1,"é"]}'
    assert JSON.encode({"a": "é"}) == '{"a":"é"}'.encode()


def test_json_non_finite_floats_become_null() -> None:
    value = {"a": math.nan, "b": [math.inf, -math.inf, 1.5]}
    assert JSON.decode(JSON.encode(value)) == {"a": None, "b": [None, None, 1.5]}


def test_json_bytes_become_base64() -> None:
    assert JSON.decode(JSON.encode({"b": b"\x00\xffhi"})) == {"b": "AP9oaQ=="}


@pytest.mark.parametrize("text", ['{"a":NaN}', "[Infinity]", "-Infinity"])
def test_json_non_standard_constants_are_refused(text: str) -> None:
    with pytest.raises(DecodeError):
        JSON.decode(text)


def test_json_accepts_str_and_utf8_bytes() -> None:
    assert JSON.decode('{"a":"é"}') == {"a": "é"}
    assert JSON.decode('{"a":"é"}'.encode()) == {"a": "é"}
    with pytest.raises(DecodeError):
        JSON.decode(b'{"a":"\xff"}')


# ------------------------------------------------------------------------ bad payloads


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("payload", [b"", b"\x81", b"\x80\x00", b"\xc1", b"\xff\xff"])
def test_malformed_payloads_raise_decode_error(codec: Codec, payload: bytes) -> None:
    with pytest.raises(DecodeError):
        codec.decode(payload)


def test_trailing_bytes_are_refused() -> None:
    with pytest.raises(DecodeError):
        MSGPACK.decode(msgpack.packb({"a": 1}) + b"\x00")
    with pytest.raises(DecodeError):
        CBOR.decode(cbor2.dumps({"a": 1}) + b"\x00")
    with pytest.raises(DecodeError):
        JSON.decode('{"a":1} x')


@pytest.mark.parametrize(
    "codec,payload",
    [
        (MSGPACK, b"\xdd\xff\xff\xff\xff"),  # array claiming 4G items
        (MSGPACK, b"\xdb\xff\xff\xff\xff"),  # string claiming 4 GiB
        (CBOR, b"\x9b\x00\x00\x00\x0f\xff\xff\xff\xff"),
        (CBOR, b"\x5b\x00\x00\x00\x0f\xff\xff\xff\xff"),
        (CBOR, b"\xbb\x00\x00\x00\x0f\xff\xff\xff\xff"),
    ],
)
def test_huge_declared_lengths_fail_fast(codec: Codec, payload: bytes) -> None:
    with pytest.raises(DecodeError):
        codec.decode(payload)


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.name)
@given(payload=st.binary(max_size=200))
def test_arbitrary_bytes_only_ever_raise_decode_error(codec: Codec, payload: bytes) -> None:
    try:
        codec.decode(payload)
    except DecodeError:
        pass


@given(text=st.text(max_size=200))
def test_arbitrary_text_only_ever_raises_decode_error_for_json(text: str) -> None:
    try:
        JSON.decode(text)
    except DecodeError:
        pass


@pytest.mark.parametrize("codec", BINARY_CODECS, ids=lambda c: c.name)
@given(value=json_like(binary=True), data=st.data())
def test_corrupted_valid_payloads_only_ever_raise_decode_error(
    codec: Codec, value: Any, data: st.DataObject
) -> None:
    payload = bytearray(codec.encode(value))
    if payload:
        index = data.draw(st.integers(0, len(payload) - 1))
        payload[index] = data.draw(st.integers(0, 255))
        cut = data.draw(st.integers(0, len(payload)))
        payload = payload[:cut]
    try:
        codec.decode(bytes(payload))
    except DecodeError:
        pass


# ------------------------------------------------------------------------ frame batches


@pytest.mark.parametrize("codec", BINARY_CODECS, ids=lambda c: c.name)
def test_encode_frames_produces_one_decodable_frame_per_reply(codec: Codec) -> None:
    replies = [{"ok": True, "reqId": str(i), "gone": ABSENT} for i in range(5)]
    wire = encode_frames(codec, replies)
    frames = FrameDecoder(1 << 20).feed(wire)
    assert [codec.decode(f) for f in frames] == [{"ok": True, "reqId": str(i)} for i in range(5)]


def test_encode_frames_of_nothing_is_empty() -> None:
    assert encode_frames(MSGPACK, []) == b""


@pytest.mark.parametrize("jobs", [1, 3], ids=["one job", "several jobs"])
def test_msgpack_int_rule_applies_to_job_objects_in_replies(jobs: int) -> None:
    """PULL and PULLB replies: broker timestamps go out as floats, a client's wide ints
    (in data, options, progress) too, its narrow ints stay ints; the job is not changed."""
    job = JobRecord(id="j", queue="q", name="n", data={"big": 2**40, "small": 7, "list": [2**33]},
              created_at=1764412345123, run_at=1764412345123, last_heartbeat=1764412345123,
              priority=2**35, progress=50, ttl=UINT32_MAX + 1)
    wire = job.to_wire()
    reply = ({"ok": True, "job": wire} if jobs == 1
             else {"ok": True, "jobs": [wire] * jobs, "tokens": ["t"] * jobs})
    decoded = msgpack.unpackb(MSGPACK.encode(reply))
    for got in [decoded["job"]] if jobs == 1 else decoded["jobs"]:
        assert got["data"] == {"big": float(2**40), "small": 7, "list": [float(2**33)]}
        assert type(got["data"]["small"]) is int and type(got["progress"]) is int
        assert type(got["priority"]) is float and type(got["ttl"]) is float
        assert type(got["createdAt"]) is float and got["createdAt"] == 1764412345123.0
    assert wire["data"]["big"] == 2**40 and wire["priority"] == 2**35  # untouched
