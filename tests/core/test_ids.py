"""Job ids and lock tokens: valid UUIDv7 strings that sort in creation order."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from trioqueue.core import ids
from trioqueue.core.ids import uuid7

MS = 1_764_489_600_000


def _ms_of(text: str) -> int:
    return uuid.UUID(text).int >> 80


def test_an_id_is_a_lowercase_version_7_uuid_carrying_its_millisecond() -> None:
    text = uuid7(MS + 123_456)
    parsed = uuid.UUID(text)
    assert str(parsed) == text  # canonical 8-4-4-4-12, lowercase
    assert parsed.version == 7 and parsed.variant == uuid.RFC_4122
    assert _ms_of(text) >= MS + 123_456


@given(steps=st.lists(st.integers(min_value=-5, max_value=3), min_size=1, max_size=200))
def test_ids_sort_in_creation_order_even_when_the_clock_stalls_or_steps_back(
        steps: list[int]) -> None:
    now = MS + 10**9
    made = []
    for step in steps:
        now += step
        made.append(uuid7(now))
    assert made == sorted(made)
    assert len(set(made)) == len(made)


def test_more_than_4096_ids_in_one_millisecond_borrow_the_next_one() -> None:
    now = MS + 2 * 10**9
    made = [uuid7(now) for _ in range(5000)]
    assert made == sorted(made) and len(set(made)) == len(made)
    assert _ms_of(made[-1]) > now  # the 12-bit counter ran out: the clock moved on
    assert ids._counter <= 0xFFF
