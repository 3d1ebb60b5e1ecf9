"""Job ids and lock tokens: lowercase UUIDv7 strings, time-ordered like bunqueue's."""

import os
import time

_last_ms = 0
_counter = 0


def uuid7(now_ms: int | None = None) -> str:
    """Return a new UUIDv7 string.

    Within one millisecond a 12-bit counter (seeded randomly each new millisecond) keeps
    ids strictly increasing, so ids sort in creation order as bunqueue's do.
    """
    global _last_ms, _counter
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    if ms <= _last_ms:
        ms = _last_ms
        _counter += 1
        if _counter > 0xFFF:
            ms += 1
            _counter = 0
    else:
        _counter = int.from_bytes(os.urandom(2), "big") & 0x3FF
    _last_ms = ms
    rand = int.from_bytes(os.urandom(8), "big") & 0x3FFFFFFFFFFFFFFF
    value = (ms & 0xFFFFFFFFFFFF) << 80 | 0x7 << 76 | _counter << 64 | 0b10 << 62 | rand
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
