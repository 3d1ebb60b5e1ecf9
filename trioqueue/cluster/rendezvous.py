"""Which live broker should own a queue: rendezvous (highest random weight) hashing.

Each (broker, queue) pair gets a pseudo-random weight; the queue's preferred owner is
the live broker with the highest. Every broker computes the same answer from the same
list of live brokers, with no coordination, and when a broker joins or leaves only the
queues it wins or loses change hands (about 1/n of them), unlike ``hash % n``, which
moves almost all. Pure: the cluster runtime (cluster/view.py) asks it.
"""

from __future__ import annotations

from collections.abc import Iterable
from hashlib import blake2b


def weight(broker_id: str, queue: str) -> int:
    """The pair's weight: 8 bytes of BLAKE2b over both names, NUL between them so that
    ("ab", "c") and ("a", "bc") weigh differently."""
    digest = blake2b(f"{broker_id}\x00{queue}".encode("utf-8", "surrogatepass"),
                     digest_size=8).digest()
    return int.from_bytes(digest, "big")


def preferred_owner(queue: str, brokers: Iterable[str]) -> str | None:
    """The broker among ``brokers`` that should own ``queue`` (None: no broker). Ties
    (a 64-bit collision) go to the larger id, so the answer never depends on order."""
    best: tuple[int, str] | None = None
    for broker in brokers:
        candidate = (weight(broker, queue), broker)
        if best is None or candidate > best:
            best = candidate
    return None if best is None else best[1]
