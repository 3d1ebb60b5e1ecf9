"""Databases on a PostgreSQL server for tests: making and dropping them, their DSNs, and
the server someone else runs (``TRIOQUEUE_TEST_POSTGRES``), where that is all we may do.

psycopg is imported when a database is first made, so importing this module does not
need it (it is in the ``postgres`` and ``test`` extras).
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import quote, urlsplit, urlunsplit

if TYPE_CHECKING:
    import psycopg

EXTERNAL_ENV = "TRIOQUEUE_TEST_POSTGRES"
INSTALL_HINT = ("install PostgreSQL's server (Debian: apt-get install postgresql), or set "
                "TRIOQUEUE_PG_BIN to the directory holding its initdb and postgres")


class PostgresUnavailable(RuntimeError):
    """Nothing here can run a PostgreSQL server (its binaries, the user to run them as,
    or psycopg are missing): ``missing`` says what, the message adds what to install."""

    def __init__(self, missing: str, hint: str = INSTALL_HINT) -> None:
        super().__init__(f"{missing}; {hint}")
        self.missing = missing


class PostgresError(RuntimeError):
    """A server that should have worked did not start, stop or answer as asked."""


class NotOnExternalServer(PostgresError):
    """Start, stop, kill or restart asked of a server we do not run."""


class PostgresDatabases:
    """A server's databases: each one's DSN, and CREATE and DROP DATABASE through one
    admin connection (psycopg 3, autocommit). Shared by a server we run and one we are
    given."""

    # Whether someone else runs the server, so that it cannot be stopped or killed here.
    external = False

    def __init__(self) -> None:
        self._admin_conn: psycopg.Connection[Any] | None = None

    def dsn(self, dbname: str) -> str:
        """``postgresql://USER@HOST:PORT/DBNAME`` for database ``dbname``."""
        raise NotImplementedError

    @property
    def admin_dsn(self) -> str:
        """Where CREATE and DROP DATABASE are sent from."""
        raise NotImplementedError

    def create_database(self, name: str, template: str | None = None) -> str:
        """Create database ``name``, a copy of ``template`` (else of the pristine
        ``template0``, in UTF-8 with the C locale), and return its DSN.

        The copy takes the server's default strategy: on 15 and later, through the WAL
        (4 MB of it for an empty database), which measured cheaper for a create and its
        drop than ``STRATEGY FILE_COPY`` and its two checkpoints
        (scripts/bench_pg_fresh_db.py)."""
        from psycopg import sql

        conn = self._admin()
        statement = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Identifier(template or "template0"))
        if template is None:
            # Only a copy of template0 may choose its encoding and locale; choosing them
            # makes an external server's databases behave like ours.
            statement += sql.SQL(" ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C'")
        conn.execute(statement)
        return self.dsn(name)

    def drop_database(self, name: str) -> None:
        """Drop database ``name`` if it exists, ending the sessions still in it (13+:
        a test that left a connection open does not stop the next one)."""
        from psycopg import sql

        conn = self._admin()
        statement = sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name))
        if conn.info.server_version >= 130000:
            statement += sql.SQL(" WITH (FORCE)")
        conn.execute(statement)

    def _admin(self) -> psycopg.Connection[Any]:
        if self._admin_conn is None or self._admin_conn.closed:
            try:
                import psycopg
            except ImportError:
                raise PostgresUnavailable("the psycopg package is missing",
                                          "pip install 'trioqueue[postgres]'") from None
            try:
                self._admin_conn = psycopg.connect(self.admin_dsn, autocommit=True,
                                                   connect_timeout=10)
            except psycopg.OperationalError as exc:
                raise PostgresError(f"cannot connect to {self.admin_dsn}: {exc}") from exc
        return self._admin_conn

    def _close_admin(self) -> None:
        """Close the admin connection (before the server goes away and breaks it)."""
        if self._admin_conn is not None:
            self._admin_conn.close()
            self._admin_conn = None


class ExternalPostgres(PostgresDatabases):
    """A server someone else runs, named by an admin URL
    ``postgresql://USER[:PASSWORD]@HOST:PORT/DB`` whose user may CREATE DATABASE.

    Databases are made and dropped as on a server of our own; :meth:`start`,
    :meth:`stop`, :meth:`kill` and :meth:`restart` raise :class:`NotOnExternalServer`.
    """

    external = True

    def __init__(self, admin_url: str) -> None:
        super().__init__()
        self._parts = urlsplit(admin_url)
        if self._parts.scheme not in ("postgresql", "postgres") or not self._parts.netloc:
            raise PostgresError(f"{EXTERNAL_ENV} must be a URL like "
                                f"postgresql://user@host:5432/postgres, not {admin_url!r}")
        self._admin_url = admin_url

    @property
    def admin_dsn(self) -> str:
        return self._admin_url

    def dsn(self, dbname: str) -> str:
        return urlunsplit(self._parts._replace(path="/" + quote(dbname, safe="")))

    def check(self) -> None:
        """Connect once, so that an unreachable server fails at once and clearly."""
        self._admin()

    def start(self) -> NoReturn:
        self._refuse("start")

    def stop(self, mode: str = "fast") -> NoReturn:
        self._refuse("stop")

    def kill(self) -> NoReturn:
        self._refuse("kill")

    def restart(self, mode: str = "fast") -> NoReturn:
        self._refuse("restart")

    def close(self) -> None:
        """Close our connection; the server is not ours to stop."""
        self._close_admin()

    def __enter__(self) -> ExternalPostgres:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _refuse(self, what: str) -> NoReturn:
        raise NotOnExternalServer(
            f"{what}() is not available on an external server ({EXTERNAL_ENV}); a test "
            "that stops or kills PostgreSQL needs a server the tests start themselves")
