"""``heap_keep_bytes``: the standalone broker reuses freed memory for large buffers
instead of faulting in fresh pages for each (trioqueue/server/process_heap.py).

Page faults are counted by the kernel (``ru_minflt``, ``/proc/PID/stat``), so these
tests read what the setting is for, not a proxy. Each runs in a process of its own: the
allocator's thresholds are per process, and the test runner's must stay as they are.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import trio

from trioqueue.config import Config
from trioqueue.server.process_heap import _glibc_mallopt, keep_freed_heap
from trioqueue.testing import RawClient
from trioqueue.testing.process import BrokerProcess

GLIBC = _glibc_mallopt() is not None
needs_glibc = pytest.mark.skipif(not GLIBC, reason="heap_keep_bytes tunes glibc's malloc")

# Three 8.5 MB buffers alive at once, then freed: what one large job costs the broker.
FAULTS_PER_ROUND = """
import resource, sys
from trioqueue.server.process_heap import _glibc_mallopt, keep_freed_heap
print(keep_freed_heap(int(sys.argv[1])))
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
size, count = int(sys.argv[2]), int(sys.argv[3])
for _ in range(3):
    bufs = [b"x" * size for _ in range(count)]; del bufs
before = faults()
for _ in range(10):
    bufs = [b"x" * size for _ in range(count)]; del bufs
print((faults() - before) / 10)
"""


def faults_per_round(keep_bytes: int, size: int = 8_500_000, count: int = 3
                     ) -> tuple[str, float]:
    out = subprocess.run([sys.executable, "-c", FAULTS_PER_ROUND, str(keep_bytes), str(size),
                          str(count)],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    applied, faults = out.split()
    return applied, float(faults)


@needs_glibc
def test_large_buffers_reuse_freed_memory() -> None:
    applied, faults = faults_per_round(64 << 20)
    assert applied == "True"
    assert faults < 100  # 25.5 MB a round in fresh pages would be about 6,000 faults


@needs_glibc
def test_a_block_past_the_mmap_threshold_reuses_freed_memory_too() -> None:
    # 40 MB: past glibc's largest mmap threshold (32 MiB), so mapped on its own and
    # unmapped when freed, unless no block is mapped on its own (M_MMAP_MAX 0)
    applied, faults = faults_per_round(64 << 20, 40_000_000, 1)
    assert applied == "True"
    assert faults < 100, faults  # 40 MB in fresh pages would be about 9,800 faults
    _, default = faults_per_round(0, 40_000_000, 1)
    assert default > 5_000, default


@needs_glibc
def test_zero_leaves_the_allocator_as_it_was() -> None:
    applied, faults = faults_per_round(0)
    assert applied == "False"
    assert faults > 1_000  # glibc gives the freed 25.5 MB back, and faults it in again


def test_out_of_range_values_are_refused() -> None:
    with pytest.raises(ValueError, match="heap_keep_bytes must be at least 0"):
        Config(heap_keep_bytes=-1).validate()
    with pytest.raises(ValueError, match="heap_keep_bytes must be under 2GiB"):
        Config(heap_keep_bytes=2**31).validate()
    assert keep_freed_heap(0) is False


def minor_faults(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[7])


async def faults_per_large_job(data_dir: Path, *flags: str) -> float:
    """A standalone broker's page faults per 8.5 MB job pushed, pulled and acked,
    after three such jobs to warm it up."""
    broker = BrokerProcess(data_dir, *flags)
    await broker.start()
    try:
        assert broker.process is not None
        client = await RawClient.connect(broker.tcp_port)
        data = "x" * 8_500_000
        before = 0
        for i in range(8):
            if i == 3:
                before = minor_faults(broker.process.pid)
            with trio.fail_after(30):
                await client.ok("PUSH", queue="big", data=data, removeOnComplete=True)
                job = (await client.ok("PULL", queue="big", timeout=0))["job"]
                await client.ok("ACK", id=job["id"])
        faults = (minor_faults(broker.process.pid) - before) / 5
        await client.aclose()
        return faults
    finally:
        await broker.stop()


@needs_glibc
async def test_the_standalone_broker_keeps_large_jobs_off_fresh_pages(tmp_path: Path
                                                                      ) -> None:
    kept = await faults_per_large_job(tmp_path / "kept")
    # Each 8.5 MB buffer in fresh pages is about 2,075 faults (4 KiB pages). The only
    # fresh one a job may cost is its frame's own mapping (a large frame is received
    # into an mmap of its own, unmapped off the loop: framing.py); every other buffer
    # reuses freed memory. (With glibc's defaults the broker now faults about as much:
    # the buffers a large job used to pass through, each a fresh mapping there, are
    # gone.)
    pages = 8_500_000 // 4096
    assert kept < 1.2 * pages, kept
