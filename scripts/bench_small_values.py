#!/usr/bin/env python3
"""One PUSH of many small values, per shape and codec, against a subprocess broker.

A broker (``python -m trioqueue serve`` on a temporary LMDB store, ``--log-slow-step-ms
5``, the package of the current directory) gets one PUSH per shape and codec over TCP;
printed: the reply, its time, the broker's slow steps (from its own log; wall and CPU
ms) and its peak RSS growth (``VmHWM``). ``--pull`` then pulls, reads back (GetJob) and
acknowledges an accepted job; ``--finished`` then asks GetState and GetJob of the
finished job (its record and data read back from the store). ``--stacks FILE`` runs the broker under
``scripts/broker_steps.py`` (its steps to /tmp/dw-steps.json, stacks of long steps to
FILE). ``--at-once N --ints M``: instead, N connections each send a PUSH of M small
integers at the same time (the peak growth under several large frames at once).

    python scripts/bench_small_values.py [--shapes ints7.5M,map1M,maps1M,deep]
        [--codecs msgpack,cbor] [--pull [--finished]] [--stacks FILE] [--at-once 6 --ints 37000000]

Every wait is bounded (120 s); the broker is stopped by its pid.
"""
import argparse
import re
import shutil
import signal
import tempfile
import time
from pathlib import Path

import trio

from trioqueue.testing import RawClient
from trioqueue.testing.process import BrokerProcess

SHAPES = {
    "ints7.5M": lambda: [7] * 7_500_000,
    "ints3M": lambda: [7] * 3_000_000,   # 6M chars JSON: accepted
    "map1M": lambda: {str(i): 0 for i in range(1_000_000)},  # ~10.9M chars: over
    "map600k": lambda: {str(i): 0 for i in range(600_000)},  # ~6.3M: accepted
    "maps1M": lambda: [{"a": 1}] * 1_000_000,  # 8M chars: accepted
    "deep": lambda: [[[[[[[[i, [i]] for i in range(20)]]]]]] for _ in range(30_000)],
}
STEP = re.compile(rb"slow (step|pass): .*?([\d.]+) ms \(([\d.]+) ms CPU\)")

async def main(args):
    d = tempfile.mkdtemp(prefix="dw-")
    entry = ("-m", "trioqueue", "serve")
    if args.stacks:
        entry = (str(Path(__file__).with_name("broker_steps.py")),
                 "--steps-out", "/tmp/dw-steps.json", "--min-ms", "5",
                 "--stacks-after-ms", "5", "--stacks-out", args.stacks, "serve")
    b = BrokerProcess(d + "/data", "--log-slow-step-ms", "5", *args.broker, entry=entry)
    await b.start()
    try:
        if args.at_once:
            await at_once(b, args.at_once, args.ints)
            return
        base = b.memory_bytes("VmHWM")
        for name in args.shapes:
            data = SHAPES[name]()
            for codec in args.codecs:
                c = await RawClient.connect(b.tcp_port, codec)
                frame = c.frame({"cmd": "PUSH", "queue": "q", "data": data, "reqId": "x"})
                logfrom = len(b.log)
                t = time.perf_counter()
                await c.send_raw(frame)
                with trio.fail_after(120):
                    r = await c.receive()
                el = time.perf_counter() - t
                jid = r.get("id")
                extra = ""
                if jid and args.pull:
                    t = time.perf_counter()
                    await c.send_raw(c.frame({"cmd": "PULL", "queue": "q", "timeout": 0,
                                              "reqId": "p"}))
                    with trio.fail_after(120):
                        await c.receive()
                    extra += f" pull {time.perf_counter()-t:.2f}s"
                    t = time.perf_counter()
                    await c.send_raw(c.frame({"cmd": "GetJob", "id": jid, "reqId": "g"}))
                    with trio.fail_after(120):
                        await c.receive()
                    extra += f" getjob {time.perf_counter()-t:.2f}s"
                    await c.send_raw(c.frame({"cmd": "ACK", "id": jid, "reqId": "a"}))
                    with trio.fail_after(120):
                        await c.receive()
                    for cmd in ("GetState", "GetJob") if args.finished else ():
                        await trio.sleep(0.3)  # (the ACK's own steps logged apart)
                        t = time.perf_counter()
                        await c.send_raw(c.frame({"cmd": cmd, "id": jid, "reqId": "f"}))
                        with trio.fail_after(120):
                            await c.receive()
                        extra += f" finished {cmd} {time.perf_counter()-t:.2f}s"
                await trio.sleep(0.3)
                steps = [(float(m[2]), float(m[3]), m[1].decode())
                         for m in STEP.finditer(b.log[logfrom:])]
                stepsonly = [s for s in steps if s[2] == "step"]
                worst = max(stepsonly, default=(0, 0, ""))
                print(f"{name:9} {codec:7} frame {len(frame)/1e6:.1f}MB reply {r.get('ok')} "
                      f"{r.get('error', '')[:30]:30} {el:.2f}s "
                      f"slow steps {len(stepsonly)} worst {worst[0]:.0f}ms ({worst[1]:.0f} CPU) "
                      f"HWM +{(b.memory_bytes('VmHWM')-base)/2**20:.0f}MiB{extra}", flush=True)
                if args.verbose:
                    for line in b.log[logfrom:].decode(errors="replace").splitlines():
                        if "slow" in line:
                            print("   ", line[-150:])
                await c.aclose()
    finally:
        if args.stacks:
            await b.kill(signal.SIGINT)
        await b.stop()
        shutil.rmtree(d, ignore_errors=True)


async def at_once(b, count, ints):
    h = await RawClient.connect(b.tcp_port)
    await h.ok("Ping")
    base = b.memory_bytes("VmHWM")
    logfrom = len(b.log)
    hogs = [await RawClient.connect(b.tcp_port) for _ in range(count)]
    frame = hogs[0].frame({"cmd": "PUSH", "queue": "q", "reqId": "x", "data": [7] * ints})
    t = time.perf_counter()
    with trio.fail_after(300):
        async with trio.open_nursery() as n:
            for c in hogs:
                n.start_soon(c.send_raw, frame)
        replies = [await c.receive() for c in hogs]
    steps = [(float(m[2]), float(m[3])) for m in STEP.finditer(b.log[logfrom:])
             if m[1] == b"step"]
    print("replies", {r.get("error") for r in replies}, f"{time.perf_counter() - t:.1f}s",
          f"VmHWM +{(b.memory_bytes('VmHWM') - base) / 2**20:.0f} MiB",
          "longest step (wall, CPU ms)", max(steps, default=(0, 0)))


p = argparse.ArgumentParser()
p.add_argument("--shapes", default="ints7.5M,map1M,maps1M,deep")
p.add_argument("--codecs", default="msgpack,cbor")
p.add_argument("--pull", action="store_true")
p.add_argument("--finished", action="store_true")
p.add_argument("--stacks", default="")
p.add_argument("--at-once", type=int, default=0)
p.add_argument("--ints", type=int, default=37_000_000)
p.add_argument("-v", "--verbose", action="store_true")
p.add_argument("--broker", nargs="*", default=[])
a = p.parse_args()
a.shapes = a.shapes.split(",")
a.codecs = a.codecs.split(",")
trio.run(main, a)
