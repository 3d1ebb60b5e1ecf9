"""Shared fixtures: an in-process broker (LMDB in a temp dir, or memory), raw clients,
and a PostgreSQL server with a fresh database per test."""

from __future__ import annotations

import gc
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio

from trioqueue.config import Config
from trioqueue.server.run import Server, tune_gc
from trioqueue.testing import RawClient
from trioqueue.testing import postgres as pg
from trioqueue.testing.cluster import BrokerCluster

# Which store the tests' brokers use: "lmdb" (default) or "postgres" (a fresh database
# of the test server each). A module or test marked ``engines("lmdb", "postgres")`` runs
# on each (``engines("lmdb")``: a test that reads LMDB's files); TRIOQUEUE_TEST_STORAGE=
# postgres puts every other one on PostgreSQL.
ENGINES = ("lmdb", "postgres")
ENGINE_VARIABLE = "TRIOQUEUE_TEST_STORAGE"


@dataclass(frozen=True)
class StoreEngine:
    """The store of a test's brokers: ``storage_url`` None means LMDB in the test's
    directory (or memory, where the test asks for it)."""

    name: str
    storage_url: str | None = None

    def overrides(self) -> dict[str, Any]:
        return {} if self.storage_url is None else {"storage_url": self.storage_url}


def default_engine() -> str:
    engine = os.environ.get(ENGINE_VARIABLE, "lmdb")
    if engine not in ENGINES:
        raise pytest.UsageError(f"{ENGINE_VARIABLE} must be one of {', '.join(ENGINES)}")
    return engine


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "engines(*names): run on each of these stores (lmdb, postgres)")


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Iterator[object]:
    """A skip inside a trio test keeps its reason: pytest-trio finds the one
    ``Skipped`` in the run's exception group and raises a new one without its message,
    so ``-rs`` printed only "Skipped"; the original is raised in its place."""
    try:
        return (yield)
    except pytest.skip.Exception as skipped:
        group = skipped.__context__
        while isinstance(group, BaseExceptionGroup) and len(group.exceptions) == 1:
            group = group.exceptions[0]
        if not skipped.msg and isinstance(group, pytest.skip.Exception):
            raise group from None
        raise


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker("engines")
    if marker is not None and "store_engine" in metafunc.fixturenames:
        metafunc.parametrize("store_engine", marker.args, indirect=True)


@pytest.fixture
def store_engine(request: pytest.FixtureRequest) -> StoreEngine:
    engine = getattr(request, "param", None) or default_engine()
    if engine == "lmdb":
        return StoreEngine("lmdb")
    return StoreEngine(engine, request.getfixturevalue("pg_dsn"))


def make_config(tmp_path: Path, store: StoreEngine | None = None, **overrides: Any
                ) -> Config:
    config = Config(host="127.0.0.1", tcp_port=0, ws_port=0,
                    data_dir=str(tmp_path / "data"), fsync="never")
    if store is not None and not overrides.get("memory"):
        overrides = {**store.overrides(), **overrides}
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


@pytest.fixture
def config(tmp_path: Path, store_engine: StoreEngine) -> Config:
    return make_config(tmp_path, store_engine)


@pytest.fixture
def configure(tmp_path: Path, store_engine: StoreEngine) -> Callable[..., Config]:
    """``make_config`` for this test's directory, for tests that start brokers themselves."""
    return lambda **overrides: make_config(tmp_path, store_engine, **overrides)


@pytest.fixture
def start_server(nursery: trio.Nursery, tmp_path: Path,
                 store_engine: StoreEngine) -> Callable[..., Any]:
    """Start another in-process broker with config overrides; stopped with the test."""

    async def start(**overrides: Any) -> Server:
        srv: Server = await nursery.start(
            Server(make_config(tmp_path, store_engine, **overrides)).run)
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


NO_POSTGRES = "no PostgreSQL: install Debian's postgresql package or set TRIOQUEUE_TEST_POSTGRES"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[pg.PostgresServer | pg.ExternalPostgres]:
    """The session's PostgreSQL: ``$TRIOQUEUE_TEST_POSTGRES``'s, else one started from the
    installed binaries (durable settings) and stopped after the session (an atexit hook
    stops it even if the session dies first). Skipped, saying why, without either."""
    pytest.importorskip("psycopg", reason="the psycopg package is missing: "
                        "pip install -e '.[test]'")
    try:
        server = pg.test_server()
    except pg.PostgresUnavailable as exc:
        pytest.skip(f"{NO_POSTGRES} ({exc.missing})")
    try:
        yield server
    finally:
        server.close()


def _own_database(postgres_server: pg.PostgresServer | pg.ExternalPostgres
                  ) -> Iterator[str]:
    """A new empty database's DSN, the database dropped when the generator is closed
    (the server started again first: a test may have stopped or killed it)."""
    name = f"trioqueue_test_{uuid.uuid4().hex[:16]}"
    dsn = postgres_server.create_database(name)
    try:
        yield dsn
    finally:
        if isinstance(postgres_server, pg.PostgresServer):
            postgres_server.start()
        postgres_server.drop_database(name)


@pytest.fixture
def pg_dsn(postgres_server: pg.PostgresServer | pg.ExternalPostgres) -> Iterator[str]:
    """The DSN of a new empty database of this test's own, dropped after it (with any
    session the test left in it)."""
    yield from _own_database(postgres_server)


@pytest.fixture
async def three_brokers(tmp_path: Path, pg_dsn: str) -> AsyncIterator[BrokerCluster]:
    """Three brokers (b0, b1, b2; lease 2 s) on this test's database, stopped after it
    (tests of a cluster: docs/scale-out.md)."""
    async with BrokerCluster(pg_dsn, 3, tmp_path) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def module_pg_dsn(postgres_server: pg.PostgresServer | pg.ExternalPostgres) -> Iterator[str]:
    """Like ``pg_dsn``, but one database for a whole test module (see
    ``shared_three_brokers``), dropped after the module's last test."""
    yield from _own_database(postgres_server)


@pytest.fixture(scope="module")
def shared_three_brokers(tmp_path_factory: pytest.TempPathFactory, module_pg_dsn: str
                         ) -> Iterator[BrokerCluster]:
    """``three_brokers``, started once for a whole test module and shared by its tests:
    only for tests that neither stop, kill nor pause a broker and that use queues and
    job ids of their own (a test that needs a fresh cluster takes ``three_brokers``).

    pytest-trio runs each test in a trio run of its own and allows async fixtures of one
    test only, so the brokers are started and stopped by runs of their own here; a
    broker process outlives the run that started it."""
    yield from shared_cluster(BrokerCluster(module_pg_dsn, 3,
                                            tmp_path_factory.mktemp("cluster")))


def shared_cluster(cluster: BrokerCluster) -> Iterator[BrokerCluster]:
    """``cluster`` started and stopped by trio runs of their own, for a module-scoped
    fixture (as ``shared_three_brokers``) of a module whose brokers take other flags."""
    trio.run(cluster.__aenter__)
    try:
        yield cluster
    finally:
        trio.run(cluster.stop)


@pytest.fixture
def restartable_postgres(postgres_server: pg.PostgresServer | pg.ExternalPostgres
                         ) -> Iterator[pg.PostgresServer]:
    """The session's server for a test that stops, kills or restarts it (skipped on an
    external server, which we may not); running again for the next test whatever the
    test left it in. Its ``pg_dsn`` database lives on the same server."""
    if not isinstance(postgres_server, pg.PostgresServer):
        pytest.skip("this test stops or kills PostgreSQL: it needs the server the tests "
                    "start, not TRIOQUEUE_TEST_POSTGRES's")
    yield postgres_server
    postgres_server.start()


@pytest.fixture
def served_gc() -> Iterator[None]:
    """The collector as ``trioqueue serve`` tunes it (Python's default runs a full
    collection, traversing every value made so far, in the middle of a slice of
    work), put back after: for tests that measure the broker's longest steps."""
    before = gc.get_threshold()
    tune_gc(Config())
    try:
        yield
    finally:
        gc.set_threshold(*before)
