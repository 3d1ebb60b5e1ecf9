"""Job data of a large frame: refused from its item counts before it is made, and its
JSON text measured exactly, both in slices.

A frame of many small values (a ``PUSH`` of millions of integers) is cheap to send and
costly to hold: its values are made one by one, and the core's size check
(``core/job_data.py``) then walked them again in one call, then encoded them as JSON to
measure them: one step of more than a second for 7.5 MB of integers. Two things here:

- :class:`DataWatch`, asked by the sliced walks of msgpack and CBOR
  (``large/msgpack_steps.py``, ``large/frames.py``) each time they open an array or a map too
  large to decode in one run: when it is (in) the job data of a ``PUSH`` or a ``Cron``
  (``data``) or of a ``PUSHB`` (``jobs[i].data``), its item count gives a floor of the data's JSON
  text, every item taking at least one character and a comma (an entry of a map four
  and a comma), and past the limit the frame is refused (:class:`DataTooLarge`) before
  those items are made. Only a command the walk has already read counts: a map's
  ``cmd`` written after its ``data`` leaves this to the measure below.
- :func:`measured_steps`: the length of the JSON text the core would measure (UTF-16
  units of ``json.dumps`` with its options: no spaces, text as it is, a byte string as a
  Buffer's JSON), in slices, runs of one plain type at a time by C-level calls; it stops
  as soon as it passes the limit. Where the walk's cheaper bound of the whole message
  is over the limit, every job data is measured so: one over it refuses the frame (a
  ``PUSH`` or ``PUSHB``), otherwise the largest size is the bound handed to the core,
  which then measures nothing.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from itertools import chain, islice
from typing import Any, Final

from ...core.job_data import DATA_TOO_LARGE
from ..slicing import Slicer, Steps
from ..wire.datamodel import DecodeError

__all__ = ["DataTooLarge", "DataWatch", "data_bound_steps", "job_data_values",
           "measured_steps"]

#: The commands whose job data has the limit, and where their data is.
_PUSH: Final = "PUSH"
_PUSHB: Final = "PUSHB"
_PUSHF: Final = "PUSHF"
#: A schedule's job template: its ``data`` is checked as a PUSH's.
_CRON: Final = "Cron"
#: The commands whose top-level ``data`` is job data with the limit.
_DATA_LIMITED: Final = frozenset({_PUSH, _CRON})
#: New data for a job: no size limit (bunqueue's), but a bound says its types were
#: checked, so the core walks none of it.
_UPDATE: Final = "Update"

# What a walk's container is, for the watch: nothing of interest, the top-level map,
# a PUSHB's job list, one of its jobs, or job data (at any depth in it).
OTHER, TOP, JOBS, JOB, DATA = range(5)


class DataTooLarge(DecodeError):
    """A large frame's job data is over the limit: answered with the core's text (and
    the ``reqId`` if one was read), not as a malformed frame."""


class DataWatch:
    """Which containers of a walk are job data, and a floor of that data's JSON text.

    ``limit``: the data limit in JSON characters. The walk calls :meth:`entry` for a
    map entry it walks into, :meth:`item` for an array item, and :meth:`opened` for
    every array or map it opens (with its role and item count).
    """

    __slots__ = ("limit", "top", "floor", "prefix")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.top: dict[Any, Any] | None = None  # the top-level map, as far as it is read
        self.floor = 0  # of the job data being walked
        self.prefix = ""  # "jobs[i]: " for a PUSHB's job

    def entry(self, role: int, key: Any, parent: dict[Any, Any]) -> int:
        """The role of the value of ``parent``'s entry ``key`` (``parent``: the entries
        read so far)."""
        if role == DATA:
            return DATA
        if role == TOP:
            self.top = parent
            cmd = parent.get("cmd")
            if key == "data" and cmd in _DATA_LIMITED:
                return self._data("")
            if key == "jobs" and cmd == _PUSHB:
                return JOBS
        elif role == JOB and key == "data":
            return self._data(self.prefix)
        return OTHER

    def item(self, role: int, index: int) -> int:
        """The role of an array's item at ``index``."""
        if role == DATA:
            return DATA
        if role == JOBS:
            self.prefix = f"jobs[{index}]: "
            return JOB
        return OTHER

    def _data(self, prefix: str) -> int:
        self.floor = 1  # the value itself
        self.prefix = prefix
        return DATA

    def opened(self, role: int, is_map: bool, count: int) -> None:
        """An array or map of ``count`` items opened; raises :class:`DataTooLarge` when
        it makes job data too large for certain."""
        if role != DATA:
            return
        # its items, each at least one character and a comma (an entry: "":v,)
        self.floor += (5 if is_map else 2) * count
        if self.floor > self.limit:
            raise self.too_large(self.prefix)

    def too_large(self, prefix: str) -> DataTooLarge:
        exc = DataTooLarge(prefix + DATA_TOO_LARGE)
        req_id = self.top.get("reqId") if self.top is not None else None
        if type(req_id) is str:
            exc.req_id = req_id
        return exc


# ------------------------------------------------------------------- the exact measure

#: Values measured together, in one set of C-level calls, when they are of one kind.
RUN: Final = 256
#: The most members of a run of small maps (arrays) measured together.
_FLAT_MEMBERS: Final = 16 * RUN
#: The most members, at every depth, of an array or map measured by one plain call.
_SMALL_MEMBERS: Final = 4 * RUN
#: Characters of text measured at once (a longer string is measured a piece at a time).
PIECE_CHARS: Final = 64 * 1024

_CONTROLS: Final = bytes(range(0x20))
_SHORT_ESCAPES: Final = b"\b\t\n\f\r"  # \n and the like: one character more
_QUOTES: Final = b'"\\'
_ASTRAL_LEADS: Final = bytes(range(0xF0, 0x100))  # 2 UTF-16 units, not 1
_TENS: Final = bytes(range(10, 0x100))
_HUNDREDS: Final = bytes(range(100, 0x100))
_BUFFER_CHARS: Final = len('{"type":"Buffer","data":[]}')


class Unmeasured(Exception):
    """A value the measure does not model (an int past Python's digit limit): the core
    decides, as before."""


def _deleted(raw: bytes, which: bytes) -> int:
    """How many bytes of ``raw`` are in ``which``."""
    return len(raw) - len(raw.translate(None, which))


def strings_chars(run: list[str]) -> int:
    """The JSON text of these strings, quotes and commas left out, in UTF-16 units."""
    joined = "".join(run)
    chars = len(joined)
    raw = joined.encode("utf-8", "surrogatepass")
    if not joined.isascii():
        chars += _deleted(raw, _ASTRAL_LEADS)
    controls = _deleted(raw, _CONTROLS)
    if controls:
        short = _deleted(raw, _SHORT_ESCAPES)
        chars += short + 5 * (controls - short)  # \n; \u00XX
    return chars + _deleted(raw, _QUOTES)  # \" and \\


def _buffer_chars(value: bytes) -> int:
    """``{"type":"Buffer","data":[1,2,...]}``: each byte's digits and a comma."""
    n = len(value)
    return _BUFFER_CHARS + n + _deleted(value, _TENS) + _deleted(value, _HUNDREDS) + max(
        n - 1, 0)


def _ints_chars(run: list[int]) -> int:
    try:
        return sum(map(len, map(str, run)))
    except ValueError:  # past Python's digit limit: not serializable, the core says
        raise Unmeasured from None


def _floats_chars(run: list[float]) -> int:
    # json writes repr, but Infinity and -Infinity for the infinities (repr: inf, -inf)
    return sum(map(len, map(float.__repr__, run))) + 5 * (
        run.count(math.inf) + run.count(-math.inf))


def _text_steps(text: str, limit: int, slicer: Slicer) -> Steps[int]:
    """A string's JSON text, a piece at a time (only its length, past ``limit``)."""
    if len(text) > limit:
        return len(text) + 2
    chars = 2
    for start in range(0, len(text), PIECE_CHARS):
        chars += strings_chars([text[start:start + PIECE_CHARS]])
        if slicer.due(PIECE_CHARS):
            yield
    return chars


def _leaf_chars(value: Any) -> int:
    kind = type(value)
    if kind is str:
        return strings_chars([value]) + 2
    if kind is int:
        return _ints_chars([value])
    if kind is float:
        return _floats_chars([value])
    if kind is bool:
        return 4 if value else 5
    if value is None:
        return 4
    if kind is bytes:
        return _buffer_chars(value)
    raise Unmeasured  # never after validation


def _run_chars(run: list[Any]) -> int | None:
    """The JSON text of a run of values of one plain kind (no commas), or None."""
    kinds = set(map(type, run))
    if len(kinds) != 1:
        return None
    kind = kinds.pop()
    if kind is str:
        if sum(map(len, run)) > PIECE_CHARS:
            return None  # long ones among them: each measured in pieces
        return strings_chars(run) + 2 * len(run)
    if kind is int:
        return _ints_chars(run)
    if kind is float:
        return _floats_chars(run)
    if kind is bool:
        return 5 * len(run) - sum(run)  # true 4, false 5
    if kind is type(None):
        return 4 * len(run)
    return None


def measured_steps(value: Any, limit: int, slicer: Slicer) -> Steps[int]:
    """The length of ``value``'s JSON text as the core measures it (a validated value),
    or some number past ``limit`` as soon as it is certain to be; raises
    :class:`Unmeasured`."""
    kind = type(value)
    if kind is dict:
        return (yield from _map_steps(value, limit, slicer))
    if kind is list:
        return (yield from _list_steps(value, limit, slicer))
    if kind is str and len(value) > PIECE_CHARS:
        return (yield from _text_steps(value, limit, slicer))
    return _leaf_chars(value)


def _leaves_chars(values: list[Any]) -> int | None:
    """The JSON text of values that are all leaves, commas left out; else None."""
    kinds = set(map(type, values))
    if len(kinds) == 1:
        return _run_chars(values)
    chars = 0
    for kind in kinds:
        same: list[Any] = [value for value in values if type(value) is kind]
        if kind is bytes:
            chars += sum(map(_buffer_chars, same))
            continue
        part = _run_chars(same)
        if part is None:
            return None
        chars += part
    return chars


def _flat_chars(run: list[Any]) -> int | None:
    """The JSON text of a run of small maps, or of small arrays, whose members are all
    leaves (an array of records is the common large data), commas between them left
    out; else None. Their members are measured together, not container by container."""
    kinds = set(map(type, run))
    if len(kinds) != 1:
        return None
    kind = kinds.pop()
    sizes = list(map(len, run))
    members = sum(sizes)
    if kind not in (dict, list) or members > _FLAT_MEMBERS:
        return None
    # { } or [ ], commas (and colons): 2 for an empty one, else 1 + 2n (1 + n)
    empty = sizes.count(0)
    if kind is dict:
        values = list(chain.from_iterable(map(dict.values, run)))
        keys = list(chain.from_iterable(run))
        chars = len(run) + empty + 2 * members + strings_chars(keys) + 2 * members
    else:
        values = list(chain.from_iterable(run))
        chars = len(run) + empty + members
    leaves = _leaves_chars(values) if values else 0
    return None if leaves is None else chars + leaves


def _values_steps(values: list[Any], limit: int, slicer: Slicer) -> Steps[int]:
    """The JSON text of some values of an array or a map, commas left out."""
    chars = _run_chars(values)
    if chars is None:
        chars = _flat_chars(values)
    if chars is not None:
        return chars
    chars = 0
    for item in values:
        kind = type(item)
        if kind is dict or kind is list:
            small = _small_chars(item, _SMALL_MEMBERS)
            if small is not None:
                chars += small[0]
                if slicer.due(small[1]):
                    yield
                continue
            chars += yield from measured_steps(item, limit - chars, slicer)
            if chars > limit:
                return chars
        elif kind is str and len(item) > PIECE_CHARS:
            chars += yield from _text_steps(item, limit - chars, slicer)
        else:
            chars += _leaf_chars(item)
    return chars


def _small_chars(value: dict[str, Any] | list[Any], budget: int) -> tuple[int, int] | None:
    """(JSON text, members) of an array or map of at most ``budget`` members in all, at
    every depth, measured by plain calls (a generator per container cost more than the
    measure of a small one); None for a larger one (or one with a long string)."""
    n = len(value)
    if n > budget:
        return None
    if type(value) is dict:
        members = list(value.values())
        chars = 2 + 3 * n + max(n - 1, 0) + strings_chars(list(value))  # "": and commas
    else:
        members = value  # type: ignore[assignment]
        chars = 2 + max(n - 1, 0)
    used = n
    leaves = [item for item in members if type(item) is not dict and type(item) is not list]
    if len(leaves) < n:
        for item in members:
            if type(item) is dict or type(item) is list:
                inner = _small_chars(item, budget - used)
                if inner is None:
                    return None
                chars += inner[0]
                used += inner[1]
    if leaves:
        measured = _leaves_chars(leaves)
        if measured is None:
            return None
        chars += measured
    return chars, used


def _list_steps(items: list[Any], limit: int, slicer: Slicer) -> Steps[int]:
    chars = 2 + max(len(items) - 1, 0)  # [ ] and the commas
    for start in range(0, len(items), RUN):
        run = items[start:start + RUN]
        chars += yield from _values_steps(run, limit - chars, slicer)
        if chars > limit:
            return chars
        if slicer.due(len(run)):
            yield
    return chars


def _map_steps(m: dict[str, Any], limit: int, slicer: Slicer) -> Steps[int]:
    chars = 2 + len(m) + max(len(m) - 1, 0)  # { } the colons and the commas
    keys = iter(m)
    values = iter(m.values())
    # Pausing between two runs is safe: nothing else holds this fresh value yet.
    while run := list(islice(values, RUN)):
        chars += strings_chars(list(islice(keys, len(run)))) + 2 * len(run)
        chars += yield from _values_steps(run, limit - chars, slicer)
        if chars > limit:
            return chars
        if slicer.due(len(run)):
            yield
    return chars


def _job_data(msg: Any) -> Iterator[tuple[str, Any]] | None:
    """(the core's prefix of its refusal, data) of each job data of a PUSH, a PUSHB
    or a PUSHF whose size the core checks; None for any other message, or a flow with
    a job the core refuses before its data (so no bound is given that misses one)."""
    if type(msg) is not dict:
        return None
    cmd = msg.get("cmd")
    if cmd in _DATA_LIMITED:
        return iter([("", msg.get("data"))])
    if cmd == _PUSHB and type(jobs := msg.get("jobs")) is list:
        return ((f"jobs[{i}]: ", job.get("data"))
                for i, job in enumerate(jobs) if type(job) is dict)
    if cmd == _PUSHF and type(jobs := msg.get("jobs")) is list and all(
            type(job) is dict and type(job.get("id")) is str
            and type(job.get("input")) is dict for job in jobs):
        return ((f"{job['id']}: ", job["input"].get("data")) for job in jobs)
    return None


def job_data_values(msg: Any) -> list[Any]:
    """The job data of a PUSH, PUSHB or PUSHF whose size the core checks (to let go of
    a refused command's data to the graveyard); [] for any other message."""
    data = _job_data(msg)
    return [] if data is None else [value for _, value in data]


def _too_large(prefix: str, msg: Any) -> DataTooLarge:
    exc = DataTooLarge(prefix + DATA_TOO_LARGE)
    if type(req_id := msg.get("reqId")) is str:
        exc.req_id = req_id
    return exc


def data_bound_steps(msg: Any, limit: int, slicer: Slicer) -> Steps[int | None]:
    """The largest JSON text of a PUSH's, PUSHB's, PUSHF's or Cron's job data, measured
    (a bound the core trusts); raises :class:`DataTooLarge` for data over ``limit``; an
    Update's data measured whatever its size (it has no limit); None for another
    command or a value not measured."""
    if type(msg) is dict and msg.get("cmd") == _UPDATE:
        # no limit: its size measured whatever it is, never refused here
        try:
            return (yield from measured_steps(msg.get("data"), sys.maxsize, slicer))
        except Unmeasured:
            return None
    data = _job_data(msg)
    if data is None:
        return None
    largest = 0
    try:
        for prefix, value in data:
            chars = yield from measured_steps(value, limit, slicer)
            if chars > limit:
                # (made by a call: kept in a local here, the error and this frame,
                # which its traceback holds, would be a cycle holding the whole
                # message until a full collection)
                raise _too_large(prefix, msg)
            largest = max(largest, chars)
            if slicer.due():
                yield
    except Unmeasured:
        return None
    return largest
