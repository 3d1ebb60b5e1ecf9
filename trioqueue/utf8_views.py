"""A read-only view of a string's UTF-8 bytes, without copying them.

A long string in a job's data (an 8.5 MB job is one) was copied whole at every step
that wrote it out: once into msgpack's buffer and again into the ``bytes`` it returns,
for the storage row and for every reply that carries the job. Each copy of fresh
memory is milliseconds of the event loop. CPython already keeps the UTF-8 form of a
string (an ASCII string *is* its UTF-8 bytes; any other caches it on first use), so
:func:`utf8_view` exposes that buffer as a ``memoryview``: LMDB's put and the socket's
``writev`` read from it directly.

The view holds a reference to the string, so the buffer lives as long as the view
does (a reply still queued keeps its job's text). Only CPython has the C API this uses
(through ``ctypes.pythonapi``, which keeps the GIL and raises the call's error);
elsewhere, under ``TRIOQUEUE_PURE_PYTHON`` (the rule of ``trioqueue.core.native``, read
here too because this module imports nothing of ours) and for a string with lone
surrogates (no UTF-8 form), :func:`utf8_view` returns None and callers encode as before.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["utf8_view"]


def _as_utf8() -> Callable[..., Any] | None:
    if sys.implementation.name != "cpython":
        return None
    if os.environ.get("TRIOQUEUE_PURE_PYTHON", "") not in ("", "0"):
        return None  # no reach into the interpreter's internals: callers encode
    func = ctypes.pythonapi.PyUnicode_AsUTF8AndSize
    func.restype = ctypes.c_void_p
    func.argtypes = (ctypes.py_object, ctypes.POINTER(ctypes.c_ssize_t))
    return func  # type: ignore[no-any-return]


_AS_UTF8 = _as_utf8()


def utf8_view(text: str) -> memoryview | None:
    """``text``'s UTF-8 bytes as a read-only view (no copy), or None when it has none
    (lone surrogates) or the interpreter offers no such access."""
    if _AS_UTF8 is None or type(text) is not str:
        return None
    size = ctypes.c_ssize_t()
    try:
        address = _AS_UTF8(text, ctypes.byref(size))
    except UnicodeError:
        return None
    if not size.value:
        return memoryview(b"")
    buffer = (ctypes.c_char * size.value).from_address(address)
    # the array does not own the memory it maps: the string does, so it is kept with it
    buffer.owner = text  # type: ignore[attr-defined]
    return memoryview(buffer).cast("B").toreadonly()
