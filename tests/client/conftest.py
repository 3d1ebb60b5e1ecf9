"""Client fixtures: the same tests on trio and asyncio, over TCP and embedded, on LMDB
and in memory.

Every async test here runs once per event loop (anyio's pytest plugin, with
``anyio_backend`` parametrised over trio and asyncio; pytest-trio's trio mode is taken
off these tests). ``conn`` is a :class:`~trioqueue.client.Connection` in one of four
modes: a broker served over TCP (LMDB or memory store), or one embedded in the test's
program (LMDB or memory; trio only, so those are not collected under asyncio).
``connect_args`` are the ``open_connection`` arguments of that mode, for a test that
wants a second connection (TCP) or to reopen the broker (embedded, LMDB);
``broker_config`` is the broker's config.

The broker is a trio program. Under trio it runs in the test's own loop; under
asyncio in a thread of its own running ``trio.run`` (:class:`ThreadBroker`), bound to
127.0.0.1 on a free port, and stopped at the end of the test.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
import sniffio
import trio

from trioqueue.client import Connection, open_connection
from trioqueue.config import Config
from trioqueue.server.run import Server

MODES = ["tcp-lmdb", "tcp-memory", "embedded-lmdb", "embedded-memory"]
BACKENDS = ["trio", "asyncio"]
HERE = Path(__file__).resolve().parent


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Hand this folder's async tests to anyio (pytest-trio's trio mode marked them all
    ``trio``), and drop the embedded modes under asyncio, where they are refused (see
    test_connection's test of that refusal)."""
    kept, dropped = [], []
    for item in items:
        if HERE not in Path(str(item.fspath)).resolve().parents:
            kept.append(item)
            continue
        item.own_markers = [m for m in item.own_markers if m.name != "trio"]
        callspec = getattr(item, "callspec", None)
        params = callspec.params if callspec is not None else {}
        if (params.get("anyio_backend") == "asyncio"
                and str(params.get("mode", "")).startswith("embedded")):
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(params=BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def broker_config(tmp_path: Path, mode: str) -> Config:
    # (schedules of 50 ms keep the scheduler tests short: the default minimum is 1 s)
    return Config(host="127.0.0.1", tcp_port=0, ws_port=0, data_dir=str(tmp_path / "data"),
                  memory=mode.endswith("memory"), cron_min_interval_ms=10)


class ThreadBroker:
    """A ``trioqueue`` broker in a thread of its own (its own ``trio.run``), for
    clients on another event loop. :meth:`start` returns once it listens."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.tcp_port: int | None = None
        self.server: Server | None = None
        self._ready = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="test-broker", daemon=True)

    def _main(self) -> None:
        try:
            trio.run(self._serve)
        except BaseException as exc:  # told to start() or stop()
            self._error = exc
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            self.server = await nursery.start(Server(self.config).run)
            self.tcp_port = self.server.tcp_port
            self._token = trio.lowlevel.current_trio_token()
            self._ready.set()
            await self._stop.wait()
            self.server.stop()

    def start(self) -> ThreadBroker:
        self._thread.start()
        if not self._ready.wait(30) or self.tcp_port is None:
            raise RuntimeError(f"the test broker did not start: {self._error!r}")
        return self

    def stop(self) -> None:
        if self._token is not None and self._stop is not None:
            try:
                self._token.run_sync_soon(self._stop.set)
            except trio.RunFinishedError:
                pass
        self._thread.join(30)
        assert not self._thread.is_alive(), "the test broker did not stop"


class Broker:
    """A broker the test can stop: in the test's loop (trio) or in a thread (asyncio)."""

    def __init__(self, tcp_port: int, stop: Callable[[], Awaitable[None]]) -> None:
        self.tcp_port = tcp_port
        self._stop = stop
        self.stopped = False

    async def stop(self) -> None:
        """Stop it, and return once it has stopped (its port is closed)."""
        if not self.stopped:
            self.stopped = True
            with anyio.CancelScope(shield=True):
                await self._stop()


class Brokers:
    """Starts brokers for a test (``await brokers.start(config)``); whatever is still
    running at the end of the test is stopped then."""

    def __init__(self, task_group: anyio.abc.TaskGroup) -> None:
        self._task_group = task_group
        self._started: list[Broker] = []

    async def start(self, config: Config) -> Broker:
        if sniffio.current_async_library() == "trio":
            broker = await self._start_here(config)
        else:
            thread = await anyio.to_thread.run_sync(ThreadBroker(config).start)
            assert thread.tcp_port is not None
            broker = Broker(thread.tcp_port, partial(anyio.to_thread.run_sync, thread.stop))
        self._started.append(broker)
        return broker

    async def _start_here(self, config: Config) -> Broker:
        done = anyio.Event()

        async def run(*, task_status: anyio.abc.TaskStatus[Server]) -> None:
            try:
                await Server(config).run(task_status=task_status)
            finally:
                done.set()

        server: Server = await self._task_group.start(run)

        async def stop() -> None:
            server.stop()
            await done.wait()

        assert server.tcp_port is not None
        return Broker(server.tcp_port, stop)

    async def stop_all(self) -> None:
        for broker in self._started:
            await broker.stop()


@pytest.fixture
async def brokers() -> AsyncIterator[Brokers]:
    async with anyio.create_task_group() as task_group:
        started = Brokers(task_group)
        try:
            yield started
        finally:
            await started.stop_all()


@pytest.fixture
def connect_to(brokers: Brokers) -> Callable[..., AbstractAsyncContextManager[Connection]]:
    """``async with connect_to(config) as conn``: a connection to a broker of its own on
    ``config``: embedded under trio, a broker in a thread over TCP under asyncio."""

    @asynccontextmanager
    async def connect(config: Config | None = None, **kwargs: Any
                      ) -> AsyncIterator[Connection]:
        config = config if config is not None else Config(memory=True)
        if sniffio.current_async_library() == "trio":
            async with open_connection(embedded=True, config=config, **kwargs) as conn:
                yield conn
            return
        broker = await brokers.start(dataclasses.replace(
            config, host="127.0.0.1", tcp_port=0, ws_port=0))
        async with open_connection(port=broker.tcp_port, **kwargs) as conn:
            yield conn

    return connect


@pytest.fixture
async def nursery() -> AsyncIterator[anyio.abc.TaskGroup]:
    """A task group that lives as long as the test (cancelled at its end)."""
    async with anyio.create_task_group() as task_group:
        yield task_group
        task_group.cancel_scope.cancel()


@pytest.fixture
async def connect_args(brokers: Brokers, broker_config: Config, mode: str
                       ) -> AsyncIterator[dict[str, Any]]:
    if mode.startswith("tcp"):
        broker = await brokers.start(broker_config)
        yield {"port": broker.tcp_port}
        await broker.stop()
    else:
        yield {"embedded": True, "config": broker_config}


@pytest.fixture
async def conn(connect_args: dict[str, Any]) -> AsyncIterator[Connection]:
    async with open_connection(**connect_args) as connection:
        yield connection
