"""Job ids and lock tokens: lowercase UUIDv7 strings, time-ordered like bunqueue's."""

import os
import random
import time

_random = random.Random(os.urandom(16))
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
        _counter = _random.getrandbits(10)
    _last_ms = ms
    # Ids and lock tokens only need to be unique and unguessable by accident, not
    # secret (auth guards against hostile clients): a seeded PRNG is 4x cheaper than
    # reading the OS entropy pool on every push.
    rand = _random.getrandbits(62)
    value = (ms & 0xFFFFFFFFFFFF) << 80 | 0x7 << 76 | _counter << 64 | 0b10 << 62 | rand
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
