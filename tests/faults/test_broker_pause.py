"""SIGSTOP of the real broker (issue 12, item 7): a worker that kept renewing through
the pause keeps its jobs and its ACKs; one that did not renew loses its jobs once the
grace after the pause has passed.

Real time, a subprocess: the broker is stopped for 2 s while 1 s leases run out under
it, and the worker's heartbeats wait in the socket meanwhile.
"""

from __future__ import annotations

import signal
from pathlib import Path

import trio

from trioqueue.testing import RawClient
from trioqueue.testing.process import BrokerProcess

QUEUE = "stopped"
LOCK_TTL_MS = 1000
GRACE_S = 2.0
STOP_S = 2.0
BEAT_EVERY_S = 0.25


async def take(client: RawClient, owner: str, count: int) -> tuple[list[str], list[str]]:
    got = await client.ok("PULLB", queue=QUEUE, count=count, owner=owner,
                          lockTtl=LOCK_TTL_MS)
    return [j["id"] for j in got["jobs"]], got["tokens"]


async def test_sigstop_keeps_the_jobs_of_a_worker_that_renews(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", "--memory",
                           "--lease-grace-after-pause-s", str(GRACE_S))
    await broker.start()
    try:
        assert broker.process is not None
        producer = await RawClient.connect(broker.tcp_port)
        await producer.ok("PUSHB", queue=QUEUE,
                          jobs=[{"name": "n", "data": i, "backoff": 0} for i in range(10)])
        worker = await RawClient.connect(broker.tcp_port)
        silent = await RawClient.connect(broker.tcp_port)
        kept, tokens = await take(worker, "worker", 8)
        lost, lost_tokens = await take(silent, "silent", 2)

        broker.process.send_signal(signal.SIGSTOP)
        beats = []  # the worker beats on through the pause; the frames wait unread
        for _ in range(int(STOP_S / BEAT_EVERY_S)):
            beats.append(await worker.send("JobHeartbeatB", ids=kept, tokens=tokens))
            await trio.sleep(BEAT_EVERY_S)  # the pause itself, not a synchronisation
        broker.process.send_signal(signal.SIGCONT)
        resumed = trio.current_time()

        with trio.fail_after(10):
            for req in beats:
                reply = await worker.reply_to(req)
                assert reply["data"]["count"] == len(kept), reply
            acked = await worker.ok("ACKB", ids=kept, tokens=tokens)
        assert "ignoredIds" not in acked.get("data", {})
        for job_id in kept:
            assert (await producer.ok("GetState", id=job_id))["state"] == "completed"

        with trio.fail_after(GRACE_S + 10):  # wait until the silent one's jobs are back
            while (await producer.ok("GetState", id=lost[0]))["state"] != "waiting":
                await trio.sleep(0.05)
        assert trio.current_time() - resumed >= GRACE_S - 0.5  # not before the grace
        again, _ = await take(worker, "worker", 10)
        assert sorted(again) == sorted(lost)  # delivered again, once
        late = await silent.call("ACK", id=lost[0], token=lost_tokens[0])
        assert late["ok"] is False  # its old token is fenced off
    finally:
        await broker.stop()
