"""The one broker of an LMDB data directory: an OS lock on a file in it.

Two brokers writing one store each rebuild their queues from it at start and then
commit from what they hold in memory, so each overwrites and deletes the other's jobs:
acknowledged work is lost. LMDB itself lets several processes write one environment
(its own lock only orders their transactions), so the store takes a lock of its own:
``flock`` on ``owner.lock`` in the directory, taken without waiting when the store
opens and held until it closes. The kernel drops it with the process, however the
process ends (a SIGKILL, a crash), so a dead owner never keeps the next one out.

The file also says who holds it (pid, host, since when), so a broker that is refused
can name the other one. Processes that only read the store (``trioqueue backup``) take
no lock: a read transaction of another process is safe beside the broker's writes.

``flock`` rather than ``fcntl``'s record locks: a record lock belongs to the process,
so a second open in the same process would be granted, and closing any descriptor of
the file would drop it; a ``flock`` belongs to the open file, so a second store opened
on the directory in the same process is refused too.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
from datetime import UTC, datetime
from typing import Any

from ..owners import owner_words, since_words
from ..port import StorageOpenError, StoreInUse

OWNER_FILE = "owner.lock"
_RECORD_MAX_BYTES = 4096  # what is read of another owner's record


class DirectoryOwner:
    """The lock of the data directory ``directory`` (created if missing), held from
    construction until :meth:`release`; :class:`~..port.StoreInUse` when another
    process (or another store of this one) holds it."""

    def __init__(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        self.path = os.path.join(directory, OWNER_FILE)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            other = _read_record(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise StoreInUse(
                    f"the store {os.path.abspath(directory)} is served by another broker "
                    f"({_words(other)}); stop it first: one broker serves a data "
                    f"directory") from None
            raise StorageOpenError(f"cannot lock {self.path}: {exc.strerror} (the "
                                   f"broker needs file locks in its data directory)"
                                   ) from None
        except BaseException:
            os.close(fd)
            raise
        record = {"pid": os.getpid(), "host": socket.gethostname(),
                  "since": since_words(datetime.now(UTC))}
        data = json.dumps(record).encode("utf-8") + b"\n"
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
        except BaseException:
            os.close(fd)
            raise
        self._fd: int | None = fd

    def release(self) -> None:
        """Give the directory up (idempotent). The record stays: the next owner
        writes its own over it."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def _words(record: dict[str, Any]) -> str:
    return owner_words(record.get("pid"), record.get("host"), record.get("since"))


def _read_record(fd: int) -> dict[str, Any]:
    """The owner's record as its file holds it (empty while the owner is still
    writing it, or when it is not ours)."""
    try:
        record = json.loads(os.pread(fd, _RECORD_MAX_BYTES, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}
