"""A queue actor's notices: same-queue rounds, and replies held for other queues' echoes
(trioqueue.actors.notices), between two queues wired by hand."""

from __future__ import annotations

from typing import Any

from trioqueue.actors.notices import NOTICE_ROUNDS, Notices
from trioqueue.core.queue import AfterQueues


class FakeQueue:
    """The part of QueueState that Notices uses: its outgoing notices, and what it
    applied. A notice ``("spawn", target, n)`` makes ``n`` more for ``target``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.notices: list[tuple[str, tuple[Any, ...]]] = []
        self.applied: list[tuple[Any, ...]] = []

    def take_notices(self) -> list[tuple[str, tuple[Any, ...]]]:
        taken, self.notices = self.notices, []
        return taken

    def apply_notice(self, notice: tuple[Any, ...], now: int) -> None:
        self.applied.append(notice)
        if notice[0] == "spawn" and notice[2] > 0:
            self.notices.append((notice[1], ("spawn", notice[1], notice[2] - 1)))


class Broker:
    """Two queues, ``a`` and ``b``; a notice's target names its queue (``a:...``)."""

    def __init__(self) -> None:
        self.queues = {name: FakeQueue(name) for name in "ab"}
        self.notices = {name: Notices(name, self.post_notices, self.post_to) for name in "ab"}
        self.posted: list[tuple[str, str]] = []  # (queue, kind), in the order posted


    def post_notices(self, notices: list[tuple[str, tuple[Any, ...]]]) -> None:
        for target, notice in notices:
            self.posted.append((target.split(":")[0], notice[0]))
            self.notices[target.split(":")[0]].append(notice)

    def post_to(self, queue: str, notice: tuple[Any, ...]) -> bool:
        if queue not in self.notices:
            return False
        self.posted.append((queue, notice[0]))
        self.notices[queue].append(notice)
        return True

    def step(self, name: str) -> list[Any]:
        """What a queue actor's step does with notices: apply, then send."""
        deliveries: list[Any] = []
        q = self.queues[name]
        self.notices[name].apply(q, 0, deliveries)  # type: ignore[arg-type]
        self.notices[name].send(q, deliveries)  # type: ignore[arg-type]
        return deliveries


def test_notices_for_the_queues_own_jobs_are_applied_in_the_same_step() -> None:
    broker = Broker()
    broker.notices["a"].append(("spawn", "a:j", 3))
    assert broker.step("a") == []
    assert [n[2] for n in broker.queues["a"].applied] == [3, 2, 1, 0]
    assert not broker.notices["a"].pending


def test_same_queue_rounds_are_bounded_and_the_rest_waits_for_the_next_step() -> None:
    broker = Broker()
    broker.notices["a"].append(("spawn", "a:j", NOTICE_ROUNDS + 5))
    broker.step("a")
    assert len(broker.queues["a"].applied) == NOTICE_ROUNDS
    assert broker.notices["a"].pending  # still there, ahead of the next step's commands
    broker.step("a")
    assert len(broker.queues["a"].applied) == NOTICE_ROUNDS + 6


def test_a_held_reply_waits_for_the_other_queue_and_what_it_sent_back() -> None:
    broker = Broker()
    a, b = broker.queues["a"], broker.queues["b"]
    # A command on ``a`` asked ``b`` for something that ``b`` answers with a notice.
    a.notices.append(("b:child", ("spawn", "a:parent", 1)))
    broker.notices["a"].hold("replier", {"ok": True}, AfterQueues({}, frozenset("b")))
    assert broker.step("a") == []  # the reply is held
    assert broker.step("b") == []
    assert b.applied == [("spawn", "a:parent", 1)]
    assert broker.step("a") == [("replier", {"ok": True})]
    # ``b``'s notice for ``a`` was applied before the reply went out.
    assert a.applied == [("spawn", "a:parent", 0)]


def test_a_notice_the_echo_target_makes_while_applying_goes_before_the_echo() -> None:
    """Within one round of ``b`` (no end-of-step send), the echo still comes after."""
    broker = Broker()
    a = broker.queues["a"]
    a.notices.append(("b:child", ("spawn", "a:parent", 1)))  # b makes one for a
    broker.notices["a"].hold("r", {}, AfterQueues({}, frozenset("b")))
    broker.step("a")
    broker.posted.clear()
    broker.notices["b"].apply(broker.queues["b"], 0, [])  # type: ignore[arg-type]
    assert broker.posted == [("a", "spawn"), ("a", "echo_back")]
    assert broker.step("a") == [("r", {})]
    assert a.applied == [("spawn", "a:parent", 0)]


def test_a_reply_held_for_several_queues_waits_for_each() -> None:
    broker = Broker()
    broker.notices["a"].hold("r", {"n": 1}, AfterQueues({}, frozenset({"b", "a2"})))
    broker.notices["a2"] = Notices("a2", broker.post_notices, broker.post_to)
    broker.queues["a2"] = FakeQueue("a2")
    broker.step("a")
    broker.step("b")
    assert broker.step("a") == []
    broker.step("a2")
    assert broker.step("a") == [("r", {"n": 1})]


def test_a_held_reply_for_a_queue_that_does_not_exist_is_answered_at_once() -> None:
    broker = Broker()
    broker.notices["a"].hold("r", {"ok": True}, AfterQueues({}, frozenset({"gone"})))
    assert broker.step("a") == [("r", {"ok": True})]
