"""A throwaway PostgreSQL server for tests and benchmarks, run from the installed binaries.

:class:`PostgresServer` makes a cluster in a directory of its own (``initdb``, trust
auth, UTF-8, C locale), runs ``postgres`` on 127.0.0.1 and a free port, and can stop,
kill (a crash: every server process gets ``SIGKILL``) and start it again on the same
data. :class:`~trioqueue.testing.pg_databases.ExternalPostgres` stands for a server
someone else runs, named by ``TRIOQUEUE_TEST_POSTGRES``: it makes and drops databases but
cannot stop or kill anything. :func:`test_server` picks one of the two.

initdb and postgres refuse to run as root: when we are root they run as the ``postgres``
system user (Debian's package creates it), which then owns the directories they write.

``python -m trioqueue.testing.postgres start --dir D [--port P] [--fast]`` starts one for
scripts (it prints the DSN of database ``postgres`` and keeps running, its pid in
``D/postgres.pid``); ``stop --dir D`` stops it.
"""

from __future__ import annotations

import argparse
import atexit
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from .pg_databases import (
    EXTERNAL_ENV,
    ExternalPostgres,
    NotOnExternalServer,
    PostgresDatabases,
    PostgresError,
    PostgresUnavailable,
)
from .pg_processes import alive, children, free_port, read_pid_file, wait_until

__all__ = ["ExternalPostgres", "NotOnExternalServer", "PostgresError", "PostgresServer",
           "PostgresUnavailable", "find_bin_dir", "test_server"]

BIN_ENV = "TRIOQUEUE_PG_BIN"
DEBIAN_ROOT = Path("/usr/lib/postgresql")
NEEDED_BINARIES = ("initdb", "postgres")
SUPERUSER = "postgres"
RUN_AS = "postgres"
# The settings we choose live in a file of ours, rewritten at every start, that
# postgresql.conf includes; initdb's own file stays as it wrote it.
SETTINGS_FILE = "trioqueue.conf"
# PostgreSQL's documented shutdown signals.
STOP_SIGNALS = {"smart": signal.SIGTERM, "fast": signal.SIGINT,
                "immediate": signal.SIGQUIT}
# A unix socket's path must fit sockaddr_un (108 bytes on Linux, with the NUL).
MAX_SOCKET_PATH = 107
PORT_ATTEMPTS = 3
CLI_PID_FILE = "postgres.pid"


def find_bin_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """The directory holding ``initdb`` and ``postgres``: ``$TRIOQUEUE_PG_BIN``, else the
    one ``pg_ctl`` on the PATH resolves into, else the highest ``/usr/lib/postgresql/*/bin``
    (Debian's layout, where ``/usr/bin`` holds only wrappers)."""
    configured = environ.get(BIN_ENV)
    if configured:
        candidates = [Path(configured)]
    else:
        candidates = []
        pg_ctl = shutil.which("pg_ctl", path=environ.get("PATH"))
        if pg_ctl:
            candidates.append(Path(pg_ctl).resolve().parent)
        candidates += sorted(DEBIAN_ROOT.glob("*/bin"), key=_major_version, reverse=True)
    for candidate in candidates:
        if all(os.access(candidate / name, os.X_OK) for name in NEEDED_BINARIES):
            return candidate
    looked = ", ".join(str(c) for c in candidates) or "no pg_ctl on the PATH nor Debian's layout"
    raise PostgresUnavailable(f"no initdb and postgres in {looked}")


def _major_version(bin_dir: Path) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in bin_dir.parent.name.split("."))
    except ValueError:
        return (-1,)


def _server_user() -> tuple[int, int] | None:
    """The (uid, gid) to run initdb and postgres as: None as a normal user, the
    ``postgres`` system user's when we are root (they refuse to run as root)."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(RUN_AS)
    except KeyError:
        raise PostgresUnavailable(
            f"no {RUN_AS!r} system user for the server to run as (we are root, which "
            "the server refuses; Debian's postgresql package creates that user)") from None
    return entry.pw_uid, entry.pw_gid


class PostgresServer(PostgresDatabases):
    """A PostgreSQL cluster of our own in ``directory`` (a new temporary one by default).

    ``directory/data`` holds the cluster, ``directory/socket`` its unix socket and
    ``directory/server.log`` the server's output. Durable by default (fsync and full
    page writes on), since crash tests run against it; ``fast=True`` turns off fsync,
    synchronous_commit and full_page_writes for runs that only want speed: there a
    :meth:`kill` may lose commits already acknowledged.

    A server still running when the interpreter exits is stopped then, unless
    ``stop_at_exit`` is false (the command line leaves its server running on purpose).
    """

    def __init__(self, directory: str | Path | None = None, *, port: int | None = None,
                 fast: bool = False, bin_dir: Path | None = None,
                 stop_at_exit: bool = True) -> None:
        super().__init__()
        self.bin_dir = bin_dir or find_bin_dir()
        self._owner = _server_user()
        self._made_directory = directory is None
        if directory is None:
            directory = tempfile.mkdtemp(prefix="trioqueue-pg-")
            self._give_to_server(Path(directory))
        self.directory = Path(directory).resolve()
        self.data_dir = self.directory / "data"
        self.socket_dir = self.directory / "socket"
        self.log_path = self.directory / "server.log"
        self._port_given = port is not None
        self.port = port or 0
        self.fast = fast
        self.stop_at_exit = stop_at_exit
        self._process: subprocess.Popen[bytes] | None = None
        self._watched = False

    def dsn(self, dbname: str) -> str:
        if not self.port:
            raise PostgresError("the server has no port yet: start() it first")
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

    @property
    def admin_dsn(self) -> str:
        return self.dsn("postgres")

    @property
    def pid(self) -> int | None:
        """The postmaster's pid while it runs, whoever started it in this directory."""
        if self._process is not None:  # ours: only its own exit status counts
            return self._process.pid if self._process.poll() is None else None
        found = read_pid_file(self.data_dir)
        return found.pid if found is not None and alive(found.pid) else None

    @property
    def running(self) -> bool:
        return self.pid is not None

    def start(self, timeout_s: float = 60.0) -> None:
        """Start the server (making the cluster first if there is none); returns once
        it accepts connections, after crash recovery if it was killed."""
        if self.running:  # perhaps started by another process (the command line)
            found = read_pid_file(self.data_dir)
            if found is not None:
                self.port = found.port
            return
        self._make_cluster()
        if not self.port:
            self.port = free_port()
        for attempt in range(1, PORT_ATTEMPTS + 1):
            self._write_settings()
            try:
                self._launch(timeout_s)
                break
            except _PortTaken:
                if self._port_given or attempt == PORT_ATTEMPTS:
                    raise
                self.port = free_port()
        if self.stop_at_exit and not self._watched:
            atexit.register(self.close)
            self._watched = True

    def stop(self, mode: str = "fast", timeout_s: float = 60.0) -> None:
        """Shut down in PostgreSQL's ``mode``: ``smart`` (once its sessions end),
        ``fast`` (rolls back open transactions) or ``immediate`` (no checkpoint: the
        next start recovers from the WAL). Nothing to do when it is not running."""
        if mode not in STOP_SIGNALS:
            raise ValueError(f"mode must be one of {', '.join(STOP_SIGNALS)}, not {mode!r}")
        self._close_admin()
        pid = self.pid
        if pid is None:
            return
        os.kill(pid, STOP_SIGNALS[mode])
        self._wait_exit(pid, timeout_s, f"a {mode} shutdown")

    def kill(self, timeout_s: float = 30.0) -> None:
        """Crash the server: ``SIGKILL`` to the postmaster and every process it forked,
        no shutdown at all. The children go too: a backend left running would keep the
        old shared memory in use, and the next start would refuse to run."""
        self._close_admin()
        pid = self.pid
        if pid is None:
            raise PostgresError("kill(): the server is not running")
        os.kill(pid, signal.SIGSTOP)  # it forks nothing more while its children are listed
        forked = children(pid)
        for victim in (pid, *forked):
            try:
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._wait_exit(pid, timeout_s, "SIGKILL")
        try:
            wait_until(lambda: not any(alive(child) for child in forked), timeout_s,
                       "the killed server's processes to exit")
        except TimeoutError as exc:
            raise PostgresError(str(exc)) from None

    def restart(self, mode: str = "fast") -> None:
        """Stop (in ``mode``) and start again, on the same port and data."""
        self.stop(mode)
        self.start()

    def close(self) -> None:
        """Stop the server (kill it if it will not stop) and remove the directory if
        this object made it. Idempotent."""
        if self._watched:
            atexit.unregister(self.close)
            self._watched = False
        try:
            self.stop()
        except PostgresError:
            if self.running:
                self.kill()
        if self._made_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def settings(self) -> dict[str, str]:
        """What we set in the cluster's configuration, as postgresql.conf values."""
        socket_path = f"{self.socket_dir}/.s.PGSQL.{self.port}"
        # Clients connect over TCP; a directory too deep for a socket just goes without.
        sockets = str(self.socket_dir) if len(socket_path) <= MAX_SOCKET_PATH else ""
        durable = "off" if self.fast else "on"
        return {"listen_addresses": _quoted("127.0.0.1"), "port": str(self.port),
                "unix_socket_directories": _quoted(sockets), "max_connections": "200",
                "fsync": durable, "synchronous_commit": durable,
                "full_page_writes": durable,
                # Each fresh test database writes 4 MB of WAL; checkpoints this often
                # keep the directory near this size rather than the default 1 GB.
                "max_wal_size": _quoted("256MB")}

    def _make_cluster(self) -> None:
        if (self.data_dir / "PG_VERSION").exists():
            return
        for path in (self.directory, self.data_dir, self.socket_dir):
            if not path.exists():
                path.mkdir(mode=0o700)
                self._give_to_server(path)
        # --no-sync: a throwaway cluster need not reach the disk before it is used; what
        # its server commits later is as durable as the server's settings make it.
        done = subprocess.run(
            [str(self.bin_dir / "initdb"), "-D", str(self.data_dir), "-E", "UTF8",
             "--locale=C", "--auth=trust", "-U", SUPERUSER, "--no-sync"],
            cwd=self.directory, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, **self._as_server_user())
        if done.returncode != 0:
            reach = (f"; running as {RUN_AS!r}, which must be able to reach "
                     f"{self.directory} (each directory above it needs o+x)"
                     if self._owner else "")
            raise PostgresError(f"initdb failed ({done.returncode}){reach}:\n{done.stdout}")
        with open(self.data_dir / "postgresql.conf", "a") as conf:
            conf.write(f"\ninclude '{SETTINGS_FILE}'\n")

    def _write_settings(self) -> None:
        lines = [f"{key} = {value}\n" for key, value in self.settings().items()]
        path = self.data_dir / SETTINGS_FILE
        path.write_text("# Written by trioqueue.testing.postgres at every start.\n"
                        + "".join(lines))
        self._give_to_server(path)

    def _launch(self, timeout_s: float) -> None:
        with open(self.log_path, "ab") as log:
            log_start = log.tell()
            # A session of its own: a Ctrl-C meant for the tests does not reach it, and
            # it outlives the command line that starts it for a script.
            process = subprocess.Popen(
                [str(self.bin_dir / "postgres"), "-D", str(self.data_dir)],
                cwd=self.directory, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
                **self._as_server_user())
        self._process = process
        deadline = time.monotonic() + timeout_s
        while read_pid_file(self.data_dir) != (process.pid, self.port, "ready"):
            if process.poll() is not None:
                log_text = self._log_since(log_start)
                if "Address already in use" in log_text:
                    raise _PortTaken(log_text)
                raise PostgresError(f"postgres exited with status {process.returncode} "
                                    f"before it was ready:\n{log_text}")
            if time.monotonic() > deadline:
                process.kill()
                process.wait()
                raise PostgresError(f"postgres was not ready within {timeout_s} s:\n"
                                    f"{self._log_since(log_start)}")
            time.sleep(0.01)

    def _wait_exit(self, pid: int, timeout_s: float, what: str) -> None:
        process = self._process
        try:
            if process is not None and process.pid == pid:
                process.wait(timeout_s)
            else:  # started by another process (the command line): not ours to wait for
                wait_until(lambda: not alive(pid), timeout_s, "the server's exit")
        except (subprocess.TimeoutExpired, TimeoutError):
            raise PostgresError(f"the server did not exit within {timeout_s} s of "
                                f"{what}") from None

    def _log_since(self, offset: int) -> str:
        with open(self.log_path, "rb") as log:
            log.seek(offset)
            return log.read()[-4000:].decode(errors="replace")

    def _as_server_user(self) -> dict[str, Any]:
        """subprocess arguments running a child as the server's user (when we are root)."""
        if self._owner is None:
            return {}
        return {"user": self._owner[0], "group": self._owner[1], "extra_groups": []}

    def _give_to_server(self, path: Path) -> None:
        if self._owner is not None:
            os.chown(path, *self._owner)


class _PortTaken(PostgresError):
    """Someone took the free port between our choosing it and the server binding it."""


def _quoted(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def test_server(fast: bool = False, environ: Mapping[str, str] = os.environ
                ) -> PostgresServer | ExternalPostgres:
    """The server tests run against, ready: ``$TRIOQUEUE_TEST_POSTGRES``'s (checked by
    connecting), else a :class:`PostgresServer` of our own, started (``fast`` as asked).

    Raises :class:`PostgresUnavailable` when there is neither; close() the result.
    """
    external = environ.get(EXTERNAL_ENV)
    if external:
        given = ExternalPostgres(external)
        given.check()
        return given
    server = PostgresServer(fast=fast, bin_dir=find_bin_dir(environ))
    try:
        server.start()
    except BaseException:
        server.close()
        raise
    return server


test_server.__test__ = False  # type: ignore[attr-defined]  # not a test, for pytest


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trioqueue.testing.postgres",
        description="Start or stop a PostgreSQL server for scripts, in a directory.")
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("start", help="start (making the cluster if needed), "
                                "print the DSN of database postgres, leave it running")
    stop = commands.add_parser("stop", help="stop the server running in --dir")
    for command in (start, stop):
        command.add_argument("--dir", type=Path, required=True, help="the server's directory")
    start.add_argument("--port", type=int, help="TCP port on 127.0.0.1 (default: a free one)")
    start.add_argument("--fast", action="store_true",
                       help="fsync, synchronous_commit and full_page_writes off")
    args = parser.parse_args(argv)
    pid_file = args.dir / CLI_PID_FILE
    try:
        if args.command == "start":
            server = PostgresServer(args.dir, port=args.port, fast=args.fast,
                                    stop_at_exit=False)
            server.start()
            pid_file.write_text(f"{server.pid}\n")
            print(server.dsn("postgres"))
        else:
            PostgresServer(args.dir, stop_at_exit=False).stop()
            pid_file.unlink(missing_ok=True)
    except PostgresError as exc:
        print(f"postgres: {exc}", file=sys.stderr)
        return 1
    except PostgresUnavailable as exc:
        print(f"postgres: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
