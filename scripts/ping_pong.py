#!/usr/bin/env python3
"""What waking from epoll costs a request-reply round trip on this machine.

Two processes over loopback TCP (127.0.0.1), 40-byte messages, one at a time: the
client sends and waits for the reply, the server waits for a message and answers. Each
side either sleeps in the kernel until data comes (``block``: ``epoll_wait`` on the
server, a blocking ``recv`` on the client) or polls with non-blocking reads (``poll``;
the server polls for 200 us after each message, then sleeps, as the broker's
``idle_spin_ms`` does). Prints the mean round trip per combination.

    python scripts/ping_pong.py [--n 20000]

Bounded: ``--n`` round trips per combination, each run under a 60 s alarm.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import socket
import time

SERVER_POLL_S = 0.0002


def serve(conn: socket.socket, poll: bool) -> None:
    conn.setblocking(False)
    ep = select.epoll()
    ep.register(conn.fileno(), select.EPOLLIN)
    while True:
        data = b""
        if poll:
            until = time.perf_counter() + SERVER_POLL_S
            while time.perf_counter() < until:
                try:
                    data = conn.recv(100)
                    break
                except BlockingIOError:
                    continue
        if not data:
            ep.poll()
            try:
                data = conn.recv(100)
            except BlockingIOError:
                continue
        if not data:
            return
        conn.send(b"y" * 40)


def client(port: int, n: int, poll: bool) -> float:
    conn = socket.create_connection(("127.0.0.1", port))
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn.setblocking(not poll)
    started = time.perf_counter()
    for _ in range(n):
        conn.send(b"x" * 40)
        while True:
            try:
                if conn.recv(100):
                    break
            except BlockingIOError:
                continue
    elapsed = time.perf_counter() - started
    conn.close()
    return elapsed / n


def one(n: int, server_polls: bool, client_polls: bool) -> float:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # the client
        listener.close()
        signal.alarm(60)
        os.write(write_end, repr(client(port, n, client_polls)).encode())
        os._exit(0)
    signal.alarm(60)
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    serve(conn, server_polls)
    os.waitpid(child, 0)
    signal.alarm(0)
    listener.close()
    conn.close()
    os.close(write_end)
    return float(os.read(read_end, 100))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20_000, help="round trips per combination")
    args = ap.parse_args()
    print(f"{'server':<7} {'client':<7} {'round trip us':>13}")
    for server_polls in (False, True):
        for client_polls in (False, True):
            rtt = one(args.n, server_polls, client_polls)
            print(f"{'poll' if server_polls else 'block':<7} "
                  f"{'poll' if client_polls else 'block':<7} {rtt * 1e6:>13.1f}")


if __name__ == "__main__":
    main()
