"""``Queue.add(..., repeat={...})``: the option's Python names and checks, and a chain
run by a Worker on every connection mode and event loop."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import anyio
import pytest

from trioqueue.client import Connection, Job, Queue, Repeat, ValidationError, Worker
from trioqueue.client.options import job_options
from trioqueue.client.repeat import repeat_option
from trioqueue.testing.workers import run_workers_until

from .test_worker import wait_until

pytestmark = pytest.mark.anyio


def test_python_names_become_wire_keys() -> None:
    start = datetime(2030, 1, 1, 9, 0, tzinfo=timezone(timedelta(hours=1)))
    repeat: Repeat = {"pattern": "0 9 * * 1-5", "tz": "Europe/Rome", "limit": 10,
                      "start_date": start, "end_date": 1_900_000_000_000, "offset": 0,
                      "immediately": True}
    assert job_options({"repeat": repeat}) == {"repeat": {
        "pattern": "0 9 * * 1-5", "tz": "Europe/Rome", "limit": 10,
        "startDate": int(start.timestamp() * 1000), "endDate": 1_900_000_000_000,
        "offset": 0, "immediately": True}}
    assert repeat_option("repeat", {"every": 1000, "limit": None}) == {"every": 1000}


@pytest.mark.parametrize(("repeat", "message"), [
    ("daily", r"^repeat must be a mapping, not 'daily' \(str\)$"),
    ({}, r"^repeat needs exactly one of 'every' and 'pattern'$"),
    ({"every": 10, "pattern": "* * * * *"}, r"^repeat needs exactly one of"),
    ({"every": 0}, r"^repeat\['every'\] must be whole milliseconds \(an int\) of at least 1"),
    ({"every": 1.5}, r"^repeat\['every'\] must be whole milliseconds"),
    ({"every": 10, "limit": -1}, r"^repeat\['limit'\] must be an int of at least 0"),
    ({"every": 10, "start_date": datetime(2030, 1, 1)},
     r"^repeat\['start_date'\] must be an aware datetime"),
    ({"every": 10, "end": 5}, r"^repeat has no key 'end' \(it takes every, pattern, "),
    ({"pattern": " "}, r"^repeat\['pattern'\] must be a non-empty string"),
    ({"every": 10, "immediately": 1}, r"^repeat\['immediately'\] must be True or False"),
])
def test_bad_repeat_is_refused_before_sending(repeat: Any, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        job_options({"repeat": repeat})


async def test_the_broker_refuses_what_it_refuses(conn: Connection) -> None:
    queue = Queue("r-refused", conn)
    with pytest.raises(Exception, match="Invalid repeat pattern: Invalid cron expression"):
        await queue.add("n", {}, repeat={"pattern": "99 * * * *"})
    with pytest.raises(Exception, match="repeat jobs cannot use JobOptions.jobId"):
        await queue.add("n", {}, job_id="mine", repeat={"every": 1000})


async def test_a_worker_runs_every_generation_of_the_chain(conn: Connection) -> None:
    queue = Queue("r-chain", conn)
    seen: list[int] = []
    done = anyio.Event()

    async def process(job: Job) -> int:
        seen.append(job.raw["repeat"]["count"])
        if len(seen) == 3:
            done.set()
        return len(seen)

    first = await queue.add("tick", {"n": 1}, repeat={"every": 100, "limit": 2})
    await run_workers_until([Worker("r-chain", process, conn)], done)
    assert seen == [0, 1, 2]  # limit 2: the first run and two successors

    async def chain_ended() -> bool:
        counts = await queue.get_job_counts()
        return counts["completed"] == 3 and counts["delayed"] + counts["waiting"] == 0

    await wait_until(chain_ended)
    finished = await queue.get_job(first.id)
    assert finished is not None and finished.raw["repeat"]["count"] == 0
    second = finished.raw["repeat"]["successorId"]
    assert await queue.get_job_state(second) == "completed"


async def test_update_of_a_completed_generation_reaches_the_next(conn: Connection) -> None:
    queue = Queue("r-update", conn)
    done = anyio.Event()

    async def process(job: Job) -> None:
        done.set()

    first = await queue.add("tick", {"n": 1}, repeat={"every": 3_600_000})
    await run_workers_until([Worker("r-update", process, conn)], done)

    async def completed() -> bool:
        return await queue.get_job_state(first.id) == "completed"

    await wait_until(completed)
    finished = await queue.get_job(first.id)
    assert finished is not None
    successor_id = finished.raw["repeat"]["successorId"]
    await queue.update_job_data(first.id, {"n": 2})
    successor = await queue.get_job(successor_id)
    assert successor is not None and successor.data == {"n": 2}
    assert await queue.get_job_state(successor_id) == "delayed"
