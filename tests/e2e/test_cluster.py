"""Three brokers on one PostgreSQL database, as a user sees them: any broker answers any
command, whichever broker serves the queue (docs/scale-out.md).

Needs a PostgreSQL server (``pg_dsn``); skipped, saying why, without one.
"""

from __future__ import annotations

import trio

from trioqueue.cluster.rendezvous import preferred_owner
from trioqueue.testing.cluster import (
    BrokerCluster,
    cluster_status,
    connect_all,
    queue_served_by,
)

from .test_dependencies import tree

# The tests share one cluster (``shared_three_brokers``): each uses queues and custom
# ids of its own, and none stops, kills or pauses a broker.
QUEUES = [f"q{i}" for i in range(8)]
BATCH_QUEUES = [f"batch-q{i}" for i in range(8)]


async def test_the_brokers_see_each_other(shared_three_brokers: BrokerCluster) -> None:
    clients = await connect_all(shared_three_brokers)
    for i, client in enumerate(clients):
        status = await cluster_status(client)  # (connect_all waited for each view)
        assert status["brokerId"] == f"b{i}"
        assert [b["brokerId"] for b in status["live"]] == ["b0", "b1", "b2"]
        port = shared_three_brokers[i].tcp_port
        assert status["live"][i]["address"] == f"127.0.0.1:{port}"


async def test_push_through_one_pull_through_another_ack_through_the_third(
        shared_three_brokers: BrokerCluster) -> None:
    a, b, c = await connect_all(shared_three_brokers)
    pushed = {q: (await a.ok("PUSH", queue=q, name="n", data={"q": q}))["id"] for q in QUEUES}
    for q in QUEUES:
        job = (await b.ok("PULL", queue=q, timeout=0))["job"]
        assert job["id"] == pushed[q] and job["data"] == {"q": q}
        await c.ok("ACK", id=job["id"], result=f"done {q}")
    for q, job_id in pushed.items():
        assert (await a.ok("GetState", id=job_id))["state"] == "completed"
        assert (await b.ok("GetResult", id=job_id))["result"] == f"done {q}"
        counts = (await c.ok("GetJobCounts", queue=q))["counts"]
        assert counts["completed"] == 1 and counts["waiting"] == 0
    for client in (a, b, c):  # every broker lists every queue (by its next beat)
        with trio.fail_after(10):
            while not set(QUEUES) <= set((await client.ok("ListQueues"))["queues"]):
                await trio.sleep(0.05)
    # each queue is served by exactly one broker, and the queues are spread out
    served = [set((await cluster_status(client))["queues"]) for client in (a, b, c)]
    assert set().union(*served) >= set(QUEUES)
    assert sum(len(s & set(QUEUES)) for s in served) == len(QUEUES)
    assert sum(1 for s in served if s & set(QUEUES)) >= 2


async def test_a_batch_of_ids_across_brokers_is_split_and_merged(
        shared_three_brokers: BrokerCluster) -> None:
    a, b, _ = await connect_all(shared_three_brokers)
    ids = [(await a.ok("PUSH", queue=q, name="n", data=1))["id"] for q in BATCH_QUEUES]
    pulled = []
    for q in BATCH_QUEUES:
        pulled.append((await b.ok("PULL", queue=q, timeout=0))["job"]["id"])
    assert sorted(pulled) == sorted(ids)
    await b.ok("ACKB", ids=pulled, results=[{"n": i} for i in range(len(pulled))])
    for i, job_id in enumerate(pulled):
        assert (await a.ok("GetResult", id=job_id))["result"] == {"n": i}


async def test_a_flow_across_three_brokers_resolves(
        shared_three_brokers: BrokerCluster) -> None:
    """Parent served by b0, children by b1 and b2, the flow pushed through b1: admitted
    in one commit, found through every broker at once, and the parent resolves when the
    children complete on their brokers."""
    a, b, c = await connect_all(shared_three_brokers)
    parent_q, q1, q2 = (queue_served_by(owner, f"flow-{owner}-") for owner in ("b0", "b1", "b2"))
    reply = await b.ok("PUSHF", jobs=tree("p", {"k1": q1, "k2": q2}, parent_queue=parent_q))
    assert [(j["id"], j["state"]) for j in reply["data"]["jobs"]] == [
        ("p", "waiting-children"), ("k1", "waiting"), ("k2", "waiting")]
    for client in (a, b, c):  # read-your-writes, whichever broker is asked
        assert (await client.ok("GetState", id="p"))["state"] == "waiting-children"
        assert (await client.ok("GetState", id="k2"))["state"] == "waiting"
    for queue, result in ((q1, "one"), (q2, "two")):
        job = (await c.ok("PULL", queue=queue, timeout=0))["job"]
        await a.ok("ACK", id=job["id"], result=result)
    with trio.fail_after(10):  # the outcomes travel to b0 (poked at once; a beat at most)
        while (await c.ok("GetState", id="p"))["state"] != "waiting":
            await trio.sleep(0.05)
    parent = (await a.ok("PULL", queue=parent_q, timeout=0))["job"]
    assert parent["id"] == "p"
    values = (await b.ok("GetChildrenValues", id="p"))["data"]["values"]
    assert values == {f"{q1}:k1": "one", f"{q2}:k2": "two"}


async def test_a_flow_whose_queues_one_other_broker_serves_is_forwarded_whole(
        shared_three_brokers: BrokerCluster) -> None:
    a, _, _ = await connect_all(shared_three_brokers)
    parent_q, child_q = queue_served_by("b2", "whole-p"), queue_served_by("b2", "whole-c")
    await a.ok("PUSHF", jobs=tree("wp", {"wk": child_q}, parent_queue=parent_q))
    job = (await a.ok("PULL", queue=child_q, timeout=0))["job"]
    await a.ok("ACK", id=job["id"], result=1)
    with trio.fail_after(10):
        while (await a.ok("GetState", id="wp"))["state"] != "waiting":
            await trio.sleep(0.05)


async def test_dependencies_and_custom_ids_reach_across_brokers(
        shared_three_brokers: BrokerCluster) -> None:
    """A parent served by b2 depends on a job b1 serves: it waits, and resolves when that
    job completes there; a custom id another broker's live job has is that job."""
    a, b, c = await connect_all(shared_three_brokers)
    dep_q, parent_q = queue_served_by("b1", "dep-"), queue_served_by("b2", "par-")
    dep = (await a.ok("PUSH", queue=dep_q, name="n", data=1, jobId="the-dep"))["id"]
    job = (await a.ok("PUSH", queue=parent_q, name="n", data=2, dependsOn=[dep]))["id"]
    assert (await c.ok("GetState", id=job))["state"] == "waiting-children"
    # the same custom id pushed to another queue through another broker: the same job
    again = await b.ok("PUSH", queue=parent_q, name="n", data=3, jobId="the-dep")
    assert again["id"] == "the-dep"
    assert (await a.ok("GetJob", id="the-dep"))["job"]["queue"] == dep_q
    pulled = (await b.ok("PULL", queue=dep_q, timeout=0))["job"]
    await c.ok("ACK", id=pulled["id"], result={"sum": 3})
    with trio.fail_after(10):
        while (await a.ok("GetState", id=job))["state"] != "waiting":
            await trio.sleep(0.05)
    values = (await b.ok("GetChildrenValues", id=job))["data"]["values"]
    assert values == {f"{dep_q}:{dep}": {"sum": 3}}
    # a dependency that completed on another broker already counts at once
    later = (await a.ok("PUSH", queue=parent_q, name="n", data=4, dependsOn=[dep]))["id"]
    assert (await c.ok("GetState", id=later))["state"] == "waiting"


async def test_bunqueues_python_client_works_through_a_broker_that_serves_nothing(
        shared_three_brokers: BrokerCluster) -> None:
    """bunqueue's published client (0.1.5), connected to b2 only: its queue ("compat")
    served by b1, its flow's parent by b0 and children by b1 (the client's FlowProducer
    pushes the children first, then the parent with dependsOn, then UpdateParent per
    child)."""
    from .test_bunqueue_client import _flow_with_the_client, _produce_and_process

    a, b, c = await connect_all(shared_three_brokers)
    assert preferred_owner("compat", ["b0", "b1", "b2"]) == "b1"
    port = shared_three_brokers[2].tcp_port
    with trio.fail_after(60):
        out = await trio.to_thread.run_sync(_produce_and_process, port, 10)
    assert out["finished"] and sorted(out["processed"]) == sorted(out["ids"])
    assert out["counts_after"]["completed"] == 10 and out["worker_errors"] == []
    parent_q, kids_q = queue_served_by("b0", "bq-parent-"), queue_served_by("b1", "bq-kids-")
    with trio.fail_after(60):
        flow = await trio.to_thread.run_sync(_flow_with_the_client, port, parent_q, kids_q)
    assert flow["before"] == "waiting-children"
    kid1, kid2 = flow["kids"]
    with trio.fail_after(10):  # (the outcomes travel to b0 through its inbox)
        while (await b.ok("GetState", id=flow["parent"]))["state"] != "waiting":
            await trio.sleep(0.05)
    values = (await a.ok("GetChildrenValues", id=flow["parent"]))["data"]["values"]
    assert values == {f"{kids_q}:{kid1}": 10, f"{kids_q}:{kid2}": 20}
