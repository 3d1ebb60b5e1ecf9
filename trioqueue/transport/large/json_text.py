"""Large JSON texts (a REST body, a WebSocket text message) decoded in slices, so that
other connections are served meanwhile, as a large TCP frame is (``large/frames.py``).

``json`` has no resumable decoder, and one call over a text of many small values (a
few megabytes of ``[1,1,1,...]``) holds the event loop for as long as it parses. Here
the text is walked by containers, and json's own C scanner parses what fits in a
window:

- **runs**: the items of an array (or the members of an object) from the walk's
  position up to a cut (``,``, ``]`` or ``}``) about ``run_chars`` further are put
  between a bracket of their own and parsed by one call. A cut inside a string or a
  nested container leaves that text unbalanced, so the call fails and a shorter run is
  tried (the scanner reads the piece exactly as it reads the whole text up to the cut,
  so a run that parses holds exactly the items the whole text has there);
- **one item** that no run holds is parsed by itself if it fits in ``WINDOW_CHARS``;
  otherwise the walk opens it (an array or object) or decodes it a piece at a time (a
  long string: pieces cut between escapes, joined once).

An object's members are kept as they come (the runs' dicts, and members parsed alone)
and put in one dict at its end, sized for their count beforehand
(``core/presized.py``), a run at a time: the text gives no count ahead, and a dict
grown a run at a time copies every entry at each resize, each in one call.

Errors are found where a whole-text decode finds them (an item that fails alone is
parsed from the text itself) and raised as :class:`DecodeError`. The value is then
validated in slices (``datamodel.validated_steps``). What a refused text made (the
part before what is malformed, or job data over the limit) goes to the graveyard when
one is given, to be taken apart a slice at a time rather than freed in one call.

The bound that rides with the request (``Request.json_bound``) comes from the text
itself: Python's JSON of the decoded value is never longer, in UTF-16 units, than the
text's UTF-8 bytes, except for a float, whose repr (at most 24 characters) may be
longer than the token it came from (at least 3, with a ``.``, ``e`` or ``E``); so the
bytes plus 21 per such character bound it. Where that is over the data limit, each job
data of a command (a WebSocket message) is measured exactly in slices
(``data_sizes.data_bound_steps``), and data over the limit refused there.
"""

from __future__ import annotations

import json
import re
from json.decoder import scanstring  # type: ignore[attr-defined]
from typing import Any, Final, NoReturn

from ...core.large_values.graveyard import Graveyard
from ...core.presized import MIN_PRESIZED, merge_into, presized_dict
from ..slicing import Slicer, Steps, run_sliced
from ..wire.datamodel import MAX_DEPTH, DecodeError, validated_steps
from ..wire.framing import Payload
from .data_sizes import data_bound_steps
from .long_strings import joined_text_steps, text_steps

__all__ = ["WINDOW_CHARS", "decode_large_json", "json_decode_steps"]

#: Text one json call may parse (a run of items, or one item).
WINDOW_CHARS: Final = 16 * 1024
#: The first piece one item is tried in (doubled up to the window).
FIRST_PIECE_CHARS: Final = 256
#: The shortest run tried before one item is parsed alone.
MIN_RUN_CHARS: Final = 16
#: Characters of a long string decoded by one call.
PIECE_CHARS: Final = 64 * 1024
#: The weight of one string piece for the slicer (a look at the clock after each).
CHECK_PIECE: Final = 32
#: Payload bytes counted at once for the bound.
COUNT_BYTES: Final = 64 * 1024
#: What a float's repr may add to its token: 24 characters at most, from 3 at least.
FLOAT_EXTRA_CHARS: Final = 21

_WS = re.compile(r"[ \t\n\r]*")
_CUT = re.compile(r"[,\]}]")
# A string's content as tokens (runs without a backslash, and escapes): matched up to
# a position, it ends on a boundary between two tokens.
_TOKENS = re.compile(r'(?:[^\\"]+|\\u[0-9a-fA-F]{4}|\\[^u])*')
_HIGH_ESCAPE = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}")
_LOW_ESCAPE = re.compile(r"\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_FLOAT_MARKS: Final = b".eE"
_NOT_FITTED: Any = object()


def _refuse_constant(name: str) -> NoReturn:
    # as the codec's: JSON.parse rejects NaN and Infinity
    raise DecodeError(f"{name} is not valid JSON")


_scan = json.JSONDecoder(parse_constant=_refuse_constant).scan_once  # type: ignore[attr-defined]


def _bad(what: str) -> DecodeError:
    return DecodeError(f"invalid JSON payload: {what}")


async def decode_large_json(raw: Payload, text: str | None = None, *, bound_up_to: int,
                            graveyard: Graveyard | None = None) -> tuple[Any, int | None]:
    """Decode and validate the JSON text ``raw`` (its UTF-8 bytes; ``text``: the same
    text when the caller has it) in slices; (value, JSON bound or None). Raises
    :class:`DecodeError` as ``JSON.decode`` does (``DataTooLarge`` for a command's job
    data over ``bound_up_to``). The bound is given only when it is at most
    ``bound_up_to`` (the job data limit: above it, it is of no use). What a refused
    text made goes to ``graveyard``."""
    slicer = Slicer()
    return await run_sliced(json_decode_steps(raw, text, slicer, bound_up_to, graveyard),
                            slicer)


def json_decode_steps(raw: Payload, text: str | None, slicer: Slicer, bound_up_to: int,
                      graveyard: Graveyard | None = None) -> Steps[tuple[Any, int | None]]:
    """The work of :func:`decode_large_json`, as a generator that yields between slices."""
    made: list[Any] = []  # the containers the walk opened: buried if the text is refused
    try:
        return (yield from _decoded_steps(raw, text, slicer, bound_up_to, made))
    except DecodeError:
        if graveyard is not None:
            # each once: one buried twice would be held by its other grave
            for container in {id(container): container for container in made}.values():
                graveyard.bury(container)
        made.clear()
        raise


def _decoded_steps(raw: Payload, text: str | None, slicer: Slicer, bound_up_to: int,
                   made: list[Any]) -> Steps[tuple[Any, int | None]]:
    try:
        if text is None:
            with memoryview(raw) as view:
                text = yield from text_steps(view, slicer)
        walk = _JsonWalk(text, slicer, made)
        value = yield from walk.value(0)
        made.append(value)  # (whole: refused while validated or measured, it goes too)
        if walk.skip_ws():
            raise _bad("extra data")
        value, _ = yield from validated_steps(value, slicer)
    except DecodeError:
        raise
    except (ValueError, RecursionError) as exc:  # (UnicodeDecodeError is a ValueError)
        raise _bad(str(exc)) from None
    bound = len(raw)
    for start in range(0, len(raw), COUNT_BYTES):
        chunk = raw[start:start + COUNT_BYTES]
        bound += FLOAT_EXTRA_CHARS * (len(chunk) - len(chunk.translate(None, _FLOAT_MARKS)))
        if slicer.due(8):
            yield
    if bound <= bound_up_to or bound_up_to <= 0:
        return value, bound if bound <= bound_up_to else None
    # Measured exactly, data by data (a command's; None for a REST body); over the
    # limit, refused here (DataTooLarge)
    return value, (yield from data_bound_steps(value, bound_up_to, slicer))


class _JsonWalk:
    """One JSON text, walked (``pos``: where the walk is)."""

    __slots__ = ("text", "pos", "slicer", "run_chars", "made")

    def __init__(self, text: str, slicer: Slicer, made: list[Any]) -> None:
        self.text = text
        self.pos = 0
        self.slicer = slicer
        self.run_chars = WINDOW_CHARS  # halved after a run that does not parse
        self.made = made  # each container opened (and an object's members kept)

    def skip_ws(self) -> str:
        """Moves past whitespace; the character there ('' at the end of the text)."""
        pos = self.pos = _WS.match(self.text, self.pos).end()  # type: ignore[union-attr]
        return self.text[pos:pos + 1]

    def value(self, depth: int) -> Steps[Any]:
        """The value at ``pos``; moves past it."""
        first = self.skip_ws()
        if first in ("[", "{", '"'):
            fitted = self._fitted()
            if fitted is not _NOT_FITTED:
                return fitted
            if first == '"':
                return (yield from self._long_string())
            if depth >= MAX_DEPTH:
                raise DecodeError(f"nesting deeper than {MAX_DEPTH}")
            return (yield from self._container(first == "{", depth + 1))
        return self._scan_at(self.pos)  # a number or a literal: short

    def _scan_at(self, pos: int) -> Any:
        try:
            value, self.pos = _scan(self.text, pos)
        except StopIteration:
            raise _bad(f"expecting value at {pos}") from None
        return value

    def _fitted(self) -> Any:
        """The array, object or string at ``pos`` if it ends within the window: tried
        in a piece of ``FIRST_PIECE_CHARS``, then of twice as many, up to the window."""
        pos = self.pos
        text = self.text
        if len(text) - pos <= WINDOW_CHARS:
            return self._scan_at(pos)  # all that is left is short: its error is the text's
        size = FIRST_PIECE_CHARS
        while size <= WINDOW_CHARS:
            piece = text[pos:pos + size]
            try:
                value, end = _scan(piece, 0)
            except (ValueError, StopIteration, RecursionError):
                size *= 2  # too long for the piece (or bad: found when opened)
                continue
            self.pos = pos + end
            return value
        return _NOT_FITTED

    def _container(self, is_map: bool, depth: int) -> Steps[Any]:
        closer = "}" if is_map else "]"
        # an object's runs (dicts) and members parsed alone (key, value pairs), in order
        out: list[Any] = []
        self.made.append(out)
        count = 0  # an object's members kept (a later one of a key replaces it)
        self.pos += 1
        if self.skip_ws() == closer:
            self.pos += 1
            return {} if is_map else out
        while True:
            run = self._run("{" if is_map else "[", closer)
            if run is not None:
                out.append(run) if is_map else out.extend(run)
                count += len(run)
            elif is_map:
                out.append((yield from self._member(depth)))
                count += 1
            else:
                out.append((yield from self.value(depth)))
            separator = self.skip_ws()
            self.pos += 1
            if separator == closer:
                return (yield from self._object(out, count)) if is_map else out
            if separator != "," or self.skip_ws() == closer:
                raise _bad(f"expecting ',' or '{closer}' at {self.pos - 1}")
            if self.slicer.due(len(run) if run is not None else 1):
                yield

    def _member(self, depth: int) -> Steps[tuple[Any, Any]]:
        """An object's member at ``pos`` that no run holds: (key, value)."""
        if self.skip_ws() != '"':
            raise _bad(f"expecting property name at {self.pos}")
        key = yield from self.value(depth)
        if self.skip_ws() != ":":
            raise _bad(f"expecting ':' at {self.pos}")
        self.pos += 1
        return key, (yield from self.value(depth))

    def _object(self, kept: list[Any], count: int) -> Steps[dict[Any, Any]]:
        """The dict of an object's ``kept`` runs and members (``count`` in all), made
        sized for them and filled a run at a time; a later member wins, as in json (so
        does update)."""
        out = presized_dict(count)
        self.made.append(out)
        if count < MIN_PRESIZED:  # (a few short resizes)
            for run in kept:
                out.update(run) if type(run) is dict else out.__setitem__(*run)
            kept.clear()
            return out
        for at, run in enumerate(kept):
            if type(run) is dict:
                merge_into(out, run)
                members = len(run)
            else:
                out[run[0]] = run[1]
                members = 1
            kept[at] = None  # (each run freed as it is taken: a few hundred entries)
            if self.slicer.due(members):
                yield
        kept.clear()
        return out

    def _run(self, opener: str, closer: str) -> Any:
        """The items from ``pos`` to a cut about ``run_chars`` on, parsed by one call
        between brackets of their own (a dict for an object); None when no run parses
        (the item at ``pos`` is longer than the shortest run)."""
        text = self.text
        start = self.pos
        size = self.run_chars
        while True:
            # (looked for within a window only: a long string has no cut to find)
            found = _CUT.search(text, start + size, start + size + WINDOW_CHARS)
            if found is not None:
                cut = found.start()
                # a cut at a closer may be the end of an item (a nested array or
                # object): then the run ends after it
                for end_at in (cut, cut + 1) if text[cut] != "," else (cut,):
                    value = self._parsed(opener + text[start:end_at] + closer)
                    if value:
                        self.pos = end_at
                        self.run_chars = min(WINDOW_CHARS, 2 * size)
                        return value
            if size <= MIN_RUN_CHARS:
                self.run_chars = MIN_RUN_CHARS
                return None
            size //= 2

    @staticmethod
    def _parsed(piece: str) -> Any:
        """The array or object ``piece`` holds exactly; None if it holds no such text."""
        try:
            value, end = _scan(piece, 0)
        except (ValueError, StopIteration, RecursionError):
            return None
        return value if end == len(piece) else None

    def _long_string(self) -> Steps[str]:
        """The string at ``pos``, too long for the window, decoded a piece of about
        ``PIECE_CHARS`` at a time: each piece ends between two escapes (never between
        the two of a surrogate pair); ASCII pieces are joined a piece at a time, others
        once."""
        text = self.text
        at = self.pos + 1
        parts = []
        while True:
            cut = _TOKENS.match(text, at, at + PIECE_CHARS).end()  # type: ignore[union-attr]
            if _HIGH_ESCAPE.match(text, max(0, cut - 6)) and _LOW_ESCAPE.match(text, cut):
                cut += 6  # the low half of the pair comes with it
            if cut > at:
                parts.append(scanstring(text[at:cut] + '"', 0)[0])
                at = cut
            elif text[at:at + 1] != '"':
                what = "invalid \\escape" if text[at:at + 1] else "unterminated string"
                raise _bad(f"{what} at {at}")
            if text[at:at + 1] == '"':
                break
            if self.slicer.due(CHECK_PIECE):
                yield
        self.pos = at + 1
        self.slicer.look_soon()
        return (yield from joined_text_steps(parts, self.slicer))
