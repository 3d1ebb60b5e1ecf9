"""A kill -9 loses nothing acknowledged; a restart rebuilds every queue from LMDB."""

from __future__ import annotations

import signal
from pathlib import Path

import lmdb
import pytest

from trioqueue.core import native
from trioqueue.storage import keys as K
from trioqueue.testing import RawClient
from trioqueue.testing.process import BrokerProcess

from ..conftest import StoreEngine

pytestmark = pytest.mark.engines("lmdb", "postgres")


async def test_kill_9_after_last_ack_loses_no_job(
        tmp_path: Path, store_engine: StoreEngine) -> None:
    broker = BrokerProcess(tmp_path / "data", storage_url=store_engine.storage_url)
    await broker.start()
    try:
        client = await RawClient.connect(broker.tcp_port)
        n = 500
        frames = b"".join(
            client.frame({"cmd": "PUSH", "queue": "k9", "name": "n", "data": {"i": i},
                          "reqId": f"p{i}"})
            for i in range(n)
        )
        await client.send_raw(frames)
        acked: dict[int, str] = {}
        while len(acked) < n:
            reply = await client.receive()
            assert reply["ok"] is True
            acked[int(reply["reqId"][1:])] = reply["id"]
        # the very moment the last acknowledgement is in, the broker dies
        code = await broker.kill(signal.SIGKILL)
        assert code == -signal.SIGKILL
        await client.aclose()

        await broker.start()
        client = await RawClient.connect(broker.tcp_port)
        assert (await client.ok("Count", queue="k9"))["count"] == n
        for i, job_id in acked.items():
            job = (await client.ok("GetJob", id=job_id))["job"]
            assert job["data"] == {"i": i}
        await client.aclose()
    finally:
        await broker.stop()


async def test_restart_charges_active_jobs_and_keeps_finished(
        tmp_path: Path, store_engine: StoreEngine) -> None:
    broker = BrokerProcess(tmp_path / "data", storage_url=store_engine.storage_url)
    await broker.start()
    try:
        client = await RawClient.connect(broker.tcp_port)
        ids = (await client.ok("PUSHB", queue="rs", jobs=[
            {"name": "n", "data": i, "backoff": 0} for i in range(3)]))["ids"]
        await client.ok("Pause", queue="other")
        first = await client.ok("PULL", queue="rs", owner="w")
        await client.ok("ACK", id=first["job"]["id"], token=first["token"], result="done")
        await client.ok("PULL", queue="rs", owner="w")  # active at the crash
        await broker.kill(signal.SIGKILL)
        await client.aclose()

        await broker.start()
        client = await RawClient.connect(broker.tcp_port)
        assert (await client.ok("GetResult", id=ids[0]))["result"] == "done"
        assert (await client.ok("GetState", id=ids[0]))["state"] == "completed"
        charged = (await client.ok("GetJob", id=ids[1]))["job"]
        assert charged["attempts"] == 1 and charged["stallCount"] == 1
        assert charged["state"] == "waiting"  # backoff 0: ready again at once
        assert (await client.ok("IsPaused", queue="other"))["paused"] is True
        counts = (await client.ok("GetJobCounts", queue="rs"))["counts"]
        assert counts["completed"] == 1 and counts["waiting"] == 2
        await client.aclose()
    finally:
        await broker.stop()


async def test_sigterm_shuts_down_cleanly(
        tmp_path: Path, store_engine: StoreEngine) -> None:
    broker = BrokerProcess(tmp_path / "data", storage_url=store_engine.storage_url)
    await broker.start()
    try:
        client = await RawClient.connect(broker.tcp_port)
        await client.ok("PUSH", queue="t", name="n", data=1)
        code = await broker.kill(signal.SIGTERM)
        assert code == 0, broker.log.decode()
        await client.aclose()
    finally:
        await broker.stop()


async def test_sigterm_hands_pulled_jobs_back_uncharged(
        tmp_path: Path, store_engine: StoreEngine) -> None:
    broker = BrokerProcess(tmp_path / "data", storage_url=store_engine.storage_url)
    await broker.start()
    try:
        worker = await RawClient.connect(broker.tcp_port)
        pushed = await worker.ok("PUSH", queue="gs", name="n", data=1)
        await worker.ok("PULL", queue="gs", owner="w")
        # graceful stop with the connection still open: the job goes back, no charge
        assert await broker.kill(signal.SIGTERM) == 0, broker.log.decode()
        await worker.aclose()
        await broker.start()
        client = await RawClient.connect(broker.tcp_port)
        job = (await client.ok("GetJob", id=pushed["id"]))["job"]
        assert job["state"] == "waiting" and job["attempts"] == 0
        await client.aclose()
    finally:
        await broker.stop()


async def test_kill_9_of_an_active_job_at_its_last_attempt_dead_letters_it(
    tmp_path: Path, store_engine: StoreEngine,
) -> None:
    broker = BrokerProcess(tmp_path / "data", storage_url=store_engine.storage_url)
    await broker.start()
    try:
        client = await RawClient.connect(broker.tcp_port)
        last = await client.ok("PUSH", queue="kb", name="n", data=1, maxAttempts=1)
        await client.ok("PULL", queue="kb", owner="w")  # active when the broker dies
        await broker.kill(signal.SIGKILL)
        await client.aclose()
        await broker.start()
        client = await RawClient.connect(broker.tcp_port)
        job = (await client.ok("GetJob", id=last["id"]))["job"]
        assert job["state"] == "failed" and job["attempts"] == 1 and job["stallCount"] == 1
        failed = await client.ok("WaitJob", id=last["id"], timeout=0)
        assert failed["completed"] is False
        assert failed["error"] == "Job reached max attempts (1) during startup recovery"
        await client.aclose()
    finally:
        await broker.stop()


async def test_kill_9_keeps_a_flow_and_the_resolutions_it_acknowledged(
        tmp_path: Path, store_engine: StoreEngine) -> None:
    broker = BrokerProcess(tmp_path / "data", storage_url=store_engine.storage_url)
    await broker.start()
    try:
        client = await RawClient.connect(broker.tcp_port)
        jobs = [{"id": "root", "queue": "kf-a", "input": {
            "name": "p", "data": {}, "childrenIds": ["c1", "c2"], "dependsOn": ["c1", "c2"]}}]
        for child, queue in (("c1", "kf-b"), ("c2", "kf-c")):
            jobs.append({"id": child, "queue": queue, "input": {
                "name": "c", "data": {}, "parentId": "root",
                "continueParentOnFailure": child == "c2", "maxAttempts": 1}})
        await client.ok("PUSHF", jobs=jobs)
        await client.ok("PULL", queue="kf-b")
        await client.ok("ACK", id="c1", result="one")
        await broker.kill(signal.SIGKILL)  # right after the child's acknowledgement
        await client.aclose()

        await broker.start()
        client = await RawClient.connect(broker.tcp_port)
        assert (await client.ok("GetState", id="root"))["state"] == "waiting-children"
        deps = (await client.ok("GetDependencies", id="root"))["data"]
        assert deps["processed"] == {"kf-b:c1": "one"} and deps["unprocessed"] == ["kf-c:c2"]
        await client.ok("PULL", queue="kf-c")
        await client.ok("FAIL", id="c2", error="broken")
        await broker.kill(signal.SIGKILL)
        await client.aclose()

        await broker.start()
        client = await RawClient.connect(broker.tcp_port)
        assert (await client.ok("GetState", id="root"))["state"] == "waiting"
        failed = await client.ok("GetFailedChildrenValues", id="root")
        assert failed["values"] == {"kf-c:c2": "broken"}
        await client.aclose()
    finally:
        await broker.stop()


def ahead_rows(data_dir: Path) -> tuple[int, int]:
    """(pieces, claims) of the data written ahead, read beside the running broker."""
    env = lmdb.open(str(data_dir), readonly=True, max_dbs=16, lock=True)
    try:
        with env.begin() as txn:
            pieces = txn.stat(env.open_db(K.DB_AHEAD, txn=txn, create=False))["entries"]
            claims = txn.stat(env.open_db(K.DB_AHEAD_CLAIMS, txn=txn,
                                          create=False))["entries"]
    finally:
        env.close()
    return pieces, claims


@pytest.mark.engines("lmdb")  # (reads LMDB's rows written ahead; PostgreSQL writes none)
async def test_kill_9_while_large_data_is_written_ahead(
        tmp_path: Path, store_engine: StoreEngine) -> None:
    """Large pushes in flight when the broker dies: every acknowledged one comes back
    whole, and no piece written ahead is left without its job."""
    size = 8 * 1024 * 1024 + 10  # 9 pieces of 1 MiB a job
    broker = BrokerProcess(tmp_path / "data", storage_url=store_engine.storage_url)
    await broker.start()
    try:
        client = await RawClient.connect(broker.tcp_port)
        texts = {i: chr(ord("a") + i) * size for i in range(6)}
        await client.send_raw(b"".join(
            client.frame({"cmd": "PUSH", "queue": "big", "data": text, "reqId": f"p{i}"})
            for i, text in texts.items()))
        acked: dict[int, str] = {}
        while len(acked) < 2:
            reply = await client.receive()
            assert reply["ok"] is True
            acked[int(reply["reqId"][1:])] = reply["id"]
        await broker.kill(signal.SIGKILL)  # the next pushes are on their way
        await client.aclose()

        await broker.start()
        client = await RawClient.connect(broker.tcp_port)
        count = (await client.ok("Count", queue="big"))["count"]
        assert len(acked) <= count <= len(texts)
        for i, job_id in acked.items():
            assert (await client.ok("GetJob", id=job_id))["job"]["data"] == texts[i]
        # (under TRIOQUEUE_PURE_PYTHON, which the broker's process inherits, there is no
        # view of a string's bytes: no string is written ahead, so there are no rows)
        written_ahead = (0, 0) if native.PURE_PYTHON else (9 * count, count)
        assert ahead_rows(tmp_path / "data") == written_ahead
        await client.aclose()
    finally:
        await broker.stop()
