"""Run the real broker as a subprocess, on free loopback ports, and kill it at will.

Used by tests that need a process to die for real (``SIGKILL``): the broker logs one
``trioqueue ready: tcp HOST:PORT ...`` line when it listens; we read the port from it.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
from pathlib import Path

import trio

READY = re.compile(rb"trioqueue ready: tcp [^:]+:(\d+) ws [^:]+:(\d+)")


SERVE = ("-m", "trioqueue", "serve")
# The same broker on a store that fails on purpose (see trioqueue.testing.faulty_broker).
FAULTY_SERVE = ("-m", "trioqueue.testing.faulty_broker")


class BrokerProcess:
    """The real broker as a subprocess: start, kill (any signal, now or at a random
    moment), start again on the same data directory.

    ``entry`` picks the program (``SERVE``, or ``FAULTY_SERVE`` plus its fault flags in
    ``extra_args``); ports are free ones the broker picks and reports. ``storage_url``
    (a ``postgresql://`` URL) runs it on PostgreSQL instead of LMDB in ``data_dir``.
    """

    def __init__(self, data_dir: str | Path, *extra_args: str,
                 env: dict[str, str] | None = None,
                 entry: tuple[str, ...] = SERVE, storage_url: str | None = None) -> None:
        self.data_dir = str(data_dir)
        self.extra_args = list(extra_args)
        if storage_url is not None:
            self.extra_args += ["--storage", storage_url]
        self.env = env
        self.entry = entry
        self.process: trio.Process | None = None
        self.tcp_port = 0
        self.ws_port = 0
        # What the broker logs goes to a file beside its data directory, never to a pipe:
        # a pipe nobody reads once the broker is ready fills up, and a broker that logs a
        # lot (a line per webhook delivery) would then block on its next line.
        self.log_path = Path(self.data_dir).with_name(Path(self.data_dir).name + ".broker.log")
        self._log_from = 0  # where this start's lines begin in the file
        self._paused = False

    @property
    def log(self) -> bytes:
        """What the broker logged since its last start."""
        try:
            with open(self.log_path, "rb") as file:
                file.seek(self._log_from)
                return file.read()
        except FileNotFoundError:
            return b""

    async def start(self, timeout_s: float = 20.0) -> None:
        args = [sys.executable, *self.entry, "--host", "127.0.0.1",
                "--tcp-port", "0", "--ws-port", "0", "--data-dir", self.data_dir,
                *self.extra_args]
        env = dict(os.environ if self.env is None else self.env)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log_file:
            self._log_from = log_file.tell()
            self.process = await trio.lowlevel.open_process(
                args, stdout=subprocess.DEVNULL, stderr=log_file, env=env)
        with trio.fail_after(timeout_s):
            while True:
                match = READY.search(self.log)
                if match:
                    self.tcp_port, self.ws_port = int(match[1]), int(match[2])
                    return
                if self.process.returncode is not None or self.process.poll() is not None:
                    raise RuntimeError(f"broker exited before ready:\n{self.log.decode()}")
                await trio.sleep(0.01)  # (polling the log file for the ready line)

    async def kill(self, sig: int = signal.SIGKILL, timeout_s: float = 20.0) -> int:
        """Send ``sig`` and wait for the exit; returns the exit code."""
        assert self.process is not None
        self.process.send_signal(sig)
        with trio.fail_after(timeout_s):
            return await self.process.wait()

    async def kill_at_random(self, low_s: float, high_s: float, rng: random.Random,
                             sig: int = signal.SIGKILL) -> int:
        """Wait a random time in [low_s, high_s), then kill with ``sig``."""
        await trio.sleep(rng.uniform(low_s, high_s))
        return await self.kill(sig)

    async def wait_exit(self, timeout_s: float = 20.0) -> int:
        """Wait for the broker to exit on its own (e.g. after a storage failure)."""
        assert self.process is not None
        with trio.fail_after(timeout_s):
            return await self.process.wait()

    @property
    def paused(self) -> bool:
        return self._paused

    def pause(self) -> None:
        """SIGSTOP: the process stops where it is, its sockets open (a broker cut off
        or frozen, as a cluster's fencing tests need)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)
        self._paused = False

    def memory_bytes(self, field: str = "VmRSS") -> int:
        """``VmRSS`` (now) or ``VmHWM`` (the peak so far) of the broker, in bytes, from
        ``/proc/<pid>/status``."""
        assert self.process is not None
        with open(f"/proc/{self.process.pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
        raise AssertionError(f"no {field} in /proc status")

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            if self._paused:
                self.resume()
            await self.kill(signal.SIGKILL)

