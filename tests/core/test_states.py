"""The transition table itself (trioqueue.core.states), in the shape of h11's
``test_state.py``: every allowed move leads where the table says, every other move is
refused, and the queue's one writer of ``job.state`` asks with the job's current state.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from trioqueue.core import states as st
from trioqueue.core.errors import Refused
from trioqueue.core.job import ACTIVE, COMPLETED, FAILED, QUEUED, WAITING_CHILDREN
from trioqueue.core.options import parse_job_input
from trioqueue.core.queue import lifecycle
from trioqueue.testing.queue import QueueHarness

NOW = 1_700_000_000_000
STORED_STATES = [st.NEW, QUEUED, ACTIVE, WAITING_CHILDREN, COMPLETED, FAILED, st.GONE]
EVENTS = sorted({event for _, event in st.TRANSITIONS})


@pytest.mark.parametrize(("state", "event"), sorted(st.TRANSITIONS))
def test_every_allowed_move_leads_where_the_table_says(state: str, event: str) -> None:
    assert st.next_state(state, event) == st.TRANSITIONS[(state, event)]


@pytest.mark.parametrize(
    ("state", "event"),
    [pair for pair in itertools.product(STORED_STATES, EVENTS) if pair not in st.TRANSITIONS])
def test_every_other_move_is_refused(state: str, event: str) -> None:
    with pytest.raises(Refused, match=f"Cannot apply {event} to a job in state {state}"):
        st.next_state(state, event)


def test_gone_is_final_and_new_only_admits() -> None:
    assert not [pair for pair in st.TRANSITIONS if pair[0] == st.GONE]
    assert {event for state, event in st.TRANSITIONS if state == st.NEW} == {st.PUSH}


def test_finished_jobs_can_only_be_removed_or_revived() -> None:
    for finished in (COMPLETED, FAILED):
        moves = {event for state, event in st.TRANSITIONS if state == finished}
        assert moves == {st.REMOVE, st.REVIVE}


def test_every_move_ends_in_a_stored_state() -> None:
    assert set(st.TRANSITIONS.values()) <= set(STORED_STATES) - {st.NEW}


@pytest.mark.parametrize(
    ("state", "run_at", "priority", "visible"),
    [(QUEUED, NOW + 1, 0, st.DELAYED), (QUEUED, NOW + 1, 5, st.DELAYED),
     (QUEUED, NOW, 0, st.WAITING), (QUEUED, NOW, 5, st.PRIORITIZED),
     (ACTIVE, NOW + 1, 5, ACTIVE), (WAITING_CHILDREN, NOW, 0, WAITING_CHILDREN),
     (COMPLETED, NOW, 0, COMPLETED), (FAILED, NOW, 0, FAILED)])
def test_visible_state(state: str, run_at: int, priority: float, visible: str) -> None:
    assert st.visible_state(state, run_at, priority, NOW) == visible


# --- the queue asks the table with the job's current state


def _push(h: QueueHarness, **fields: Any) -> str:
    ids: list[str] = h.call("push", [parse_job_input({"data": None, **fields},
                                                     custom_id_key="jobId")], NOW)
    return ids[0]


def test_a_wrong_move_raises_where_it_is_attempted_and_changes_nothing() -> None:
    h = QueueHarness()
    job_id = _push(h)
    job = h.q.jobs[job_id]
    with pytest.raises(Refused, match="Cannot apply ack to a job in state queued"):
        lifecycle.move(h.q, job, st.ACK)
    assert job.state == QUEUED
    with pytest.raises(Refused, match="Cannot apply park to a job in state queued"):
        lifecycle.transition(h.q, job, st.PARK, NOW)
    assert job.state == QUEUED
    assert h.q.counts(NOW)["waiting"] == 1 and h.q.counts(NOW)["waiting-children"] == 0


def test_moves_follow_the_job_not_the_caller() -> None:
    """The same event from two different current states: each answered by its row."""
    h = QueueHarness()
    job_id = _push(h, maxAttempts=1)
    h.call("pull", NOW, count=1, owner=None, lock_ttl=30_000, conn=None)
    job = h.q.jobs[job_id]
    assert job.state == ACTIVE
    lifecycle.move(h.q, job, st.RELEASE)  # ACTIVE -> QUEUED
    assert job.state == QUEUED
    with pytest.raises(Refused, match="Cannot apply release to a job in state queued"):
        lifecycle.move(h.q, job, st.RELEASE)
