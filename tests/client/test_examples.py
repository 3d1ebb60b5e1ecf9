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

from trioqueue.client import Connection

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
