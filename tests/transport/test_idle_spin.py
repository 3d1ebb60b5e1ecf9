"""The standalone broker polls its sockets for ``idle_spin_ms`` after each read
(transport/idle_spin.py), and sleeps once that window has passed."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from time import perf_counter

import trio
import trio.testing

from trioqueue.config import Config
from trioqueue.server.run import Server
from trioqueue.testing import RawClient
from trioqueue.testing.process import BrokerProcess
from trioqueue.transport.idle_spin import IdleSpin


async def test_it_polls_from_a_poke_until_the_window_has_passed_then_sleeps() -> None:
    spin = IdleSpin(0.005)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(spin.run)
        await trio.testing.wait_all_tasks_blocked()
        assert spin.spins == 0  # nothing read yet: asleep from the start
        poked = perf_counter()
        spin.poke(poked)
        # returns once the spinner sleeps again, which it must do after the window
        await trio.testing.wait_all_tasks_blocked()
        assert perf_counter() - poked >= 0.005
        assert spin.spins > 0
        polled = spin.spins
        await trio.testing.wait_all_tasks_blocked()
        assert spin.spins == polled  # asleep: no pass polled without a read
        spin.close()  # and the task returns


async def test_each_tcp_read_starts_the_window() -> None:
    config = Config(host="127.0.0.1", tcp_port=0, ws_port=0, memory=True,
                    idle_spin_ms=5.0)
    async with trio.open_nursery() as nursery:
        server: Server = await nursery.start(Server(config).run)
        spin = server.shell.spin
        nursery.start_soon(spin.run)  # as serve() does for the standalone broker
        assert server.tcp_port is not None
        client = await RawClient.connect(server.tcp_port)
        await trio.testing.wait_all_tasks_blocked()
        before = spin.spins
        await client.ok("Ping")
        await trio.testing.wait_all_tasks_blocked()  # until the window has passed
        assert spin.spins > before  # the read made it poll
        await client.aclose()
        server.stop()
        spin.close()


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def test_an_idle_standalone_broker_does_not_spin_and_stops_on_sigterm(
        tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", "--idle-spin-ms", "0.5")
    await broker.start()
    try:
        client = await RawClient.connect(broker.tcp_port)
        for _ in range(20):
            await client.ok("Ping")
        assert broker.process is not None
        used = cpu_seconds(broker.process.pid)
        await trio.sleep(1.0)  # the measurement window, not a synchronisation
        idle_cpu = cpu_seconds(broker.process.pid) - used
        # spinning through that second would cost about a second of CPU
        assert idle_cpu < 0.2, idle_cpu
        await client.aclose()
        with trio.fail_after(15):  # SIGTERM stops the spinner with the rest
            assert await broker.kill(signal.SIGTERM) == 0, broker.log.decode()
    finally:
        await broker.stop()
