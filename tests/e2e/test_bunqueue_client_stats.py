"""bunqueue's published Python client's numbers calls (``get_stats``, ``get_metrics``)
against us, unchanged. The client is synchronous; it runs in a worker thread."""

from __future__ import annotations

from typing import Any

import trio
from bunqueue import Queue

from trioqueue.server.run import Server


def _numbers(port: int) -> dict[str, Any]:
    queue = Queue("bq-stats", host="127.0.0.1", port=port)
    try:
        queue.add("n", {"i": 1})
        queue.add("n", {"i": 2})
        pulled = queue.connection.call({"cmd": "PULL", "queue": "bq-stats"})
        queue.connection.call({"cmd": "ACK", "id": pulled["job"]["id"]})
        return {"stats": queue.get_stats(), "metrics": queue.get_metrics()}
    finally:
        queue.close()


async def test_bunqueue_client_stats_and_metrics(server: Server) -> None:
    assert server.tcp_port is not None
    with trio.fail_after(30):
        out = await trio.to_thread.run_sync(_numbers, server.tcp_port)
    stats = out["stats"]
    assert stats["waiting"] == 1 and stats["active"] == 0 and stats["completed"] == 1
    assert stats["failed"] == 0 and stats["uptime"] >= 0
    metrics = out["metrics"]
    assert metrics["totalPushed"] == 2 and metrics["totalPulled"] == 1
    assert metrics["totalCompleted"] == 1 and metrics["activeConnections"] >= 1
