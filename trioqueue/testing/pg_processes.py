"""A PostgreSQL server's processes seen from outside: what its ``postmaster.pid`` says,
which processes the postmaster forked, and whether a process has exited.

The postmaster of a :class:`~trioqueue.testing.postgres.PostgresServer` may have been
started by another process (the command line), and its children are never ours, so we
cannot ``wait`` for them: Linux's procfs tells us instead.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

PROC = Path("/proc")


class PidFile(NamedTuple):
    """What ``postmaster.pid`` says: the postmaster's pid (line 1), its port (line 4) and
    its status (line 8: ``starting``, then ``ready`` once it accepts connections)."""

    pid: int
    port: int
    status: str


def read_pid_file(data_dir: Path) -> PidFile | None:
    """``data_dir/postmaster.pid``'s account, or None when there is none to read."""
    try:
        lines = (data_dir / "postmaster.pid").read_text().splitlines()
        status = lines[7].strip() if len(lines) > 7 else ""
        return PidFile(int(lines[0]), int(lines[3]), status)
    except (OSError, ValueError, IndexError):
        return None


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name: state, ppid, ..."""
    try:
        return (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    """``pid`` is a process that has not exited; a zombie nobody reaps counts as gone
    (it holds no memory, locks or sockets any more)."""
    if not (PROC / "self" / "stat").exists():  # no procfs: ask the kernel the plain way
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    stat = _proc_stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from procfs; none found without it)."""
    found = []
    for entry in PROC.glob("[0-9]*"):
        stat = _proc_stat(int(entry.name))
        if stat is not None and stat[1] == str(pid):
            found.append(int(entry.name))
    return found


def wait_until(done: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``done`` until it holds; ``TimeoutError`` naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.01)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (whoever binds it later may find it taken)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
