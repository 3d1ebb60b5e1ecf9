"""ChainedOrder (trioqueue/core/chained_order.py) against an OrderedDict, with links of
three entries so that every operation crosses links."""

from __future__ import annotations

from collections import OrderedDict

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from trioqueue.core import chained_order
from trioqueue.core.chained_order import ChainedOrder

KEYS = st.sampled_from([f"k{i}" for i in range(12)])


class ChainedOrderMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.real: ChainedOrder[int] = ChainedOrder()
        self.model: OrderedDict[str, int] = OrderedDict()

    @rule(key=KEYS, value=st.integers())
    def set(self, key: str, value: int) -> None:
        self.real[key] = value
        self.model[key] = value

    @rule(key=KEYS)
    def pop(self, key: str) -> None:
        assert self.real.pop(key, None) == self.model.pop(key, None)

    @rule(key=KEYS, last=st.booleans())
    def move(self, key: str, last: bool) -> None:
        if key in self.model:
            self.real.move_to_end(key, last=last)
            self.model.move_to_end(key, last=last)
        else:
            with pytest.raises(KeyError):
                self.real.move_to_end(key, last=last)

    @precondition(lambda self: self.model)
    @rule(last=st.booleans())
    def popitem(self, last: bool) -> None:
        assert self.real.popitem(last=last) == self.model.popitem(last=last)

    @rule(key=KEYS)
    def delete(self, key: str) -> None:
        if key in self.model:
            del self.real[key]
            del self.model[key]
        else:
            with pytest.raises(KeyError):
                del self.real[key]

    @rule()
    def clear(self) -> None:
        self.real.clear()
        self.model.clear()

    @invariant()
    def same_order_and_values(self) -> None:
        assert list(self.real) == list(self.model)
        assert len(self.real) == len(self.model) and bool(self.real) == bool(self.model)
        for key, value in self.model.items():
            assert key in self.real and self.real[key] == value
        if self.model:
            assert self.real.first() == next(iter(self.model.items()))
        else:
            with pytest.raises(KeyError):
                self.real.first()

    @invariant()
    def no_empty_link_is_kept(self) -> None:
        assert all(self.real._links.values())


@pytest.fixture(autouse=True)
def small_links(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chained_order, "LINK_MAX_ENTRIES", 3)


ChainedOrderMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=60,
                                                 deadline=None)
TestChainedOrder = ChainedOrderMachine.TestCase


def test_a_growing_order_copies_one_link_at_most() -> None:
    # With links of three, 10 keys make four links; none holds more than three.
    order: ChainedOrder[None] = ChainedOrder()
    for i in range(10):
        order[f"k{i}"] = None
    assert [len(link) for link in order._links.values()] == [3, 3, 3, 1]
    # A key stuck at the front does not keep the emptied links behind it.
    for i in range(1, 9):
        del order[f"k{i}"]
    assert [len(link) for link in order._links.values()] == [1, 1]
    assert list(order) == ["k0", "k9"]
