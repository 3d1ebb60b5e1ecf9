"""GetJobs over finished and live jobs together: a page at any offset, found by rank.

The listing is the merge, by ``(createdAt, id)``, of several sorted parts: the live
orders (in memory, :mod:`.order`) and one or two finished states (in the store). The
page at ascending position ``start`` begins, in each finished part, at its *split*: how
many of its jobs come before the job at global position ``start``. The rest of the page
then comes from each part at its split (live at ``start`` minus the finished splits),
merged: O(page · parts).

A split is found without walking to it. The global position of the job at position
``x`` of a finished part is ``x`` plus the jobs of the other finished part before it
(the store says, :data:`~.finished.RANKS`) plus the live jobs before it
(:func:`~.order.ranks`, from memory); it grows with ``x``, so the split is the number
of positions below ``start``, found by a search. Each round asks the store, in one read
per finished part, about :data:`PROBES` positions spread over what is left of the
range, which shrinks it that many times: a million finished jobs take four rounds.

The command runs again after each round (:class:`~.finished.NeedData`) and replays the
search from the answers it was given, which are the same, so it arrives where it
stopped and asks the next round.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .finished import LIST, RANKS
from .order import CreationOrder, page, ranks

if TYPE_CHECKING:
    from .state import QueueState

# positions of one finished part asked about per round: a range shrinks 65 times a round
PROBES = 64

Row = tuple[int, str, Any]  # (createdAt, id, live JobRecord | finished record)


def window(total: int, *, asc: bool, offset: int, limit: int) -> tuple[int, int]:
    """``(start, take)``: the page ``offset, limit`` as ascending positions among
    ``total`` jobs (a descending page is the same range counted from the other end,
    read ascending and reversed)."""
    offset = max(offset, 0)
    if limit <= 0 or offset >= total:
        return 0, 0
    take = min(limit, total - offset)
    return (offset if asc else total - offset - take), take


def mixed_page(q: QueueState, live: list[CreationOrder], counts: dict[str, int], *,
               start: int, take: int) -> list[Row]:
    """The ``take`` jobs from ascending position ``start`` of the merged order of the
    live ``orders`` and the finished states of ``counts`` (state -> jobs stored, none
    empty), ascending."""
    splits = _splits(q, live, counts, start)
    parts = [state for state, x in splits.items() if x < counts[state]]
    q.finished.want([(LIST, state, True, splits[state], take) for state in parts])
    at = start - sum(splits.values())
    rows: list[Row] = [(created, job_id, q.jobs[job_id])
                       for created, job_id in page(live, asc=True, offset=at, limit=take)]
    for state in parts:
        for rec in q.finished.list(state, asc=True, offset=splits[state], limit=take):
            rows.append((int(rec["createdAt"]), rec["id"], rec))
    rows.sort(key=lambda r: (r[0], r[1]))
    return rows[:take]


def _splits(q: QueueState, live: list[CreationOrder], counts: dict[str, int],
            start: int) -> dict[str, int]:
    """Per finished state, how many of its jobs come before global position ``start``."""
    total = sum(o.size for o in live) + sum(counts.values())
    # the split lies in [lo, hi]: the others hold total - n jobs, the part n
    bounds = {state: (max(0, start - (total - n)), min(start, n))
              for state, n in counts.items()}
    while True:
        reads = [(RANKS, state, _probes(lo, hi), tuple(o for o in counts if o != state))
                 for state, (lo, hi) in bounds.items() if lo < hi]
        if not reads:
            return {state: lo for state, (lo, _) in bounds.items()}
        q.finished.want(reads)
        for _, state, positions, others in reads:
            found = q.finished.ranks(state, positions, others)
            live_before = ranks(live, [(created, job_id) for created, job_id, _ in found])
            lo, hi = bounds[state]
            for x, (_, _, before), n_live in zip(positions, found, live_before, strict=True):
                if x + sum(before) + n_live < start:
                    lo = x + 1
                else:
                    hi = x
                    break
            bounds[state] = (lo, hi)


def _probes(lo: int, hi: int) -> tuple[int, ...]:
    """Positions in ``[lo, hi)`` to ask about: all of them when they are few, else
    :data:`PROBES` splitting it into even gaps."""
    if hi - lo <= PROBES:
        return tuple(range(lo, hi))
    return tuple(lo + (hi - lo) * (k + 1) // (PROBES + 1) for k in range(PROBES))
