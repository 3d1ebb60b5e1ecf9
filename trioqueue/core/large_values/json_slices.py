"""JSON text of a value of many small values, made a run of them at a time.

A value holding a million small maps (a job's data, an ``ACK``'s result, a progress)
took one call of the JSON encoder of hundreds of milliseconds, holding the event loop
for all of it. Here its containers are walked and encoded a run of items at a time by
the encoder given (each run holding at most :data:`RUN_VALUES` values, counted by
:func:`~.value_count.weight`, which stops at its limit), a container with more values
than that alone opened and walked in turn; the walk yields once its slice's time is up
(:class:`~.slicing.Slicer`), so whoever drives it lets every other task run between two
slices. The text is that of encoding the value in one call: a container's items are
joined by commas between brackets, and every rule of the encoder applies to each value
alone. In the core so that the actors (a webhook's body, a progress's text) and the
transport (replies, events) share one walk.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from itertools import islice
from operator import itemgetter
from typing import Any, Final

from ..job import JobWire
from .slicing import Slicer, Steps
from .value_count import weight

__all__ = ["PIECE_CHARS", "RUN_VALUES", "Runs", "compact_json", "json_bytes_steps",
           "json_steps"]

#: The most values one call of the encoder encodes (then the walk may yield).
RUN_VALUES: Final = 2048
#: About how many characters of text one piece of :func:`json_bytes_steps` holds.
PIECE_CHARS: Final = 256 * 1024

LISTS: Final = frozenset({list, tuple})
MAPS: Final = frozenset({dict, JobWire})
CONTAINERS: Final = LISTS | MAPS
_second = itemgetter(1)

#: ``JSON.stringify``'s compact text as the core writes it (a progress's message, a
#: webhook's body): no spaces, text as it is, what JSON has no form for as its ``str``.
compact_json: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False,
                                       default=str).encode


class Runs:
    """Takes the items (or entries) of one container a run at a time: as many as hold
    at most :data:`RUN_VALUES` values, or one whose value holds more (to be walked)."""

    __slots__ = ("_source", "_held", "_at", "_batch", "_is_map")

    def __init__(self, container: Any, is_map: bool) -> None:
        self._is_map = is_map
        # a map's entries are taken from its iterator a batch at a time into _held; a
        # list's items are sliced from it
        self._source: Iterator[Any] | None = iter(container.items()) if is_map else None
        self._held: list[Any] = [] if is_map else container
        self._at = 0  # the next item of _held
        self._batch = RUN_VALUES

    def next(self) -> tuple[list[Any], bool] | None:
        """``(items, alone)``: a run to encode at once, or (``alone``) one item whose
        value holds more than a run may; None at the end."""
        while True:
            held, at, batch = self._held, self._at, self._batch
            if self._source is not None and len(held) - at < batch:
                held = self._held = held[at:] + list(islice(self._source, RUN_VALUES))
                at = self._at = 0
            run = held[at:at + batch]
            if not run:
                return None
            count = weight(list(map(_second, run)) if self._is_map else run, RUN_VALUES)
            if count <= RUN_VALUES:
                self._at = at + len(run)
                # the next run sized from this one's values per item
                self._batch = max(1, min(RUN_VALUES, RUN_VALUES * len(run) // count))
                return run, False
            if len(run) == 1:
                self._at = at + 1
                return run, True
            self._batch = max(1, len(run) * RUN_VALUES // count // 2)


class _JsonWalk:
    """One walk of a value in JSON text, into ``parts``."""

    __slots__ = ("slicer", "encode", "parts")

    def __init__(self, slicer: Slicer, encode: Callable[[Any], str]) -> None:
        self.slicer = slicer
        self.encode = encode
        self.parts: list[str] = []

    def value(self, value: Any) -> Steps[None]:
        encode = self.encode
        kind = type(value)
        if kind not in CONTAINERS or weight([value], RUN_VALUES) <= RUN_VALUES:
            self.parts.append(encode(value))
            return
        is_map = kind in MAPS
        parts = self.parts
        parts.append("{" if is_map else "[")
        first = True
        runs = Runs(value, is_map)
        while (taken := runs.next()) is not None:
            run, alone = taken
            if alone:
                item = run[0]
                if not first:
                    parts.append(",")
                first = False
                if is_map:
                    parts.append(encode(item[0]) + ":")
                    item = item[1]
                yield from self.value(item)
            else:
                text = encode(kind(run) if is_map else run)[1:-1]
                if text:  # (a run of absent entries only writes nothing)
                    if not first:
                        parts.append(",")
                    first = False
                    parts.append(text)
            if self.slicer.due(len(run)):
                yield
        parts.append("}" if is_map else "]")


def json_steps(value: Any, slicer: Slicer,
               encode: Callable[[Any], str] = compact_json) -> Steps[list[str]]:
    """``encode(value)`` as parts to join, in slices (``encode`` is a JSON encoder's
    one call, whose rules each run follows)."""
    walk = _JsonWalk(slicer, encode)
    yield from walk.value(value)
    return walk.parts


def json_bytes_steps(value: Any, slicer: Slicer,
                     encode: Callable[[Any], str] = compact_json) -> Steps[list[bytes]]:
    """``encode(value)`` in UTF-8, as pieces of about :data:`PIECE_CHARS` characters to
    send one after another (a body, a stream's frame), in slices: joining and encoding
    8M characters at once is itself a long step."""
    parts = yield from json_steps(value, slicer, encode)
    pieces: list[bytes] = []
    at, count = 0, len(parts)
    while at < count:
        chars = 0
        end = at
        while end < count and chars < PIECE_CHARS:
            chars += len(parts[end])
            end += 1
        pieces.append("".join(parts[at:end]).encode())
        at = end
        slicer.look_soon()  # (a piece is a large piece of work)
        if slicer.due():
            yield
    return pieces
