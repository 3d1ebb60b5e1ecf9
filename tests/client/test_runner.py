"""``trioqueue worker`` and ``Worker.run(signals=True)`` (issue 13, item 4), as
subprocesses sent real signals; the outcome is read from the broker's view of the
job (its state and attempts). The runner runs on the same event loop as the test."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from trioqueue.client import Queue, open_connection
from trioqueue.config import Config

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 20.0

# The processor: says it started (a file), then waits for the test's go (a file).
PROCESSOR = '''
import os
import re
import anyio

async def work(job):
    open(f"started-{job.id}", "w").close()
    while not os.path.exists(f"release-{job.id}"):
        await anyio.sleep(0.01)
    return {"done": job.data}
'''

# Worker.run(signals=True) in a program of one's own.
PROGRAM = '''
import logging
import sys
import anyio
from functools import partial
from jobs import work
from trioqueue.client import Worker, open_connection

async def main() -> None:
    logging.basicConfig(level=logging.INFO)
    async with open_connection("127.0.0.1", int(sys.argv[1])) as conn:
        worker = Worker("r-code", work, conn)
        async with anyio.create_task_group() as tasks:
            await tasks.start(partial(worker.run, signals=True, grace_s=10.0))
            print("ready", file=sys.stderr, flush=True)
    print(f"closed {worker.processed_count}", file=sys.stderr, flush=True)

anyio.run(main, backend=sys.argv[2])
'''


class Output:
    """A subprocess's stderr, line by line, with waits for a line to appear."""

    def __init__(self) -> None:
        self.text = ""
        self._changed = anyio.Event()

    async def read(self, stream: anyio.abc.ByteReceiveStream) -> None:
        async for chunk in stream:
            self.text += chunk.decode(errors="replace")
            self._changed.set()
            self._changed = anyio.Event()

    async def wait_for(self, needle: str, timeout: float = DEADLINE_S) -> None:
        with anyio.fail_after(timeout):
            while needle not in self.text:
                await self._changed.wait()


@asynccontextmanager
async def running(args: list[str], cwd: Path) -> AsyncIterator[tuple[Any, Output]]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{cwd}"}
    process = await anyio.open_process(args, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.PIPE)
    output = Output()
    try:
        async with anyio.create_task_group() as tasks:
            assert process.stderr is not None
            tasks.start_soon(output.read, process.stderr)
            try:
                yield process, output
            finally:
                with anyio.CancelScope(shield=True), anyio.move_on_after(DEADLINE_S):
                    await process.wait()
    finally:
        if process.returncode is None:  # the test failed: stop what it started
            process.kill()
            with anyio.CancelScope(shield=True):
                await process.wait()


async def wait_for_file(path: Path) -> None:
    with anyio.fail_after(DEADLINE_S):
        while not path.exists():
            await anyio.sleep(0.01)


async def exited(process: Any) -> int:
    with anyio.fail_after(DEADLINE_S):
        return int(await process.wait())


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "jobs.py").write_text(PROCESSOR)
    (tmp_path / "program.py").write_text(PROGRAM)
    return tmp_path


@pytest.fixture
async def port(brokers: Any) -> int:
    broker = await brokers.start(Config(host="127.0.0.1", tcp_port=0, ws_port=0,
                                        memory=True))
    return int(broker.tcp_port)


def worker_command(port: int, queue: str, backend: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "trioqueue", "worker", "jobs:work", "--queue", queue,
            "--port", str(port), "--backend", backend, *extra]


async def state_and_attempts(queue: Queue, job_id: str) -> tuple[str, int]:
    job = await queue.get_job(job_id)
    assert job is not None
    return await queue.get_job_state(job_id), job.attempts_made


async def test_first_signal_lets_the_running_job_finish_and_acknowledges_it(
        workdir: Path, port: int, anyio_backend: str) -> None:
    async with open_connection(port=port) as conn:
        queue = Queue("r-warm", conn)
        running_job = await queue.add("n", 1, attempts=3)
        next_job = await queue.add("n", 2, attempts=3)
        command = worker_command(port, "r-warm", anyio_backend, "--grace-s", "20")
        async with running(command, workdir) as (process, output):
            await output.wait_for(" ready: queue r-warm, concurrency 1")
            await wait_for_file(workdir / f"started-{running_job.id}")
            process.send_signal(signal.SIGTERM)
            await output.wait_for("SIGTERM: stopping: no more pulls; 1 running job(s)")
            (workdir / f"release-{running_job.id}").touch()
            assert await exited(process) == 0
        assert "stopped: 1 processed, 0 failed" in output.text
        assert await queue.get_job_state(running_job.id) == "completed"
        assert await queue.get_result(running_job.id) == {"done": 1}
        # Pulling had stopped: the next job was never taken.
        assert await state_and_attempts(queue, next_job.id) == ("waiting", 0)


async def test_second_signal_hands_the_running_job_back_uncharged(
        workdir: Path, port: int, anyio_backend: str) -> None:
    async with open_connection(port=port) as conn:
        queue = Queue("r-force", conn)
        job = await queue.add("n", 1, attempts=3)
        command = worker_command(port, "r-force", anyio_backend)
        async with running(command, workdir) as (process, output):
            await output.wait_for(" ready: ")
            await wait_for_file(workdir / f"started-{job.id}")
            assert await queue.get_job_state(job.id) == "active"
            process.send_signal(signal.SIGINT)  # Ctrl-C
            await output.wait_for("SIGINT: stopping")
            process.send_signal(signal.SIGTERM)
            await output.wait_for("SIGTERM again: handing back 1 running job(s) now")
            assert await exited(process) == 0
        assert await state_and_attempts(queue, job.id) == ("waiting", 0)
        assert "stopped: 0 processed, 0 failed" in output.text


async def test_a_grace_period_that_runs_out_hands_the_job_back(
        workdir: Path, port: int, anyio_backend: str) -> None:
    async with open_connection(port=port) as conn:
        queue = Queue("r-grace", conn)
        job = await queue.add("n", 1, attempts=3)
        command = worker_command(port, "r-grace", anyio_backend, "--grace-s", "0.3")
        async with running(command, workdir) as (process, output):
            await wait_for_file(workdir / f"started-{job.id}")
            process.send_signal(signal.SIGTERM)
            await output.wait_for("the grace period of 0.3 s is over: handing back 1")
            assert await exited(process) == 0
        assert await state_and_attempts(queue, job.id) == ("waiting", 0)


async def test_a_closed_port_is_reported_at_the_first_attempt(
        workdir: Path, anyio_backend: str) -> None:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    closed = listener.extra(anyio.abc.SocketAttribute.local_port)
    await listener.aclose()  # nothing listens there now
    command = worker_command(closed, "r-none", anyio_backend)
    async with running(command, workdir) as (process, output):
        await output.wait_for(f"cannot connect to 127.0.0.1:{closed}: ", timeout=5)
        assert "(attempt 1; retrying in" in output.text
        assert " ready: " not in output.text
        process.send_signal(signal.SIGTERM)
        assert await exited(process) == 0
    assert "stopped before the broker answered" in output.text


async def test_a_bad_target_is_a_clear_error(workdir: Path, anyio_backend: str) -> None:
    command = [sys.executable, "-m", "trioqueue", "worker", "jobs:nope", "--queue", "q"]
    async with running(command, workdir) as (process, output):
        assert await exited(process) == 1  # SystemExit with a message
    assert "trioqueue worker: 'jobs' has no 'nope'" in output.text


@pytest.mark.parametrize("signals", ["one", "two"])
async def test_worker_run_with_signals_shuts_down_the_same_way(
        workdir: Path, port: int, anyio_backend: str, signals: str) -> None:
    """One signal: the running job finishes and is acknowledged; a second: it is
    handed back at once, uncharged (as with the runner)."""
    async with open_connection(port=port) as conn:
        queue = Queue("r-code", conn)
        job = await queue.add("n", 7, attempts=3)
        command = [sys.executable, "program.py", str(port), anyio_backend]
        async with running(command, workdir) as (process, output):
            await output.wait_for("ready")
            await wait_for_file(workdir / f"started-{job.id}")
            assert await queue.get_job_state(job.id) == "active"
            process.send_signal(signal.SIGTERM)
            await output.wait_for("SIGTERM: stopping")
            if signals == "one":
                (workdir / f"release-{job.id}").touch()
            else:
                process.send_signal(signal.SIGINT)
                await output.wait_for("SIGINT again: handing back 1 running job(s) now")
            assert await exited(process) == 0
        if signals == "one":
            assert "closed 1" in output.text
            assert await queue.get_result(job.id) == {"done": 7}
        else:
            assert "closed 0" in output.text
            assert await state_and_attempts(queue, job.id) == ("waiting", 0)


def closed_port() -> int:
    """A port nothing listens on (it was bound a moment ago, then let go)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


ATTEMPT = re.compile(r"\(attempt (\d+); retrying in ([\d.]+) s\)")


# The backoff is the same anyio code on either backend: the trio run stays in the default
# run, the asyncio one (seven real retries, as long again) is slow.
@pytest.mark.parametrize("anyio_backend", [
    "trio", pytest.param("asyncio", marks=pytest.mark.slow)], indirect=True)
async def test_the_backoff_keeps_growing_past_the_first_connect_window(
        workdir: Path, anyio_backend: str) -> None:
    closed = closed_port()
    command = worker_command(closed, "r-none", anyio_backend)
    async with running(command, workdir) as (process, output):
        # Attempts 1-6 fit in one 5 s connect window (0.1 + ... + 1.6 s, with jitter at
        # most 4.1 s); the 7th comes after it, and must not start the backoff over.
        await output.wait_for("(attempt 7; retrying in", timeout=15)
        process.send_signal(signal.SIGTERM)
        assert await exited(process) == 0
    found = [(int(n), float(s)) for n, s in ATTEMPT.findall(output.text)]
    assert [n for n, _ in found] == list(range(1, len(found) + 1))
    delays = [s for _, s in found]
    assert delays == sorted(delays)  # doubling with 0-30% jitter never goes down
    assert delays[6] >= 6.4 * 0.95  # the 7th waits 6.4 s (+ jitter), not 0.1 s
    assert " ready: " not in output.text


async def process_one_then_stop(port: int, queue_name: str, value: int, workdir: Path,
                                process: Any) -> None:
    """A job added now is processed by the running worker, which then stops on SIGTERM
    with exit status 0."""
    async with open_connection(port=port) as conn:
        queue = Queue(queue_name, conn)
        job = await queue.add("n", value, attempts=3)
        await wait_for_file(workdir / f"started-{job.id}")
        (workdir / f"release-{job.id}").touch()
        with anyio.fail_after(DEADLINE_S):
            while await queue.get_job_state(job.id) != "completed":
                await anyio.sleep(0.01)  # polling the broker's view, with a deadline
        process.send_signal(signal.SIGTERM)
        assert await exited(process) == 0
        assert await queue.get_result(job.id) == {"done": value}


async def test_a_broker_started_after_the_worker_is_reached_and_said_so(
        workdir: Path, brokers: Any, anyio_backend: str) -> None:
    port = closed_port()
    command = worker_command(port, "r-late", anyio_backend)
    async with running(command, workdir) as (process, output):
        await output.wait_for(f"cannot connect to 127.0.0.1:{port}: ", timeout=5)
        await brokers.start(Config(host="127.0.0.1", tcp_port=port, ws_port=0,
                                   memory=True))
        await output.wait_for(f"connected to 127.0.0.1:{port}")
        await output.wait_for(" ready: queue r-late")
        assert output.text.count(f"connected to 127.0.0.1:{port}") == 1
        await process_one_then_stop(port, "r-late", 5, workdir, process)
    assert "stopped: 1 processed, 0 failed" in output.text


async def test_a_broker_restarted_under_a_running_worker_is_reached_again_and_said_so(
        workdir: Path, brokers: Any, anyio_backend: str) -> None:
    port = closed_port()
    config = Config(host="127.0.0.1", tcp_port=port, ws_port=0, memory=True)
    broker = await brokers.start(config)
    command = worker_command(port, "r-back", anyio_backend)
    async with running(command, workdir) as (process, output):
        await output.wait_for(" ready: queue r-back")
        assert f"connected to 127.0.0.1:{port}" not in output.text  # no failure yet
        await broker.stop()
        await output.wait_for(f"cannot connect to 127.0.0.1:{port}: ")
        await brokers.start(config)
        await output.wait_for(f"connected to 127.0.0.1:{port}")
        await process_one_then_stop(port, "r-back", 6, workdir, process)
    assert output.text.count(f"connected to 127.0.0.1:{port}") == 1
