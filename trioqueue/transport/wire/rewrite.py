"""The encode slow path: a value rewritten into one the native encoder emits as the
protocol wants.

A codec runs its native encoder first and comes here only when that refused the
value, (msgpack) produced a 64-bit integer, or (msgpack) the reply carries several
jobs: :data:`ABSENT` entries are dropped (array slots become null), integers outside
the 32-bit range become float64 for msgpack, non-finite floats become null for JSON.
Containers are copied only where something inside them changes; the caller's value is
never mutated.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, Final

from ...core.job import CLIENT_VALUED, JobWire
from .datamodel import ABSENT

# bunqueue's JavaScript clients decode msgpack int64/uint64 as BigInt, which their
# code does not expect; integers outside the 32-bit range therefore go out as float64,
# exactly what a JavaScript encoder would have produced for such a number.
_INT_MIN: Final = -(2**31)
_INT_MAX: Final = 2**32 - 1
_isfinite: Final = math.isfinite


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
        return self._patched(m, m.items(), dict, True)

    def _seq(self, s: list[Any] | tuple[Any, ...]) -> list[Any] | tuple[Any, ...]:
        if len(s) > 8 and self._untouched.issuperset(map(type, s)):
            return s  # e.g. a PULLB reply's tokens: decided at C speed
        return self._patched(s, enumerate(s), list, False)

    def _patched(
        self,
        container: Any,
        entries: Iterable[tuple[Any, Any]],
        copy: Callable[[Any], Any],
        drop_absent: bool,
    ) -> Any:
        """``container`` with each of its ``(key, value)`` entries rewritten, one loop for
        maps and arrays: copied (by ``copy``, a C-level copy patched below, cheaper than
        rebuilding entry by entry) at the first entry that changes, else returned as it
        is. An :data:`ABSENT` entry is dropped from a map and becomes null in an array.
        """
        untouched = self._untouched
        value = self._value
        new: Any = None
        for k, v in entries:
            vt = type(v)
            # Exact ints and floats reach these branches only in the modes that check
            # them (otherwise they are untouched); inlined as they are the common case,
            # on the path every reply with a job takes.
            if vt in untouched:
                continue
            if vt is int:
                if _INT_MIN <= v <= _INT_MAX:
                    continue
                nv = _int_to_float(v)
            elif vt is float:
                if _isfinite(v):
                    continue
                nv = None
            else:
                nv = value(v)
                if nv is v and v is not ABSENT:
                    continue
            if new is None:
                new = copy(container)
            if nv is not ABSENT:
                new[k] = nv
            elif drop_absent:
                del new[k]
            else:
                new[k] = None
        return container if new is None else new


_CLIENT_VALUED_ORDER: Final = tuple(sorted(CLIENT_VALUED))
_NO_KEY: Final = object()

MSGPACK_REWRITE: Final = _Rewriter(big_ints=True, non_finite=False)
CBOR_REWRITE: Final = _Rewriter(big_ints=False, non_finite=False)
JSON_REWRITE: Final = _Rewriter(big_ints=False, non_finite=True)
