"""Fill a store with jobs until new ones are refused, then pull and finish every one.

Issue 12's probe: with a small ``--store-max-bytes``, a broker that refuses new jobs
must still be able to pull, acknowledge and dead-letter every job it accepted. Runs an
in-process broker on 127.0.0.1 (LMDB in a temporary directory, or the memory store),
and prints one row per run: jobs accepted, jobs finished, bytes used when full and at
the end, growth per finished job, and whether the store's writer failed.

    python scripts/fill_and_drain.py --store lmdb --max-mib 12 --data-bytes 1000

``--data-dir`` puts LMDB in a directory of your own instead, on a small file system
for instance, and ``--max-mib 0`` leaves the maximum at its default (1 TiB), so only
the disk limits the store; the last column is then the disk's free bytes, when full
and at the end, as the broker's user sees them (f_bavail)::

    mount -t tmpfs -o size=16m tmpfs /mnt/small
    python scripts/fill_and_drain.py --store lmdb --max-mib 0 --data-dir /mnt/small/data
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile

import trio

from trioqueue.config import MIB, Config
from trioqueue.server.run import Server
from trioqueue.testing import RawClient

STACK = [f"  File \"worker.py\", line {n}, in step_{n}" for n in range(10)]


async def run(store: str, max_mib: int, data_bytes: int, fail_share: float,
              own_dir: str | None) -> str:
    data_dir = own_dir or tempfile.mkdtemp(prefix="trioqueue-fill-")
    config = Config(host="127.0.0.1", tcp_port=0, ws_port=0, data_dir=data_dir,
                    fsync="never", memory=store == "memory",
                    store_max_bytes=max_mib * MIB or None)
    progress = {"accepted": 0, "done": 0, "full": 0}
    try:
        async with trio.open_nursery() as nursery:
            server: Server = await nursery.start(Server(config).run)
            try:
                return await fill_and_drain(server, data_bytes, fail_share, progress)
            finally:
                server.stop()
    except BaseExceptionGroup as group:  # the broker stopped (a failed commit)
        return (f"{progress['accepted']:>9} {progress['done']:>9} {progress['full']:>12} "
                f"{'-':>12} {'-':>10} {'yes':>7}  ({group.exceptions[0]!r:.60})")
    finally:
        if own_dir is None:
            shutil.rmtree(data_dir, ignore_errors=True)


async def fill_and_drain(server: Server, data_bytes: int, fail_share: float,
                         progress: dict[str, int]) -> str:
    assert server.tcp_port is not None
    storage = server.broker.storage
    client = await RawClient.connect(server.tcp_port)
    pad = "x" * data_bytes
    accepted = 0
    for _ in range(100_000):  # bounded: a store of any size fills long before
        reply = await client.call("PUSHB", queue="q", jobs=[
            {"name": "j", "data": {"pad": pad}, "maxAttempts": 1} for _ in range(50)])
        if not reply["ok"]:
            break
        accepted += 50
        progress["accepted"] = accepted
    full = progress["full"] = storage.used_bytes()
    free_full = free_bytes(server.broker.config.data_dir)
    rng = random.Random(1)
    done = 0
    try:
        while done < accepted:
            reply = await client.call("PULLB", queue="q", count=50, timeout=0, owner="w")
            if not reply.get("jobs"):
                break
            for job, token in zip(reply["jobs"], reply["tokens"], strict=True):
                if rng.random() < fail_share:
                    await client.ok("FAIL", id=job["id"], token=token,
                                    error="ValueError: bad input", stack=STACK)
                else:
                    await client.ok("ACK", id=job["id"], token=token,
                                    result={"ok": True, "n": done})
                done += 1
                progress["done"] = done
    except (EOFError, OSError, AssertionError):
        pass  # the broker stopped: the row says how far it got
    end = storage.used_bytes()
    failed = server.broker.writer.failed
    per_job = (end - full) / done if done else 0.0
    free_end = free_bytes(server.broker.config.data_dir)
    return (f"{accepted:>9} {done:>9} {full:>12} {end:>12} {per_job:>10.0f} "
            f"{'yes' if failed else 'no':>7}  {free_full}/{free_end}")


def free_bytes(path: str) -> int:
    vfs = os.statvfs(path)
    return vfs.f_bavail * vfs.f_frsize


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=["lmdb", "memory"], nargs="+",
                        default=["lmdb", "memory"])
    parser.add_argument("--max-mib", type=int, nargs="+", default=[12, 64])
    parser.add_argument("--data-bytes", type=int, default=1000)
    parser.add_argument("--fail-share", type=float, default=0.05)
    parser.add_argument("--data-dir", help="LMDB here (kept), not in a temporary directory")
    args = parser.parse_args()
    print(f"{'store':>6} {'max MiB':>7} {'accepted':>9} {'finished':>9} {'used full':>12} "
          f"{'used end':>12} {'B/finish':>10} {'died':>7}  disk free full/end")
    for store in args.store:
        for max_mib in args.max_mib:
            row = trio.run(run, store, max_mib, args.data_bytes, args.fail_share,
                           args.data_dir)
            print(f"{store:>6} {max_mib:>7} {row}")


if __name__ == "__main__":
    main()
