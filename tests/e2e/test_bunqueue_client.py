"""bunqueue's published Python client (PyPI ``bunqueue-client``) works against us unchanged.

The client is synchronous (threads and blocking sockets), so it runs in a worker thread
while the broker serves on the trio thread.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
import trio
from bunqueue import Queue, Worker

from trioqueue.server.run import Server
from trioqueue.testing import RawClient

# on both stores (the representative PostgreSQL run in CI; tests/conftest.py)
pytestmark = pytest.mark.engines("lmdb", "postgres")


def _produce_and_process(port: int, n: int) -> dict[str, Any]:
    queue = Queue("compat", host="127.0.0.1", port=port)
    first = queue.add("greet", {"who": "world"}, priority=2)
    ids = [first.id] + queue.add_bulk(
        [{"name": "sum", "data": {"a": i, "b": i}} for i in range(n - 1)])
    fetched = queue.get_job(first.id)
    counts_before = queue.get_job_counts()

    done = threading.Event()
    processed: list[str] = []
    lock = threading.Lock()

    def processor(job: Any) -> Any:
        data = job.data
        result = f"hello {data['who']}" if "who" in data else data["a"] + data["b"]
        with lock:
            processed.append(job.id)
            if len(processed) == n:
                done.set()
        return result

    errors: list[Exception] = []
    worker = Worker("compat", processor, host="127.0.0.1", port=port, concurrency=4,
                    poll_timeout_ms=200)
    worker.on("error", errors.append)
    try:
        finished = done.wait(30)
    finally:
        worker.close(timeout=10)
    # the last ACKs may still be on the wire when the processor returns
    results = {}
    for job_id in ids:
        for _ in range(200):
            if queue.get_state(job_id) == "completed":
                break
            threading.Event().wait(0.01)
        results[job_id] = queue.get_result(job_id)
    counts_after = queue.get_job_counts()
    missing = queue.get_job("no-such-job")
    queue.close()
    return {
        "finished": finished, "ids": ids, "fetched": fetched, "processed": processed,
        "counts_before": counts_before, "counts_after": counts_after, "results": results,
        "missing": missing, "worker_errors": errors,
    }


async def test_bunqueue_python_client_adds_reads_and_processes(server: Server) -> None:
    assert server.tcp_port is not None
    n = 25
    with trio.fail_after(60):
        out = await trio.to_thread.run_sync(_produce_and_process, server.tcp_port, n)
    assert out["finished"], "the bunqueue Worker did not process every job"
    fetched = out["fetched"]
    # bunqueue-client 0.1.5 speaks protocol v2: it sends the name inside data, and the
    # broker unwraps that legacy envelope into the job's own name (as bunqueue does).
    assert fetched is not None and fetched.data == {"who": "world"}
    client = await RawClient.connect(server.tcp_port)
    assert (await client.ok("GetJob", id=out["ids"][0]))["job"]["name"] == "greet"
    await client.aclose()
    assert out["counts_before"]["waiting"] == n - 1 and out["counts_before"]["prioritized"] == 1
    assert sorted(out["processed"]) == sorted(out["ids"])
    assert out["results"][out["ids"][0]] == "hello world"
    assert out["results"][out["ids"][3]] == 4  # a = b = 2
    assert out["counts_after"]["completed"] == n
    assert out["missing"] is None
    # its registration, heartbeats and unregistration are all answered
    assert out["worker_errors"] == []


def _flow_with_the_client(port: int, parent_q: str = "cflow-parent",
                          kids_q: str = "cflow-kids") -> dict[str, Any]:
    """bunqueue-client 0.1.5's FlowProducer: children pushed first (with a placeholder
    parent), then the parent with dependsOn, then one UpdateParent per child."""
    from bunqueue import FlowProducer

    flows = FlowProducer(host="127.0.0.1", port=port)
    node = flows.add({"name": "report", "queueName": parent_q, "data": {"r": 1},
                      "children": [
                          {"name": "part", "queueName": kids_q, "data": {"n": 1}},
                          {"name": "part", "queueName": kids_q, "data": {"n": 2}}]})
    queue = Queue(kids_q, host="127.0.0.1", port=port)
    parent_queue = Queue(parent_q, host="127.0.0.1", port=port)
    state_before = parent_queue.get_state(node.job.id)
    kids = [child.job.id for child in node.children]
    child_parent = queue.get_job(kids[0])
    for _ in kids:
        job = queue.connection.call({"cmd": "PULL", "queue": kids_q})["job"]
        queue.connection.call({"cmd": "ACK", "id": job["id"],
                               "result": job["data"]["n"] * 10})
    state_after = parent_queue.get_state(node.job.id)
    values = parent_queue.get_children_values(node.job.id)
    tree = flows.get_flow(node.job.id)
    for closable in (queue, parent_queue, flows):
        closable.close()
    return {"parent": node.job.id, "kids": kids, "before": state_before,
            "after": state_after, "values": values, "child_parent": child_parent,
            "tree_children": sorted(c.job.id for c in tree.children) if tree else None}


async def test_bunqueue_python_flow_producer_builds_a_working_flow(server: Server) -> None:
    assert server.tcp_port is not None
    with trio.fail_after(60):
        out = await trio.to_thread.run_sync(_flow_with_the_client, server.tcp_port)
    assert out["before"] == "waiting-children" and out["after"] == "waiting"
    kid1, kid2 = out["kids"]
    assert out["values"] == {f"cflow-kids:{kid1}": 10, f"cflow-kids:{kid2}": 20}
    # UpdateParent replaced the placeholder parent the client pushed the child with
    assert out["child_parent"].data["__parentId"] == out["parent"]
    assert out["tree_children"] == sorted(out["kids"])
