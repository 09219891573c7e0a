"""The raw loopback transfer of a round's bytes: part A's floor beside the round trip (``bench_sync.py``).

``python raw_loopback.py NBYTES [REPEATS]`` prints, as JSON, the median
seconds to send NBYTES to another process over loopback TCP and have them
all sent back. The bytes go whole, then come back whole, as a round's do (all
the weights out, then the deltas back), each way one sender and one receiver.

Both ends are small processes of their own, importing nothing but the
standard library. Measured from the benchmark's own process, with a sending
thread beside a receiving one and an echo process that had imported
TensorFlow (as the floor was until 2026-11-28), five devices' bytes took
0.9 ms one day and 1.8-2.8 ms the next, the rounds themselves unchanged; here
0.7-1.0 ms: the link, not the processes at its ends.
"""

from __future__ import annotations

import json
import multiprocessing
import socket
import statistics
import struct
import sys
import time
from typing import Any

#: The length of a message to the echo server, before its bytes.
LENGTH = struct.Struct("!Q")


def recv_exactly(sock: socket.socket, view: memoryview) -> bool:
    """Fill ``view`` from ``sock``; False if the peer closed first."""
    got = 0
    while got < view.nbytes:
        n = sock.recv_into(view[got:])
        if n == 0:
            return False
        got += n
    return True


def echo_server(port_out: Any) -> None:
    """Accept one connection on loopback; receive each message whole, then send it back whole."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port_out.put(server.getsockname()[1])
        conn, _ = server.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            head = bytearray(LENGTH.size)
            while recv_exactly(conn, memoryview(head)):
                # A new buffer each message: one reused took 1.2-1.4 ms to echo five devices' bytes, against
                # 0.7-1.0 ms for new ones, measured back to back (the floor is the cheaper).
                buf = bytearray(LENGTH.unpack(head)[0])
                recv_exactly(conn, memoryview(buf))
                conn.sendall(buf)


def raw_loopback_s(nbytes: int, repeats: int = 30) -> float:
    """Median seconds of ``repeats`` echoes of ``nbytes`` (after one not counted)."""
    if nbytes < 0 or repeats < 1:
        raise ValueError(f"nbytes must be >= 0 and repeats >= 1, got nbytes={nbytes}, repeats={repeats}")
    ctx = multiprocessing.get_context("spawn")
    ports = ctx.Queue()
    child = ctx.Process(target=echo_server, args=(ports,), daemon=True)
    child.start()
    message = LENGTH.pack(nbytes) + bytes(nbytes)
    back = memoryview(bytearray(nbytes))
    times = []
    try:
        with socket.create_connection(("127.0.0.1", ports.get(timeout=60))) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for _ in range(repeats + 1):
                start = time.perf_counter()
                sock.sendall(message)
                if not recv_exactly(sock, back):
                    raise ConnectionError("the loopback echo server closed the connection")
                times.append(time.perf_counter() - start)
    finally:
        child.terminate()
    return float(statistics.median(times[1:]))


if __name__ == "__main__":
    print(json.dumps({"seconds": raw_loopback_s(int(sys.argv[1]), *(int(a) for a in sys.argv[2:3]))}))
