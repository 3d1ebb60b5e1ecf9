"""A reply whose values are many, encoded a run of them at a time.

A job's data may be a million small maps (8M characters of JSON, within the data limit):
its ``PULL`` or ``GetJob`` reply, encoded in one call, held the event loop for the whole
encoding (msgpack or CBOR). Long strings are cheap to send (:mod:`.text_splice`) and long
lists of jobs are encoded a slice of jobs at a time (:mod:`.reply_slices`); this covers
the rest: any reply holding more than :data:`HEAVY_VALUES` values is walked, and its
containers encoded by the codec's own encoder a run of items at a time, each run holding
at most :data:`RUN_VALUES` values (counted by :func:`weight`, which stops at its limit),
a container with more values than that alone opened and walked in turn. The walk yields
once its slice's time is up (:class:`~trioqueue.transport.slicing.Slicer`), so the sender
task that drives it lets every other task run between two slices.

The bytes are those of encoding the reply in one call: in msgpack and CBOR a container
is its header followed by its items in order, and in JSON its items joined by commas
between brackets, and every rule of the codecs (an absent map entry dropped, msgpack's
64-bit integers as floats, JSON's non-finite floats as null, bytes as base64) applies to
each value alone, so a run encoded by the codec is the run's part of the whole; a map's
header is written once its entries are done, from the counts the runs' headers give
(tests/transport/test_value_slices.py compares them with each codec's ``encode``).
"""

from __future__ import annotations

import struct
from collections import deque
from itertools import compress, repeat
from typing import Any, Final

from ...core.job import CLIENT_VALUED, JobWire
from ...core.large_values.json_slices import CONTAINERS as _CONTAINERS
from ...core.large_values.json_slices import MAPS as _MAPS
from ...core.large_values.json_slices import RUN_VALUES, Runs
from ...core.large_values.json_slices import json_steps as walk_json
from ...core.large_values.value_count import weight
from ..slicing import Slicer, Steps, run_steps
from ..wire.codec import CBOR, JSON, Codec
from ..wire.framing import HEADER_SIZE, frame_header

__all__ = ["HEAVY_VALUES", "RUN_VALUES", "SlicedValue", "SlicedValueFrame", "encode_steps",
           "heavy", "json_steps", "weight"]

#: A reply holding more values than this is encoded in slices (below it, one call takes
#: about 1 ms in CBOR, the slowest codec, a third of that in msgpack).
HEAVY_VALUES: Final = 8192
#: Encoded bytes handed to the socket in one piece, once the reply is whole.
PIECE_BYTES: Final = 256 * 1024

_is_container = _CONTAINERS.__contains__
# A job's fields that hold any JSON a client sent (the other client-valued ones are
# options of bounded shape, checked when the job was made).
_JOB_FREE: Final = ("data", "progress")
assert set(_JOB_FREE) <= CLIENT_VALUED


def _job_values(job: JobWire, out: list[Any]) -> None:
    get = job.get
    for key in _JOB_FREE:
        if type(value := get(key)) in _CONTAINERS:
            out.append(value)


def _jobs_values(jobs: list[Any], out: list[Any]) -> None:
    """The free-form fields of a list of jobs, in a few C-level passes (a ``PULLB`` of
    100 jobs asks this of every one)."""
    for key in _JOB_FREE:
        values = list(map(JobWire.get, jobs, repeat(key)))
        out += compress(values, map(_is_container, map(type, values)))


def heavy(reply: dict[str, Any]) -> bool:
    """Whether ``reply`` is to be encoded in slices: its containers hold more than
    :data:`HEAVY_VALUES` values (decided by looking at at most about that many). Its
    containers are a job's free-form fields, ``data`` and ``progress`` (the rest of a job
    object is built by the broker or of a shape checked when it was made), and every
    other entry that is one. Asked of every reply, so
    the common ones (no container, a job of small data) are answered in a few steps."""
    out: list[Any] = []
    for value in reply.values():
        kind = type(value)
        if kind is JobWire:
            _job_values(value, out)
        elif kind is list and value and type(value[0]) is JobWire:
            _jobs_values(value, out)
        elif kind in _CONTAINERS:
            out.append(value)
    return bool(out) and weight(out, HEAVY_VALUES) > HEAVY_VALUES


# ---------------------------------------------------------------- msgpack and CBOR


def _msgpack_head(out: bytes) -> tuple[int, int]:
    first = out[0]
    if first < 0xA0:  # fixmap 0x80-0x8f, fixarray 0x90-0x9f
        return first & 0x0F, 1
    if first in (0xDC, 0xDE):
        return int.from_bytes(out[1:3], "big"), 3
    return int.from_bytes(out[1:5], "big"), 5  # 0xdd, 0xdf


def _cbor_head(out: bytes) -> tuple[int, int]:
    info = out[0] & 0x1F
    if info < 24:
        return info, 1
    width = 1 << (info - 24)
    return int.from_bytes(out[1:1 + width], "big"), 1 + width


def _msgpack_header(is_map: bool, n: int) -> bytes:
    if n < 16:
        return bytes(((0x80 if is_map else 0x90) | n,))
    if n < 1 << 16:
        return bytes((0xDE if is_map else 0xDC,)) + struct.pack(">H", n)
    return bytes((0xDF if is_map else 0xDD,)) + struct.pack(">I", n)


def _cbor_header(is_map: bool, n: int) -> bytes:
    major = (5 if is_map else 4) << 5
    if n < 24:
        return bytes((major | n,))
    if n < 1 << 8:
        return bytes((major | 24, n))
    if n < 1 << 16:
        return bytes((major | 25,)) + struct.pack(">H", n)
    if n < 1 << 32:
        return bytes((major | 26,)) + struct.pack(">I", n)
    return bytes((major | 27,)) + struct.pack(">Q", n)


class _Encoder:
    """One walk of a value in msgpack or CBOR, into ``parts``."""

    __slots__ = ("encode", "head", "header", "slicer", "parts")

    def __init__(self, codec: Codec, slicer: Slicer) -> None:
        self.encode = codec.encode
        cbor = codec is CBOR
        self.head = _cbor_head if cbor else _msgpack_head
        self.header = _cbor_header if cbor else _msgpack_header
        self.slicer = slicer
        self.parts: list[bytes | memoryview] = []

    def value(self, value: Any) -> Steps[None]:
        kind = type(value)
        if kind not in _CONTAINERS or weight([value], RUN_VALUES) <= RUN_VALUES:
            self.parts.append(self.encode(value))
            return
        is_map = kind in _MAPS
        parts = self.parts
        at = len(parts)
        parts.append(b"")  # the header, once the count is known
        count = 0
        runs = Runs(value, is_map)
        while (taken := runs.next()) is not None:
            run, alone = taken
            if alone:
                item = run[0]
                if is_map:
                    parts.append(self.encode(item[0]))
                    item = item[1]
                yield from self.value(item)
                count += 1
            else:
                out = self.encode(kind(run) if is_map else run)  # (a job stays one)
                n, size = self.head(out)
                parts.append(memoryview(out)[size:])
                count += n
            if self.slicer.due(len(run)):
                yield
        parts[at] = self.header(is_map, count)


def encode_steps(codec: Codec, value: Any, slicer: Slicer) -> Steps[list[bytes | memoryview]]:
    """``codec.encode(value)`` (msgpack or CBOR) as parts to join, in slices."""
    walk = _Encoder(codec, slicer)
    yield from walk.value(value)
    return walk.parts


# ---------------------------------------------------------------------------- JSON


def json_steps(value: Any, slicer: Slicer) -> Steps[list[str]]:
    """``JSON.encode_text(value)`` as parts to join, in slices (the core's walk,
    core/large_values/json_slices.py, with the JSON codec's rules)."""
    return walk_json(value, slicer, JSON.encode_text)


def encoded_whole(codec: Codec, value: Any) -> bytes:
    """The walk run at once and joined (for tests and synchronous callers)."""
    if codec is JSON:
        return "".join(run_steps(json_steps(value, Slicer()))).encode()
    return b"".join(run_steps(encode_steps(codec, value, Slicer())))


# ------------------------------------------------------------------ the senders' side


class SlicedValue:
    """A heavy reply on its way to bytes, for a WebSocket sender (the interface of
    :class:`~trioqueue.transport.large.reply_slices.SlicedPayload`): :meth:`step` runs the
    walk a slice per call and returns the whole message once it is done (None before).

    ``estimate_bytes`` is what it is counted for before it is encoded: a value's
    encoding is not known before it is walked, so the reply counts the one value per
    item of the runs a walk holds at once, and its bytes once it is whole.
    """

    __slots__ = ("_steps", "_slicer", "_text", "estimate_bytes")

    def __init__(self, codec: Codec, reply: dict[str, Any]) -> None:
        self._slicer = Slicer()
        self._text = codec is JSON
        self._steps: Steps[Any] = (json_steps(reply, self._slicer) if self._text
                                   else encode_steps(codec, reply, self._slicer))
        self.estimate_bytes = HEAVY_VALUES

    def step(self) -> str | bytes | None:
        parts = self.step_parts()
        if parts is None:
            return None
        return "".join(parts) if self._text else b"".join(parts)  # type: ignore[arg-type]

    def step_parts(self) -> list[str] | list[bytes | memoryview] | None:
        """:meth:`step`, the message given as its parts, not joined (a WebSocket sender
        sends them a piece at a time: joining megabytes is a long step)."""
        self._slicer.restart()
        try:
            next(self._steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        return None


class SlicedValueFrame:
    """A heavy reply on its way to the wire as one TCP frame (the interface of
    :class:`~trioqueue.transport.large.reply_slices.SlicedFrame` that the send queue uses):
    :meth:`step` runs the walk a slice per call (None), then gives the frame a piece of
    about :data:`PIECE_BYTES` per call, its length header in front of the first.

    ``unsent_bytes`` grows as the walk encodes (each slice's bytes counted once made:
    the values walked are the job's own, held by the broker anyway), and falls as pieces
    are given.
    """

    __slots__ = ("_walk", "_steps", "_counted", "_parts", "_begun", "unsent_bytes")

    def __init__(self, codec: Codec, reply: dict[str, Any]) -> None:
        self._walk = _Encoder(codec, Slicer())
        self._steps: Steps[None] | None = self._walk.value(reply)
        self._counted = 0  # the walk's parts already in unsent_bytes
        self._parts: deque[bytes | memoryview] | None = None  # once whole: still to give
        self._begun = False
        self.unsent_bytes = HEADER_SIZE

    @property
    def begun(self) -> bool:
        """Whether a piece has been given: the rest of the frame must follow it."""
        return self._begun

    @property
    def sent(self) -> bool:
        """Whether every piece has been given."""
        return self._parts is not None and not self._parts

    @property
    def slice_ahead_bytes(self) -> int:
        """About what a slice of the walk makes before it is counted (0 once whole)."""
        return 0 if self._parts is not None else RUN_VALUES * 8

    def encode_slice(self) -> bool:
        """Run the walk one slice further; True once the frame is whole."""
        steps = self._steps
        if steps is None:
            return True
        walk = self._walk
        walk.slicer.restart()
        try:
            next(steps)
            whole = False
        except StopIteration:
            whole = True
        parts = walk.parts
        self.unsent_bytes += sum(map(len, parts[self._counted:]))
        self._counted = len(parts)
        if whole:  # (counted again: the headers written last)
            self.unsent_bytes = HEADER_SIZE + sum(map(len, parts))
            self._steps = None
            self._parts = deque(parts)
            self._parts.appendleft(frame_header(self.unsent_bytes - HEADER_SIZE))
            walk.parts = []
        return whole

    def step(self) -> bytes | memoryview | None:
        if self._parts is None and not self.encode_slice():
            return None
        parts = self._parts
        assert parts is not None  # (encode_slice made them)
        self._begun = True
        run = [parts.popleft()]
        size = len(run[0])
        while parts and size < PIECE_BYTES:
            part = parts.popleft()
            run.append(part)
            size += len(part)
        piece = run[0] if len(run) == 1 else b"".join(run)
        self.unsent_bytes -= size
        return piece
