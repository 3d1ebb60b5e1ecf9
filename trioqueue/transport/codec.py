"""Payload codecs: msgpack and CBOR on TCP (chosen per connection), JSON on WebSocket text.

Decoding is the broker's main exposure to hostile input, so every codec funnels
its result through one validating walk that accepts only the JSON-like data
model the protocol uses (maps with string keys, arrays, strings, bytes, numbers,
booleans, null) and nothing a decoder library might conjure from tags or
extension types. The walk also bounds nesting depth, so later code can recurse
over decoded values without fear.

JavaScript ``undefined`` (msgpack ext type 0, CBOR simple value 23) means "not
present": map entries holding it are dropped and array slots become ``None``.
On the way out, :data:`ABSENT` plays the same role: map entries holding it are
dropped (not sent as ``undefined``, which saves bytes and is indistinguishable
to a JavaScript reader) and array slots become null.

Encoding is tuned for the common case: the native packer runs once and its
output is returned untouched unless a rare condition forces a rewrite.
"""

from __future__ import annotations

import base64
import io
import json
import math
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any, Final, NoReturn

import cbor2
import msgpack

from trioqueue.transport.framing import frame_header

from ..core.job import CLIENT_VALUED, JobWire

__all__ = [
    "ABSENT",
    "CBOR",
    "JSON",
    "MAX_BIGNUM_BYTES",
    "MAX_DEPTH",
    "MSGPACK",
    "CborCodec",
    "Codec",
    "DecodeError",
    "JsonCodec",
    "MsgpackCodec",
    "detect_codec",
    "encode_frames",
]

#: Deepest container nesting a decoded payload may have; a top-level map is depth 1.
MAX_DEPTH: Final = 64

# bunqueue's JavaScript clients decode msgpack int64/uint64 as BigInt, which their
# code does not expect; integers outside the 32-bit range therefore go out as float64,
# exactly what a JavaScript encoder would have produced for such a number.
_INT_MIN: Final = -(2**31)
_INT_MAX: Final = 2**32 - 1


class DecodeError(Exception):
    """The payload is not a well-formed message in the connection's codec."""


class _Absent:
    """Type of :data:`ABSENT`; a singleton so identity checks are reliable."""

    __slots__ = ()
    _instance: _Absent | None = None

    def __new__(cls) -> _Absent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        # Pickling and copying must hand back the singleton, not a lookalike.
        return "ABSENT"


#: JavaScript ``undefined``: a map entry holding it is treated as not present.
ABSENT: Final = _Absent()

_CBOR_UNDEFINED: Final = cbor2.undefined
_isfinite: Final = math.isfinite


class Codec(ABC):
    """Turns one frame payload into a protocol value and back."""

    name: str

    @abstractmethod
    def decode(self, payload: bytes) -> Any:
        """Decode and validate ``payload``; raises :class:`DecodeError` on anything bad."""

    @abstractmethod
    def encode(self, obj: Any) -> bytes:
        """Encode ``obj``, dropping map entries whose value is :data:`ABSENT`.

        Raises ``TypeError`` for values outside the protocol's data model: they
        are broker bugs, never client input.
        """

    def __repr__(self) -> str:
        return f"<{self.name} codec>"


class _Rewrite(Exception):
    """Raised from an encoder's default hook: the value needs the slow path."""


def _refuse_unknown(obj: Any) -> NoReturn:
    if obj is ABSENT:
        raise _Rewrite
    raise TypeError(f"cannot encode {type(obj).__name__}")


# ---------------------------------------------------------------- decode validation

_LEAF_TYPES: Final = frozenset({str, int, float, bool, type(None), bytes})


def _key_to_str(key: Any) -> str:
    """Mirror how JavaScript turns a numeric map key into an object property name."""
    kt = type(key)
    if kt is int:
        return str(key)
    if kt is float:
        if key.is_integer():
            return str(int(key))
        if math.isnan(key):
            return "NaN"
        if math.isinf(key):
            return "Infinity" if key > 0 else "-Infinity"
        return repr(key)
    raise DecodeError(f"map key of type {kt.__name__} is not allowed")


def _is_absent(value: Any) -> bool:
    return value is ABSENT or value is _CBOR_UNDEFINED


def _clean_map(m: dict[Any, Any], depth: int) -> None:
    # Mutates in place: the value was just produced by the decoder and nobody
    # else holds it, so rebuilding would only cost allocations.
    if depth > MAX_DEPTH:
        raise DecodeError(f"nesting deeper than {MAX_DEPTH}")
    rebuild = False
    for key, value in m.items():
        if type(key) is not str:
            rebuild = True
        vt = type(value)
        if vt in _LEAF_TYPES:
            continue
        if vt is dict:
            _clean_map(value, depth + 1)
        elif vt is list:
            _clean_list(value, depth + 1)
        elif _is_absent(value):
            rebuild = True
        else:
            raise DecodeError(f"value of type {vt.__name__} is not allowed")
    if rebuild:
        items = list(m.items())
        m.clear()
        for key, value in items:
            if _is_absent(value):
                continue
            m[key if type(key) is str else _key_to_str(key)] = value


def _clean_list(items: list[Any], depth: int) -> None:
    if depth > MAX_DEPTH:
        raise DecodeError(f"nesting deeper than {MAX_DEPTH}")
    for i, value in enumerate(items):
        vt = type(value)
        if vt in _LEAF_TYPES:
            continue
        if vt is dict:
            _clean_map(value, depth + 1)
        elif vt is list:
            _clean_list(value, depth + 1)
        elif _is_absent(value):
            items[i] = None
        else:
            raise DecodeError(f"value of type {vt.__name__} is not allowed")


def _validated(value: Any) -> Any:
    vt = type(value)
    if vt is dict:
        _clean_map(value, 1)
    elif vt is list:
        _clean_list(value, 1)
    elif _is_absent(value):
        return None
    elif vt not in _LEAF_TYPES:
        raise DecodeError(f"value of type {vt.__name__} is not allowed")
    return value


# ------------------------------------------------------------------ encode rewriting


def _int_to_float(v: int) -> float:
    try:
        return float(v)
    except OverflowError:
        # What JavaScript's Number() yields for such an integer; better than failing
        # the whole reply over one absurd value.
        return math.inf if v > 0 else -math.inf


class _Rewriter:
    """Turns a value into one the native encoder can emit as the protocol wants.

    Only reached on the slow path, yet common enough to matter: job replies carry
    millisecond timestamps beyond 2**32, which the msgpack codec must rewrite.
    Containers are copied only when something inside them changes, because encode
    inputs belong to the caller (often live broker state) and must not be mutated,
    while copying everything would double the cost of a rewrite.
    """

    __slots__ = ("_big_ints", "_non_finite", "_untouched")

    def __init__(self, *, big_ints: bool, non_finite: bool) -> None:
        self._big_ints = big_ints
        self._non_finite = non_finite
        untouched: set[type] = {str, bool, type(None), bytes}
        if not big_ints:
            untouched.add(int)
        if not non_finite:
            untouched.add(float)
        # Exact types that never need a look inside; checked before anything else.
        self._untouched = frozenset(untouched)

    def __call__(self, obj: Any) -> Any:
        value = self._value(obj)
        return None if value is ABSENT else value

    def _value(self, v: Any) -> Any:
        if type(v) in self._untouched:
            return v
        if type(v) is JobWire:
            return self._job(v)
        if isinstance(v, dict):
            return self._map(v)
        if isinstance(v, list | tuple):
            return self._seq(v)
        if self._big_ints and isinstance(v, int) and not isinstance(v, bool):
            if not _INT_MIN <= v <= _INT_MAX:
                return _int_to_float(v)
        elif self._non_finite and isinstance(v, float) and not math.isfinite(v):
            return None
        return v

    def _job(self, job: JobWire) -> dict[Any, Any]:
        """A job object: only its client-valued keys can need a rewrite.

        Run once per job of every PULLB reply, so the common leaves (small ints,
        floats, strings, nothing) are passed inline and only the rest costs a call.
        """
        untouched = self._untouched
        get = job.get
        new: dict[Any, Any] | None = None
        for key in _CLIENT_VALUED_ORDER:
            v = get(key, _NO_KEY)
            vt = type(v)
            if vt in untouched or v is _NO_KEY:
                continue
            if vt is int:
                if _INT_MIN <= v <= _INT_MAX:
                    continue
                nv = _int_to_float(v)
            else:
                nv = self._value(v)
                if nv is v and v is not ABSENT:
                    continue
            if new is None:
                new = dict(job)
            if nv is ABSENT:
                del new[key]
            else:
                new[key] = nv
        return job if new is None else new

    def _map(self, m: dict[Any, Any]) -> dict[Any, Any]:
        untouched = self._untouched
        value = self._value
        new: dict[Any, Any] | None = None
        for k, v in m.items():
            vt = type(v)
            # Exact ints and floats reach these branches only in the modes that check
            # them (otherwise they are untouched); inlined as they are the common case.
            if vt in untouched:
                nv = v
            elif vt is int:
                nv = v if _INT_MIN <= v <= _INT_MAX else _int_to_float(v)
            elif vt is float:
                nv = v if _isfinite(v) else None
            else:
                nv = value(v)
            if nv is v and v is not ABSENT:
                continue
            if new is None:
                # A C-level copy, patched below, beats rebuilding entry by entry.
                new = dict(m)
            if nv is ABSENT:
                del new[k]
            else:
                new[k] = nv
        return m if new is None else new

    def _seq(self, s: list[Any] | tuple[Any, ...]) -> list[Any] | tuple[Any, ...]:
        untouched = self._untouched
        if len(s) > 8 and untouched.issuperset(map(type, s)):
            return s  # e.g. a PULLB reply's tokens: decided at C speed
        value = self._value
        new: list[Any] | None = None
        for i, v in enumerate(s):
            vt = type(v)
            if vt in untouched:
                nv = v
            elif vt is int:
                nv = v if _INT_MIN <= v <= _INT_MAX else _int_to_float(v)
            elif vt is float:
                nv = v if _isfinite(v) else None
            else:
                nv = value(v)
            if nv is ABSENT:
                nv = None
            if nv is v:
                continue
            if new is None:
                new = list(s)
            new[i] = nv
        return s if new is None else new


_CLIENT_VALUED_ORDER: Final = tuple(sorted(CLIENT_VALUED))
_NO_KEY: Final = object()

_msgpack_rewrite: Final = _Rewriter(big_ints=True, non_finite=False)
_cbor_rewrite: Final = _Rewriter(big_ints=False, non_finite=False)
_json_rewrite: Final = _Rewriter(big_ints=False, non_finite=True)


# --------------------------------------------------------------------------- msgpack


def _msgpack_ext(code: int, data: bytes) -> Any:
    if code == 0:
        return ABSENT
    raise DecodeError(f"msgpack extension type {code} is not allowed")


def _msgpack_default(obj: Any) -> NoReturn:
    # The packer hands us ints that do not fit in 64 bits; the rewrite makes them floats.
    if isinstance(obj, int):
        raise _Rewrite
    _refuse_unknown(obj)


class _Packers(threading.local):
    """One reusable packer per thread.

    Reusing a Packer skips its construction, about a third of the cost of packing
    a typical reply. It is per thread because a Packer owns a single buffer; it
    resets that buffer itself when packing raises.
    """

    def __init__(self) -> None:
        self.pack = msgpack.Packer(use_bin_type=True, default=_msgpack_default).pack


_packers = _Packers()


class MsgpackCodec(Codec):
    """bunqueue's default codec; also the one used to answer undetectable peers."""

    name = "msgpack"

    def decode(self, payload: bytes) -> Any:
        try:
            value = msgpack.unpackb(payload, raw=False, strict_map_key=False, ext_hook=_msgpack_ext)
            return _validated(value)
        except DecodeError:
            raise
        except Exception as exc:
            raise DecodeError(f"invalid msgpack payload: {exc}") from exc

    def encode(self, obj: Any) -> bytes:
        """Encode, sending integers outside [-2**31, 2**32-1] as float64.

        Integers beyond float64's range become infinities, as in JavaScript.
        """
        pack = _packers.pack
        if (type(obj) is dict and type(jobs := obj.get("jobs")) is list and len(jobs) > 1
                and type(jobs[0]) is JobWire):
            # A reply with several job objects (PULLB, GetJobs): rewrite first, pack
            # once. The marker test below would match anyway, as the marker bytes
            # also occur inside the float64 timestamps of every job. (A client's PUSHB
            # also has "jobs", plain maps of small values: the test below suits it.)
            return pack(_msgpack_rewrite(obj))
        try:
            out: bytes = pack(obj)
        except _Rewrite:
            out = pack(_msgpack_rewrite(obj))
        else:
            # A 64-bit int marker byte can also occur inside strings or floats; such
            # false positives merely cost one rewrite, and the check is a memchr.
            if b"\xcf" in out or b"\xd3" in out:
                out = pack(_msgpack_rewrite(obj))
        return out


# ------------------------------------------------------------------------------ CBOR


def _refuse_tag(*_args: Any) -> NoReturn:
    raise DecodeError("CBOR tags are not allowed")


#: Longest CBOR bignum magnitude accepted, in bytes. 512 bits is far beyond any real
#: use, yet always converts to a finite float64 for msgpack peers and to short decimal
#: text for JSON ones, so a CBOR client cannot store a number other clients choke on.
MAX_BIGNUM_BYTES: Final = 64


def _cbor_bignum(negative: bool) -> Any:
    def decode(value: Any, _immutable: bool) -> int:
        if type(value) is not bytes:
            raise DecodeError("a CBOR bignum must wrap a byte string")
        if len(value) > MAX_BIGNUM_BYTES:
            raise DecodeError(f"CBOR bignum longer than {MAX_BIGNUM_BYTES} bytes")
        magnitude = int.from_bytes(value, "big")
        return -1 - magnitude if negative else magnitude

    return decode


# Tags cbor2 decodes natively (found by probing cbor2 6), which would otherwise
# bypass tag_hook. Refusing them keeps shared references (28/29, which can build
# cycles), dates, decimals, sets, regexes and the like out of decoded values; the
# validating walk is a second line of defence for any tag missing from this list.
# Bignums (2/3) are the one tag kind allowed: they decode to plain ints.
_CBOR_NATIVE_TAGS: Final = (
    0, 1, 4, 5, 25, 28, 29, 30, 35, 36, 37, 52, 54, 100, 256, 258, 260, 261, 1004,
    43000, 55799,
)  # fmt: skip
_CBOR_SEMANTIC_DECODERS: Final = {
    **{tag: _refuse_tag for tag in _CBOR_NATIVE_TAGS},
    2: _cbor_bignum(negative=False),
    3: _cbor_bignum(negative=True),
}


def _cbor_default(_encoder: Any, obj: Any) -> NoReturn:
    _refuse_unknown(obj)


class CborCodec(Codec):
    """CBOR; duplicate map keys are accepted and the last occurrence wins."""

    name = "cbor"

    def decode(self, payload: bytes) -> Any:
        try:
            # cbor2.loads silently ignores bytes after the first item, so decode from a
            # stream and check that the item used the whole payload.
            stream = io.BytesIO(payload)
            value = cbor2.CBORDecoder(
                stream,
                tag_hook=_refuse_tag,
                semantic_decoders=_CBOR_SEMANTIC_DECODERS,
                max_depth=MAX_DEPTH,
            ).decode()
            if stream.tell() != len(payload):
                raise DecodeError("trailing bytes after the CBOR item")
            return _validated(value)
        except DecodeError:
            raise
        except Exception as exc:
            raise DecodeError(f"invalid CBOR payload: {exc}") from exc

    def encode(self, obj: Any) -> bytes:
        try:
            return cbor2.dumps(obj, default=_cbor_default)
        except _Rewrite:
            safe = _cbor_rewrite(obj)
            return cbor2.dumps(safe, default=_cbor_default)


# ------------------------------------------------------------------------------ JSON


def _refuse_constant(name: str) -> NoReturn:
    # JSON.parse rejects NaN/Infinity; accepting them would let a WebSocket client
    # send values no other client could.
    raise DecodeError(f"{name} is not valid JSON")


def _json_default(obj: Any) -> Any:
    # JSON has no byte strings; base64 is the conventional (and reversible) text form.
    if isinstance(obj, bytes | bytearray | memoryview):
        return base64.b64encode(obj).decode("ascii")
    _refuse_unknown(obj)


# Built once: json.loads/json.dumps construct a fresh decoder or encoder on every
# call that passes options, which costs more than the parsing of a small message.
_json_decoder = json.JSONDecoder(parse_constant=_refuse_constant)
_json_encoder = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_json_default
)


class JsonCodec(Codec):
    """JSON for WebSocket text messages; duplicate keys: the last occurrence wins."""

    name = "json"

    def decode(self, payload: bytes | str) -> Any:
        """Decode a text message; ``bytes`` must be UTF-8, as WebSocket text always is."""
        try:
            text = payload if isinstance(payload, str) else bytes(payload).decode("utf-8")
            return _validated(_json_decoder.decode(text))
        except DecodeError:
            raise
        except Exception as exc:
            raise DecodeError(f"invalid JSON payload: {exc}") from exc

    def encode(self, obj: Any) -> bytes:
        return self.encode_text(obj).encode("utf-8")

    def encode_text(self, obj: Any) -> str:
        """Encode as ``str``: non-finite floats become null, bytes become base64 text."""
        try:
            return _json_encoder.encode(obj)
        except (_Rewrite, ValueError):
            # ValueError: a NaN or infinity, which JSON cannot carry.
            return _json_encoder.encode(_json_rewrite(obj))


MSGPACK: Final = MsgpackCodec()
CBOR: Final = CborCodec()
JSON: Final = JsonCodec()


def detect_codec(first_byte: int) -> Codec | None:
    """Pick the codec from the first payload byte of a connection.

    Every request is a map, and the two formats' map markers do not overlap, so
    the first byte identifies the codec. ``None`` means neither; the caller then
    answers in msgpack, bunqueue's default.
    """
    if 0xA0 <= first_byte <= 0xBB or first_byte == 0xBF:
        return CBOR
    if 0x80 <= first_byte <= 0x8F or first_byte == 0xDE or first_byte == 0xDF:
        return MSGPACK
    return None


def encode_frames(codec: Codec, objs: Iterable[Any]) -> bytes:
    """Encode and frame several replies into one buffer, so they go out in one send."""
    parts: list[bytes] = []
    append = parts.append
    for obj in objs:
        payload = codec.encode(obj)
        append(frame_header(len(payload)))
        append(payload)
    return b"".join(parts)
