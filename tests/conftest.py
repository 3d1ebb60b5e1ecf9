"""Shared fixtures: an in-process broker (LMDB in a temp dir, or memory) and raw clients."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from trioqueue.config import Config
from trioqueue.server import Server
from trioqueue.testing import RawClient


def make_config(tmp_path: Path, **overrides: Any) -> Config:
    config = Config(host="127.0.0.1", tcp_port=0, ws_port=0,
                    data_dir=str(tmp_path / "data"), fsync="never")
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return make_config(tmp_path)


@pytest.fixture
def configure(tmp_path: Path) -> Callable[..., Config]:
    """``make_config`` for this test's directory, for tests that start brokers themselves."""
    return lambda **overrides: make_config(tmp_path, **overrides)


@pytest.fixture
def start_server(nursery: trio.Nursery, tmp_path: Path) -> Callable[..., Any]:
    """Start another in-process broker with config overrides; stopped with the test."""

    async def start(**overrides: Any) -> Server:
        srv: Server = await nursery.start(Server(make_config(tmp_path, **overrides)).run)
        return srv

    return start


@pytest.fixture
async def server(nursery: trio.Nursery, config: Config) -> AsyncIterator[Server]:
    srv: Server = await nursery.start(Server(config).run)
    yield srv
    srv.stop()


@pytest.fixture(params=["msgpack", "cbor"])
def codec(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def connect(server: Server, codec: str) -> AsyncIterator[Callable[..., Any]]:
    clients: list[RawClient] = []

    async def open_client(codec_name: str | None = None) -> RawClient:
        assert server.tcp_port is not None
        client = await RawClient.connect(server.tcp_port, codec_name or codec)
        clients.append(client)
        return client

    yield open_client
    for client in clients:
        with trio.move_on_after(1):
            await client.aclose()


@pytest.fixture
async def client(connect: Callable[..., Any]) -> RawClient:
    result: RawClient = await connect()
    return result


@pytest.fixture
def span_exporter(monkeypatch: pytest.MonkeyPatch) -> Any:
    """OpenTelemetry's in-memory exporter behind a tracer provider set for this test only.

    The global provider can be set once per process: its guard and value are replaced
    for the test and restored after it (monkeypatch), so tests do not see each other's.
    """
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.util._once import Once

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "_TRACER_PROVIDER_SET_ONCE", Once())
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    trace.set_tracer_provider(provider)
    yield exporter
    provider.shutdown()
