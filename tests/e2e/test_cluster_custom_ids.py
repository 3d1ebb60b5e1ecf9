"""One custom id, two brokers: a new custom id pushed at the same instant into two
queues that different brokers serve is admitted once, and the other push gets
bunqueue's duplicate answer (docs/scale-out.md, "Custom ids across brokers").

Needs a PostgreSQL server (``pg_dsn``); skipped, saying why, without one.
"""

from __future__ import annotations

import signal
from typing import Any

import psycopg
import trio

from trioqueue.storage import keys as K
from trioqueue.testing.cluster import BrokerCluster, connect_all, queue_served_by
from trioqueue.testing.wire import RawClient

IDS = 150  # custom ids raced per test
# The tests that kill a broker start three of their own (``three_brokers``); the others
# share the module's (``shared_three_brokers``), each with queues and ids of its own.


async def _push_all(client: RawClient, queue: str, ids: list[str]) -> list[dict[str, Any]]:
    """Send every push at once (no wait between them), then read every reply."""
    req_ids = [await client.send("PUSH", queue=queue, name="n", data={"to": queue},
                                 jobId=job_id) for job_id in ids]
    return [await client.reply_to(r) for r in req_ids]


async def _race(a: RawClient, qa: str, b: RawClient, qb: str, ids: list[str]) -> None:
    """The same ids pushed to ``qa`` through ``a`` and to ``qb`` through ``b`` at once:
    every push answered with its id."""
    replies: dict[str, list[dict[str, Any]]] = {}

    async def push(client: RawClient, queue: str) -> None:
        replies[queue] = await _push_all(client, queue, ids)

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(push, a, qa)
            nursery.start_soon(push, b, qb)
    for queue in (qa, qb):
        assert [r.get("id") for r in replies[queue]] == ids, replies[queue][:3]


async def _held(client: RawClient, queue: str) -> set[str]:
    """The ids of ``queue``'s waiting jobs, as the broker that serves it holds them."""
    jobs = (await client.ok("GetJobs", queue=queue, state="waiting", limit=10 * IDS))["jobs"]
    return {job["id"] for job in jobs}


async def test_one_new_custom_id_raced_into_two_queues_is_admitted_once(
        shared_three_brokers: BrokerCluster) -> None:
    """Each id is acknowledged as a new job by one queue only: the two queues' jobs
    together are the ids, each once, and every broker says where each one is."""
    a, b, c = await connect_all(shared_three_brokers)
    qa, qb = queue_served_by("b0", "ra-"), queue_served_by("b1", "rb-")
    ids = [f"race-{i}" for i in range(IDS)]
    await _race(a, qa, b, qb, ids)
    in_a, in_b = await _held(a, qa), await _held(b, qb)
    assert not in_a & in_b, f"{len(in_a & in_b)} ids admitted twice"
    assert in_a | in_b == set(ids)
    for job_id in ids[:20]:
        where = {(await client.ok("GetJob", id=job_id))["job"]["queue"]
                 for client in (a, b, c)}
        assert where == {qa if job_id in in_a else qb}


async def test_every_acknowledged_custom_id_job_outlives_a_takeover(
        three_brokers: BrokerCluster) -> None:
    """After the race, b1 (serving one of the two queues) is killed: the survivors take
    its queue over from the database and hold every job the two queues held before."""
    a, b, _ = await connect_all(three_brokers)
    qa, qb = queue_served_by("b0", "ta-"), queue_served_by("b1", "tb-")
    ids = [f"take-{i}" for i in range(IDS)]
    await _race(a, qa, b, qb, ids)
    before = (await _held(a, qa), await _held(b, qb))
    await three_brokers[1].kill(signal.SIGKILL)
    with trio.fail_after(20):
        while True:
            reply = await a.call("GetJobs", queue=qb, state="waiting", limit=10 * IDS)
            if reply.get("ok"):
                break
            await trio.sleep(0.05)  # (moving between brokers: asked again)
    after = (await _held(a, qa), await _held(a, qb))
    assert after == before
    assert len(after[0]) + len(after[1]) == IDS


async def test_a_claim_a_killed_broker_left_stops_blocking_once_its_lease_ran_out(
        three_brokers: BrokerCluster) -> None:
    """b1 claimed an id for its queue and was killed before its push committed: the id
    reads as taken (the duplicate answer) while b1's lease holds, and is free for
    another queue once the survivors took b1's queue over."""
    a, b, _ = await connect_all(three_brokers)
    qa, qb = queue_served_by("b0", "ka-"), queue_served_by("b1", "kb-")
    await b.ok("PUSH", queue=qb, name="n", data=1)  # (b1 holds qb's lease)
    await three_brokers[1].kill(signal.SIGKILL)
    with psycopg.connect(three_brokers.dsn, autocommit=True) as conn:
        conn.execute("""INSERT INTO tq_id_claims (id, queue, broker, epoch)
            SELECT %s, queue, owner, epoch FROM tq_queue_leases WHERE queue = %s""",
                     (K.job_key("orphan"), qb))
    reply = await a.ok("PUSH", queue=qa, name="n", data=2, jobId="orphan")
    assert reply["id"] == "orphan"
    assert (await a.ok("GetJobCounts", queue=qa))["counts"]["waiting"] == 0
    with trio.fail_after(20):  # (the lease, 2 s, then a beat's takeover)
        while (await a.ok("GetJobCounts", queue=qa))["counts"]["waiting"] == 0:
            await a.ok("PUSH", queue=qa, name="n", data=3, jobId="orphan")
            await trio.sleep(0.1)
    job = (await a.ok("GetJob", id="orphan"))["job"]
    assert (job["queue"], job["data"]) == (qa, 3)


def _claims_left(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM tq_id_claims").fetchone()
    assert row is not None
    return int(row[0])


async def test_pushb_custom_ids_raced_into_two_queues_are_admitted_once(
        shared_three_brokers: BrokerCluster) -> None:
    """The same custom ids in two PUSHBs, to two queues of two brokers at once: each id
    admitted by one queue, both batches answered with every id, no claim left over."""
    a, b, _ = await connect_all(shared_three_brokers)
    qa, qb = queue_served_by("b0", "pa-"), queue_served_by("b1", "pb-")
    ids = [f"batch-{i}" for i in range(IDS)]
    replies: dict[str, dict[str, Any]] = {}

    async def pushb(client: RawClient, queue: str) -> None:
        jobs = [{"name": "n", "data": i, "customId": job_id} for i, job_id in enumerate(ids)]
        for start in range(0, IDS, 30):  # (several batches, each racing the other's)
            replies[f"{queue}{start}"] = await client.ok(
                "PUSHB", queue=queue, jobs=jobs[start:start + 30])

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pushb, a, qa)
            nursery.start_soon(pushb, b, qb)
    for queue in (qa, qb):
        assert [i for start in range(0, IDS, 30)
                for i in replies[f"{queue}{start}"]["ids"]] == ids
    in_a, in_b = await _held(a, qa), await _held(b, qb)
    assert not in_a & in_b and in_a | in_b == set(ids)
    assert _claims_left(shared_three_brokers.dsn) == 0


async def test_a_flows_ids_across_brokers_are_taken_until_its_jobs_are_adopted(
        shared_three_brokers: BrokerCluster) -> None:
    """A flow pushed through b1 with jobs for b0's and b2's queues: its ids are taken at
    once on every broker (a push of one elsewhere is the duplicate answer), a flow
    naming one of them is refused, and no claim outlives the adoption."""
    a, b, c = await connect_all(shared_three_brokers)
    parent_q, q1, q2 = (queue_served_by(owner, f"fc-{owner}-") for owner in ("b0", "b1", "b2"))
    other = queue_served_by("b0", "fc-other-")
    jobs = [{"id": "fp", "queue": parent_q,
             "input": {"name": "p", "data": {}, "dependsOn": ["f1", "f2"]}},
            {"id": "f1", "queue": q1, "input": {"name": "c", "data": {}}},
            {"id": "f2", "queue": q2, "input": {"name": "c", "data": {}}}]
    await b.ok("PUSHF", jobs=jobs)
    for job_id in ("fp", "f1", "f2"):
        assert (await a.ok("PUSH", queue=other, name="n", jobId=job_id))["id"] == job_id
    assert (await a.ok("GetJobCounts", queue=other))["counts"]["waiting"] == 0
    again = await c.call("PUSHF", jobs=[
        {"id": "f2", "queue": other, "input": {"name": "x", "data": {}}}])
    assert again["ok"] is False and "f2" in again["error"]
    assert (await c.ok("GetJob", id="f2"))["job"]["queue"] == q2
    with trio.fail_after(10):  # (each message's claim goes in its adopter's commit)
        while _claims_left(shared_three_brokers.dsn):
            await trio.sleep(0.05)
