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
        self.log = b""
        self._paused = False

    async def start(self, timeout_s: float = 20.0) -> None:
        args = [sys.executable, *self.entry, "--host", "127.0.0.1",
                "--tcp-port", "0", "--ws-port", "0", "--data-dir", self.data_dir,
                *self.extra_args]
        env = dict(os.environ if self.env is None else self.env)
        self.log = b""
        self.process = await trio.lowlevel.open_process(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        assert self.process.stderr is not None
        with trio.fail_after(timeout_s):
            while True:
                chunk = await self.process.stderr.receive_some(4096)
                if not chunk:
                    raise RuntimeError(f"broker exited before ready:\n{self.log.decode()}")
                self.log += chunk
                match = READY.search(self.log)
                if match:
                    self.tcp_port, self.ws_port = int(match[1]), int(match[2])
                    return

    async def kill(self, sig: int = signal.SIGKILL, timeout_s: float = 20.0) -> int:
        """Send ``sig`` and wait for the exit; returns the exit code."""
        assert self.process is not None
        self.process.send_signal(sig)
        with trio.fail_after(timeout_s):
            code = await self.process.wait()
        if self.process.stderr is not None:
            await self.process.stderr.aclose()
        return code

    async def kill_at_random(self, low_s: float, high_s: float, rng: random.Random,
                             sig: int = signal.SIGKILL) -> int:
        """Wait a random time in [low_s, high_s), then kill with ``sig``."""
        await trio.sleep(rng.uniform(low_s, high_s))
        return await self.kill(sig)

    async def wait_exit(self, timeout_s: float = 20.0) -> int:
        """Wait for the broker to exit on its own (e.g. after a storage failure)."""
        assert self.process is not None
        with trio.fail_after(timeout_s):
            code = await self.process.wait()
        if self.process.stderr is not None:
            self.log += await _drain(self.process.stderr)
            await self.process.stderr.aclose()
        return code

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

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            if self._paused:
                self.resume()
            await self.kill(signal.SIGKILL)


async def _drain(stream: trio.abc.ReceiveStream) -> bytes:
    out = b""
    while chunk := await stream.receive_some(65536):
        out += chunk
    return out
