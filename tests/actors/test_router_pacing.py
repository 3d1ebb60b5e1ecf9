"""The router answers broker commands inline, so a read of many costly ones (each
``AddWebhook`` parses and normalises its URL) would be one long step of the event
loop; it stops once a step has run past ``slice_budget_ms`` and goes on after a pass
of every other task."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from trioqueue.testing import RawClient
from trioqueue.testing.tasks import LongestStep


async def test_a_read_of_many_costly_broker_commands_is_served_in_parts(
    start_server: Callable[..., Any],
) -> None:
    server = await start_server(slice_budget_ms=4.0)
    client = await RawClient.connect(server.tcp_port)
    # Accepted URLs that cost the most to check: each é is percent-encoded.
    frames = [client.frame({"cmd": "AddWebhook", "reqId": i, "events": ["job.completed"],
                            "url": f"https://hooks.example.com/{i}/" + "é" * 330})
              for i in range(200)]
    steps = LongestStep()
    trio.lowlevel.add_instrument(steps)
    try:
        await client.send_raw(b"".join(frames))
        replies = [await client.receive() for _ in frames]
    finally:
        trio.lowlevel.remove_instrument(steps)
    assert sorted(r["reqId"] for r in replies) == list(range(200))
    assert all(r["ok"] for r in replies), next(r for r in replies if not r["ok"])
    listed = (await client.ok("ListWebhooks"))["data"]["webhooks"]
    assert len(listed) == 200
    # 4 ms of budget, then one command's check (well under 1 ms); 50 in one step took
    # about 20 ms.
    steps.check("200 AddWebhooks", 10.0)
