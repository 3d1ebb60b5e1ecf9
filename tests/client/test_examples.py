"""Every script in examples/ runs and does what it says, in every mode."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import anyio.abc
import pytest

from trioqueue.client import Connection, Worker, open_connection
from trioqueue.config import Config

pytestmark = pytest.mark.anyio

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_producer_worker(conn: Connection) -> None:
    results = await example("producer_worker").main(conn)
    assert sorted(results.values()) == [i * 11 for i in range(10)]


async def test_flow(conn: Connection) -> None:
    assert await example("flow").main(conn) == {"chapters": 3, "pages": 19}


async def test_progress_logs(conn: Connection) -> None:
    out = await example("progress_logs").main(conn)
    assert out["progress"] == [25, 50, 75, 100] and out["result"] == 1000
    assert out["logs"] == [f"step {i} done" for i in range(1, 5)]


async def test_wait_for_result(conn: Connection) -> None:
    out = await example("wait_for_result").main(conn)
    assert out == {"without_events": {"width": 400}, "with_events": {"width": 320},
                   "failed": "bad width 0"}


async def test_live_events(conn: Connection) -> None:
    names = await example("live_events").main(conn)
    assert names == ["waiting", "active", "drained", "failed", "retried", "active",
                     "drained", "completed"]


async def test_sync_producer(connect_args: dict[str, Any], mode: str) -> None:
    if not mode.startswith("tcp"):
        pytest.skip("the sync facade example connects to a broker over TCP")
    out = await anyio.to_thread.run_sync(example("sync_producer").main, "127.0.0.1",
                                        connect_args["port"])
    assert out["state"] == "waiting" and out["waiting"] == 1


def test_an_example_runs_as_a_script() -> None:
    done = subprocess.run([sys.executable, "flow.py", "--embedded"], cwd=EXAMPLES,
                          capture_output=True, text=True, timeout=60, check=True)
    assert "report: {'chapters': 3, 'pages': 19}" in done.stdout


async def test_fastapi_app_enqueues_and_answers_with_the_result(
        brokers: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The FastAPI example against a real broker: a request adds a job, a worker runs
    the example's own function, and the response carries the job's result."""
    pytest.importorskip("fastapi")
    httpx = pytest.importorskip("httpx")
    module = example("fastapi_app")
    broker = await brokers.start(Config(host="127.0.0.1", tcp_port=0, ws_port=0,
                                        memory=True))
    monkeypatch.setenv("TRIOQUEUE_PORT", str(broker.tcp_port))
    app = module.app
    async with open_connection(port=broker.tcp_port) as conn:
        worker = Worker(module.QUEUE, module.resize, conn, concurrency=2)
        async with anyio.create_task_group() as tasks:
            await tasks.start(worker.run)
            async with app.router.lifespan_context(app):
                transport = httpx.ASGITransport(app=app)
                async with httpx.AsyncClient(transport=transport,
                                             base_url="http://app") as client:
                    with anyio.fail_after(20):
                        made = await client.post("/thumbnails",
                                                 json={"url": "u.png", "width": 200})
                        assert made.status_code == 200, made.text
                        body = made.json()
                        assert body["result"] == {"url": "u.png", "width": 200,
                                                  "height": 150}
                        read = await client.get(f"/thumbnails/{body['job_id']}")
                        assert read.json() == {"job_id": body["job_id"],
                                               "state": "completed",
                                               "result": body["result"]}
                        missing = await client.get("/thumbnails/nope")
                        assert missing.status_code == 404
                        refused = await client.post("/thumbnails",
                                                    json={"url": "u.png", "width": 0})
                        assert refused.status_code == 422
            await worker.close()
    assert worker.processed_count == 1
