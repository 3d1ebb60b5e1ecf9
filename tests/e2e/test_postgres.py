"""A broker on PostgreSQL as a user sees it: the store's status, pages of finished jobs
from either end, the settings and flags, ``trioqueue migrate``.

(The durability suites run on both stores, ``engines("lmdb", "postgres")``; crashes of
the broker and of the database are in tests/faults/test_postgres_faults.py.)
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import StoreEngine
from trioqueue.cli import build_parser, config_from
from trioqueue.config import Config
from trioqueue.server.run import Server
from trioqueue.storage.pg.layout import LATEST_VERSION
from trioqueue.testing import RawClient

pytestmark = pytest.mark.engines("postgres")


async def test_the_storage_status_names_the_server_without_its_password(
        client: RawClient, store_engine: StoreEngine) -> None:
    await client.ok("PUSH", queue="s", name="n", data={})
    data = (await client.ok("StorageStatus"))["data"]
    assert data["engine"] == "postgresql"
    assert store_engine.storage_url is not None
    assert data["path"] == store_engine.storage_url.split("?")[0]  # (no password in it)
    assert data["usedBytes"] > 0  # the tq_* tables, measured when the store opened
    assert data["maxBytes"] is None and data["diskFull"] is False


async def test_pages_of_finished_jobs_from_either_end(client: RawClient) -> None:
    """PostgreSQL reads a page by offset from the nearer end of the range; both ways
    must give the order every store gives: (createdAt, id), ascending or not."""
    ids = (await client.ok("PUSHB", queue="f", jobs=[
        {"name": "n", "data": i, "timestamp": 1_000 + i // 3} for i in range(30)]))["ids"]
    pulled = await client.ok("PULLB", queue="f", count=30)
    await client.ok("ACKB", ids=[j["id"] for j in pulled["jobs"]], results=[0] * 30)
    jobs = [(1_000 + i // 3, job_id) for i, job_id in enumerate(ids)]
    order = [job_id for _, job_id in sorted(jobs)]
    for offset in (0, 7, 14, 22, 28, 30):
        for asc in (True, False):
            listed = await client.ok("GetJobs", queue="f", state="completed", offset=offset,
                                     limit=5, asc=asc)
            expected = (order if asc else order[::-1])[offset:offset + 5]
            assert [j["id"] for j in listed["jobs"]] == expected, (offset, asc)
    counts = (await client.ok("GetJobCounts", queue="f"))["counts"]
    assert counts["completed"] == 30


async def test_a_listing_of_every_state_mixing_finished_and_live_jobs(
        client: RawClient) -> None:
    """GetJobs without a state on completed, failed and waiting jobs interleaved: the
    search for where the page starts asks PostgreSQL for ranks in a worker thread, a
    round at a time, and every page is the sorted union's."""
    ids = (await client.ok("PUSHB", queue="m", jobs=[
        {"name": "n", "data": i, "timestamp": 1_000 + i // 4, "maxAttempts": 1}
        for i in range(150)]))["ids"]
    pulled = (await client.ok("PULLB", queue="m", count=100))["jobs"]
    for k, job in enumerate(pulled):
        if k % 3 == 2:
            await client.ok("FAIL", id=job["id"], error="boom")
        else:
            await client.ok("ACK", id=job["id"], result=k)
    counts = (await client.ok("GetJobCounts", queue="m"))["counts"]
    assert (counts["completed"], counts["failed"], counts["waiting"]) == (67, 33, 50)
    order = [job_id for _, job_id in sorted((1_000 + i // 4, j) for i, j in enumerate(ids))]
    for offset in (0, 1, 40, 99, 100, 131, 149, 150):
        for asc in (True, False):
            listed = await client.ok("GetJobs", queue="m", offset=offset, limit=7, asc=asc)
            expected = (order if asc else order[::-1])[offset:offset + 7]
            assert [j["id"] for j in listed["jobs"]] == expected, (offset, asc)


async def test_a_finished_job_is_found_by_id_through_a_worker_thread(
        client: RawClient, server: Server) -> None:
    job_id = (await client.ok("PUSH", queue="g", name="n", data=5))["id"]
    pulled = await client.ok("PULL", queue="g")
    await client.ok("ACK", id=pulled["job"]["id"], result="done")
    assert server.broker.writer.off_thread
    assert (await client.ok("GetState", id=job_id))["state"] == "completed"
    assert (await client.ok("GetResult", id=job_id))["result"] == "done"
    missing = await client.call("GetJob", id="no-such-job")  # looked up, not found
    assert missing["ok"] is False and missing["error"] == "Job not found"


def test_store_settings_that_do_not_apply_are_refused() -> None:
    url = "postgresql://u@127.0.0.1/db"
    Config(storage_url=url).validate()
    for bad, message in (({"memory": True}, "two stores"),
                         ({"store_max_bytes": 1 << 30}, "not to PostgreSQL"),
                         ({"store_reserve_bytes": 1 << 20}, "not to PostgreSQL"),
                         ({"pg_outage_s": 0}, "pg_outage_s"),
                         ({"storage_url": "mysql://u@h/db"}, "postgresql:// URL")):
        with pytest.raises(ValueError, match=message):
            Config(**{"storage_url": url, **bad}).validate()


def test_the_flags_and_variables() -> None:
    def config(argv: list[str], env: dict[str, str]) -> Config:
        return config_from(build_parser().parse_args(["serve", *argv]), env)

    url = "postgresql://u@127.0.0.1/jobs"
    assert config(["--storage", url], {}).storage_url == url
    assert config([], {"TRIOQUEUE_STORAGE": url}).storage_url == url
    assert config(["--storage", url], {"TRIOQUEUE_STORAGE": "postgresql://other/x"}
                  ).storage_url == url
    assert config([], {}).storage_url is None
    assert config(["--pg-outage-s", "5"], {}).pg_outage_s == 5
    assert config([], {"TRIOQUEUE_PG_OUTAGE_S": "2.5"}).pg_outage_s == 2.5
    with pytest.raises(SystemExit):
        config(["--pg-outage-s", "soon"], {})


def _migrate(*args: str, env: dict[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trioqueue", "migrate", *args],
                          capture_output=True, text=True, timeout=60, env=env)


def test_trioqueue_migrate(pg_dsn: str) -> None:
    first = _migrate("--storage", pg_dsn)
    assert first.returncode == 0, first.stderr
    versions = ", ".join(str(v) for v in range(1, LATEST_VERSION + 1))
    assert (f"applied migration(s) {versions}; schema at version {LATEST_VERSION}"
            in first.stdout)
    again = _migrate("--storage", pg_dsn)
    assert again.returncode == 0
    assert f"schema already at version {LATEST_VERSION}" in again.stdout
    missing = _migrate("--storage", pg_dsn.rsplit("/", 1)[0] + "/no_such_database")
    assert missing.returncode == 4
    assert 'database "no_such_database" does not exist' in missing.stderr
    nothing = _migrate(env={"PATH": "/usr/bin:/bin"})
    assert nothing.returncode == 2 and "--storage" in nothing.stderr
