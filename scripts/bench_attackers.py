"""The attacks of ``bench_attacks.py`` (issue 12), each run in a process of its own.

An attack starts its connections (threads: the blocking work is in the kernel), prints
``ready`` once it is under way, and goes on until SIGTERM or its time limit; then it
prints one JSON line of what it did. Every loop is bounded by the time limit and a
count, and every socket is closed by the process's exit.
"""

from __future__ import annotations

import json
import secrets
import select
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgpack
from bench import Conn

perf = time.perf_counter
MB = 1_000_000


@dataclass
class Attack:
    host: str
    port: int
    token: str
    deadline: float
    stop: threading.Event = field(default_factory=threading.Event)
    stats: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def on(self) -> bool:
        return not self.stop.is_set() and perf() < self.deadline

    def count(self, what: str, n: int = 1) -> None:
        with self.lock:
            self.stats[what] += n

    def socket(self, rcvbuf: int = 0) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.settimeout(30)
        sock.connect((self.host, self.port))
        return sock

    def authed(self) -> Conn:
        conn = Conn(self.host, self.port, "msgpack", 60)
        conn.call("Auth", token=self.token)
        return conn


def frame(msg: dict[str, Any]) -> bytes:
    payload = msgpack.packb(msg, use_bin_type=True)
    return len(payload).to_bytes(4, "big") + payload


def ready() -> None:
    print("ready", flush=True)


def threads(attack: Attack, target: Callable[[Attack, int], None], n: int) -> None:
    for i in range(n):
        threading.Thread(target=guarded, args=(attack, target, i), daemon=True).start()


def guarded(attack: Attack, target: Callable[[Attack, int], None], i: int) -> None:
    try:
        target(attack, i)
    except (OSError, ConnectionError) as exc:
        attack.count(f"error {type(exc).__name__}")


# --------------------------------------------------------------------------- big frames


def _big_pusher(size: int, pull: bool) -> Callable[[Attack, int], None]:
    def loop(attack: Attack, i: int) -> None:
        conn = attack.authed()
        queue = f"attack-big-{secrets.token_hex(3)}"
        data = frame({"cmd": "PUSH", "queue": queue, "data": "x" * size, "reqId": "big",
                      "removeOnComplete": True})
        while attack.on() and attack.stats["frames"] < 500:
            conn.sock.sendall(data)
            reply = conn.wait("big")
            attack.count("frames")
            attack.count("ok" if reply.get("ok") else str(reply.get("error"))[:40])
            if pull and reply.get("ok"):
                job = conn.call("PULL", queue=queue, timeout=0, owner="attacker")
                conn.call("ACK", id=job["job"]["id"], token=job.get("token"))
        conn.close()
    return loop


def big_auth(attack: Attack) -> None:
    ready()
    threads(attack, _big_pusher(40 * MB, pull=False), 1)


def big_auth_8mb(attack: Attack) -> None:
    ready()
    threads(attack, _big_pusher(8_500_000, pull=True), 1)


def big_preauth(attack: Attack) -> None:
    data = frame({"cmd": "PUSH", "queue": "attack", "data": "x" * (40 * MB), "reqId": "b"})

    def loop(attack: Attack, i: int) -> None:
        while attack.on() and attack.stats["frames"] < 5000:
            sock = attack.socket()
            try:
                sock.sendall(data)
            except (BrokenPipeError, ConnectionResetError):
                attack.count("cut while sending")
            attack.count("frames")
            sock.close()

    ready()
    threads(attack, loop, 2)


# --------------------------------------------------------------------------- holding


def half_sent(attack: Attack) -> None:
    held: list[socket.socket] = []
    for _ in range(200):  # before Auth: at most the 16 KiB pre-auth frame, half of it
        sock = attack.socket()
        sock.sendall((16 * 1024).to_bytes(4, "big") + b"\x81" + b"x" * 8191)
        held.append(sock)
        attack.count("preauth half frames")
    for _ in range(16):  # after Auth: 20 MB of a 60 MB frame each, 320 MB in all
        conn = attack.authed()
        try:
            conn.sock.sendall((60 * MB).to_bytes(4, "big") + b"\x81" + b"x" * (20 * MB))
            attack.count("authed half frames")
        except (BrokenPipeError, ConnectionResetError):
            attack.count("cut while sending")
        held.append(conn.sock)
    ready()
    attack.stop.wait(max(0.0, attack.deadline - perf()))


def _closed(sock: socket.socket) -> bool:
    """Whether the broker closed (or reset) the connection, without reading from it."""
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLRDHUP)
    return any(mask & (select.POLLRDHUP | select.POLLHUP | select.POLLERR)
               for _, mask in poller.poll(0))


def no_read(attack: Attack) -> None:
    """Each client asks for 80 MB of replies (400 GetJob of a 200 KB job), more than
    max_write_queue_bytes, reads none, waits to be cut, and starts again."""
    def loop(attack: Attack, i: int) -> None:
        setup = attack.authed()
        job = setup.call("PUSH", queue=f"attack-noread-{i}", data="r" * 200_000)
        setup.close()
        ask = frame({"cmd": "GetJob", "id": job["id"], "reqId": "g"}) * 400
        while attack.on() and attack.stats["connections"] < 1000:
            sock = attack.socket(rcvbuf=4096)
            sock.sendall(frame({"cmd": "Auth", "token": attack.token, "reqId": "a"}) + ask)
            attack.count("connections")
            while attack.on() and not _closed(sock):
                time.sleep(0.01)
            attack.count("cut")
            sock.close()

    threads(attack, loop, 8)
    ready()


def idle_flood(attack: Attack) -> None:
    held: list[Any] = []
    for i in range(2000):
        if not attack.on():
            break
        if i % 2:
            held.append(attack.authed())
            attack.count("authenticated")
        else:
            held.append(attack.socket())
            attack.count("unauthenticated")
    ready()
    attack.stop.wait(max(0.0, attack.deadline - perf()))


MALFORMED = [
    b"\xc1",  # a byte msgpack never uses
    msgpack.packb({"cmd": "Ping", "reqId": "x"})[:-1],  # a truncated map
    b"\x81\xa3cmd\xa2\xff\xfe",  # invalid UTF-8
    b"\x91" * 10_000 + b"\xc0",  # 10,000 nested arrays
    msgpack.packb({"cmd": "NoSuchCommand", "reqId": "x"}),
    msgpack.packb({"cmd": "PUSH", "queue": "attack-bad", "priority": "high", "reqId": "x"}),
    msgpack.packb([1, 2, 3]),  # not a map
]


def malformed(attack: Attack) -> None:
    batch = b"".join(len(p).to_bytes(4, "big") + p for p in MALFORMED * 30)
    expected = len(MALFORMED) * 30

    def loop(attack: Attack, i: int) -> None:
        conn = attack.authed()
        while attack.on() and attack.stats["frames"] < 2_000_000:
            conn.sock.sendall(batch)
            got = 0
            while got < expected:
                got += len(conn.recv_msgs()) + len(conn.orphans)
                conn.orphans.clear()
            attack.count("frames", expected)
        conn.close()

    threads(attack, loop, 4)
    ready()


ATTACKS: dict[str, Callable[[Attack], None]] = {
    "big_auth": big_auth, "big_auth_8mb": big_auth_8mb, "big_preauth": big_preauth,
    "half_sent": half_sent, "no_read": no_read, "idle_flood": idle_flood,
    "malformed": malformed,
}


def run_attacker(name: str, host: str, port: int, token: str, limit_s: float) -> int:
    attack = Attack(host, port, token, perf() + limit_s)
    signal.signal(signal.SIGTERM, lambda *_: attack.stop.set())
    try:
        ATTACKS[name](attack)
        attack.stop.wait(max(0.0, attack.deadline - perf()))
    finally:
        print(json.dumps(dict(attack.stats)), flush=True)
    return 0
