"""Long strings of a large frame, made a slice at a time.

Python makes a ``str`` (or ``bytes``) in one call over all of its content: a long
string holds the event loop while it is made, whatever slicing goes on around it. Here a
long string is allocated first and filled a piece of :data:`PIECE_BYTES` at a time by
the C helper ``_pieces`` (the walk yields between pieces when its slice is over):

- **ASCII** text (base64, JSON, most large payloads) and byte strings: filled as they
  are, one ``memcpy`` a piece; an ASCII ``str`` is its UTF-8 bytes.
- **other text**: decoded as UTF-8 a piece at a time, then the pieces are joined once
  (one copy, no decoding): not cut, so a long non-ASCII string still holds the loop
  for that copy.

Without the compiled helper (no compiler where the package was installed) every long
string takes the second path. Errors are those of decoding UTF-8 (``UnicodeError``).
"""

from __future__ import annotations

import codecs
from typing import Final

from ...core import native
from ..slicing import CHECK_EVERY, Slicer, Steps

_c = native.extension("trioqueue.transport._pieces")
HAVE_PIECES = _c is not None
if _c is not None:
    fill, new_ascii, new_bytes = _c.fill, _c.new_ascii, _c.new_bytes

__all__ = ["HAVE_PIECES", "PIECE_BYTES", "bytes_steps", "joined_bytes_steps", "text_steps"]

#: Bytes copied (or decoded) between two looks at the slice's clock.
PIECE_BYTES: Final = 128 * 1024


def text_steps(view: memoryview, slicer: Slicer) -> Steps[str]:
    """The string whose UTF-8 encoding is ``view``."""
    size = len(view)
    if HAVE_PIECES:
        text = new_ascii(size)
        for start in range(0, size, PIECE_BYTES):
            if not fill(text, start, view[start:start + PIECE_BYTES]):
                break  # not ASCII: decoded below
            if slicer.due(CHECK_EVERY):
                yield
        else:
            return text
        del text
    decoder = codecs.getincrementaldecoder("utf-8")()
    parts = []
    for start in range(0, size, PIECE_BYTES):
        parts.append(decoder.decode(view[start:start + PIECE_BYTES]))
        if slicer.due(CHECK_EVERY):
            yield
    parts.append(decoder.decode(b"", True))
    return "".join(parts)


def bytes_steps(view: memoryview, slicer: Slicer) -> Steps[bytes]:
    """A copy of ``view``, made a piece at a time."""
    if not HAVE_PIECES:
        return bytes(view)
    size = len(view)
    out = new_bytes(size)
    for start in range(0, size, PIECE_BYTES):
        fill(out, start, view[start:start + PIECE_BYTES])
        if slicer.due(CHECK_EVERY):
            yield
    return out


def joined_text_steps(parts: list[str], slicer: Slicer) -> Steps[str]:
    """``"".join(parts)``, made a part at a time when every part is ASCII (a long JSON
    string decoded in pieces: joined at once, it held the loop for the whole copy). Other
    text is joined in one copy, as :func:`text_steps` does."""
    if not HAVE_PIECES or not all(part.isascii() for part in parts):
        return "".join(parts)
    text = new_ascii(sum(map(len, parts)))
    at = 0
    for part in parts:
        fill(text, at, part.encode("ascii"))
        at += len(part)
        if slicer.due(CHECK_EVERY):
            yield
    return text


def joined_bytes_steps(parts: list[bytes], slicer: Slicer) -> Steps[bytes]:
    """``b"".join(parts)``, made a piece at a time; each part let go of (``parts``
    emptied) once copied, so the bytes are held about once, as by the join."""
    if not HAVE_PIECES:
        joined = b"".join(parts)
        parts.clear()
        return joined
    out = new_bytes(sum(map(len, parts)))
    at = 0
    for index, part in enumerate(parts):
        with memoryview(part) as view:
            for start in range(0, len(view), PIECE_BYTES):
                fill(out, at + start, view[start:start + PIECE_BYTES])
                if slicer.due(CHECK_EVERY):
                    yield
        at += len(part)
        parts[index] = b""
    parts.clear()
    return out
