"""A small disk that fills up: a tmpfs of a few MiB mounted for one test.

A store whose file system runs out (docs/durability.md, "Full storage") cannot be
tested on the machine's own disk without filling it; a tmpfs of a fixed size is a
real file system that fills, and leaves nothing behind once unmounted. Mounting needs
root (or CAP_SYS_ADMIN); where it is not permitted :class:`CannotMount` says why, so
a test can be skipped with that reason.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_COMMAND_TIMEOUT_S = 30


class CannotMount(Exception):
    """Mounting a tmpfs is not permitted here (the message says why)."""


@contextmanager
def small_tmpfs(mount_point: Path, size_bytes: int) -> Iterator[Path]:
    """Mount a tmpfs of ``size_bytes`` on ``mount_point`` (made if missing) for the
    block, and unmount it after (lazily if it is still busy)."""
    mount_point.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        raise CannotMount("mounting a small tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs",
                           str(mount_point)], capture_output=True, text=True,
                          timeout=_COMMAND_TIMEOUT_S)
    if done.returncode != 0:
        raise CannotMount(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        if subprocess.run(["umount", str(mount_point)],
                          timeout=_COMMAND_TIMEOUT_S).returncode != 0:
            subprocess.run(["umount", "-l", str(mount_point)], timeout=_COMMAND_TIMEOUT_S)
