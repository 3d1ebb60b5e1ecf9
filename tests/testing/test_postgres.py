"""The PostgreSQL harness: fresh databases per test, a server that keeps its data across a
restart and a crash, the command line for scripts, and clear failures without a server."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from trioqueue.testing import postgres as pg
from trioqueue.testing.pg_processes import alive, free_port

psycopg = pytest.importorskip("psycopg")


@pytest.mark.parametrize("run", [1, 2])
def test_each_test_gets_a_fresh_empty_database(pg_dsn: str, run: int) -> None:
    # Both runs create the same table: the second would find the first's if the
    # database were shared.
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
                            ).fetchone() == (0,)
        conn.execute("CREATE TABLE only_here (run int)")
        conn.execute("INSERT INTO only_here VALUES (%s)", (run,))
        assert conn.execute("SHOW server_encoding").fetchone() == ("UTF8",)


def test_a_database_made_after_another_does_not_see_its_tables(
        postgres_server: pg.PostgresServer | pg.ExternalPostgres, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE mine (x int)")
    other = postgres_server.create_database("trioqueue_test_harness_other")
    try:
        with psycopg.connect(other) as conn:
            assert conn.execute("SELECT to_regclass('mine')").fetchone() == (None,)
    finally:
        postgres_server.drop_database("trioqueue_test_harness_other")
    with psycopg.connect(postgres_server.admin_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pg_database WHERE datname = %s",
                            ("trioqueue_test_harness_other",)).fetchone() == (0,)


def test_our_server_is_durable_local_and_roomy(
        postgres_server: pg.PostgresServer | pg.ExternalPostgres) -> None:
    if postgres_server.external:
        pytest.skip("checks the settings of the server the tests start")
    with psycopg.connect(postgres_server.admin_dsn) as conn:
        shown = {name: conn.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
                 for name in ("fsync", "synchronous_commit", "full_page_writes",
                              "listen_addresses", "max_connections")}
    assert shown == {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on",
                     "listen_addresses": "127.0.0.1", "max_connections": "200"}
    assert postgres_server.dsn("x").startswith("postgresql://postgres@127.0.0.1:")


def test_committed_rows_survive_a_restart(restartable_postgres: pg.PostgresServer,
                                          pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (x int)")
        conn.execute("INSERT INTO kept SELECT generate_series(1, 100)")
    port = restartable_postgres.port
    restartable_postgres.restart()
    assert restartable_postgres.port == port  # the DSNs handed out stay good
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM kept").fetchone() == (100,)


def test_after_a_kill_committed_rows_are_there_and_uncommitted_ones_are_not(
        restartable_postgres: pg.PostgresServer, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE crash (x int)")
        conn.execute("INSERT INTO crash SELECT generate_series(1, 1000)")
    open_txn = psycopg.connect(pg_dsn)
    open_txn.execute("INSERT INTO crash VALUES (-1)")  # never committed
    old_pid = restartable_postgres.pid
    restartable_postgres.kill()
    assert not restartable_postgres.running
    with pytest.raises(psycopg.OperationalError):
        open_txn.commit()
    open_txn.close()
    restartable_postgres.start()  # crash recovery from the WAL
    assert restartable_postgres.pid != old_pid
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT count(*), min(x) FROM crash").fetchone() == (1000, 1)
    log = restartable_postgres.log_path.read_text()
    assert "was not properly shut down; automatic recovery in progress" in log


def test_no_binaries_raise_postgres_unavailable_with_the_install_hint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pg, "DEBIAN_ROOT", tmp_path / "nowhere")
    with pytest.raises(pg.PostgresUnavailable, match="apt-get install postgresql"):
        pg.test_server(environ={"PATH": str(tmp_path)})
    with pytest.raises(pg.PostgresUnavailable, match="apt-get install postgresql"):
        pg.find_bin_dir({"TRIOQUEUE_PG_BIN": str(tmp_path)})
    assert list(tmp_path.iterdir()) == []  # nothing made on the way to the refusal


def test_an_external_server_makes_databases_but_refuses_to_stop_or_kill(
        postgres_server: pg.PostgresServer | pg.ExternalPostgres) -> None:
    environ = {"TRIOQUEUE_TEST_POSTGRES": postgres_server.admin_dsn}
    with pg.test_server(environ=environ) as external:
        assert external.external
        dsn = external.create_database("trioqueue_test_harness_external")
        try:
            with psycopg.connect(dsn) as conn:
                assert conn.execute("SELECT current_database()").fetchone() == (
                    "trioqueue_test_harness_external",)
        finally:
            external.drop_database("trioqueue_test_harness_external")
        for refused in (external.kill, external.restart, external.stop, external.start):
            with pytest.raises(pg.NotOnExternalServer,
                               match="not available on an external server"):
                refused()


def test_an_external_url_keeps_its_credentials_and_options_per_database() -> None:
    external = pg.ExternalPostgres("postgresql://u:secret@db.example:6543/admin"
                                   "?sslmode=require")
    assert external.dsn("jobs") == "postgresql://u:secret@db.example:6543/jobs?sslmode=require"
    with pytest.raises(pg.PostgresError, match="must be a URL"):
        pg.ExternalPostgres("host=db.example dbname=admin")


def test_an_unreachable_external_server_fails_clearly() -> None:
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"
    with pytest.raises(pg.PostgresError, match="cannot connect"):
        pg.test_server(environ={"TRIOQUEUE_TEST_POSTGRES": url})


def test_the_command_line_starts_a_server_that_outlives_it_and_stops_it(
        postgres_server: pg.PostgresServer | pg.ExternalPostgres) -> None:
    if postgres_server.external:
        pytest.skip("starts a server of its own from the installed binaries")
    # Not under tmp_path: as root the server runs as the postgres user, who cannot pass
    # pytest's private (0700) temporary directories.
    with tempfile.TemporaryDirectory(prefix="trioqueue-pg-cli-") as base:
        os.chmod(base, 0o755)
        directory = Path(base) / "pg"
        try:
            started = _command_line("start", "--dir", str(directory), "--fast")
            pid = int((directory / "postgres.pid").read_text())
            assert alive(pid)  # the command has exited; its server runs on
            with psycopg.connect(started.strip()) as conn:
                assert conn.execute("SHOW fsync").fetchone() == ("off",)
        finally:
            _command_line("stop", "--dir", str(directory))
        assert not alive(pid)
        assert not (directory / "postgres.pid").exists()


def _command_line(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "trioqueue.testing.postgres", *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout
