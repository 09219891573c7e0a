"""A userspace wire between two interfaces that delays and drops frames: link delay and loss without ``tc netem``.

Shaped hosts (``edgelab.cluster.shaped_hosts``) use it where the kernel lacks netem
(this project's build machine among them). The device's veth end and a
second veth pair into the bridge are joined by this relay instead of by the
bridge itself: every Ethernet frame read from one side is written to the
other ``delay_s`` later, or dropped with probability ``loss``, drawn from a
seeded generator so a scenario replays the same losses for the same frames.
The rate stays with ``tc tbf`` on the device's veth ends; the relay writes
through the interface's queueing discipline, so a frame the token bucket has
no room for is dropped, as on a real link with a full queue.

Frames are copied whole, so the interfaces must not offload segmentation or
checksums (``ethtool -K ... tx off tso off gso off gro off``): a packet socket
sees an offloaded packet before the kernel has cut it into frames or filled
in its checksum. ``shaped_hosts`` turns them off.

Run as ``python -m edgelab.cluster.link_relay A B --delay-ms D --loss L --seed S``; it
prints its frame counts when stopped (SIGTERM or SIGINT).
"""

from __future__ import annotations

import argparse
import errno
import os
import random
import selectors
import signal
import socket
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

ETH_P_ALL = 0x0003
SO_SNDBUFFORCE = 32  # Linux: a send buffer above net.core.wmem_max, for root
SO_RCVBUFFORCE = 33  # Linux: a receive buffer above net.core.rmem_max, for root
RECEIVE_BUFFER = 8 << 20  # frames waiting while the host's cores are busy elsewhere: ~0.6 s at 100 Mbit/s
# A written frame is charged to the socket until the token bucket lets it out, so the send buffer must hold
# the bucket's whole queue: with the default 208 KiB (17 ms at 100 Mbit/s) the socket refused frames that the
# 50 ms queue had room for, and TCP took them for losses (a 0.64 s transfer stretched to 1.3 s under load).
SEND_BUFFER = 8 << 20
BACKLOG_RETRY_S = 0.0005  # the socket's buffer is full: try the held frame again this soon
MAX_FRAME = 65536
DRAIN = 256  # frames read from one side per wake-up, so the other side is not starved


@dataclass
class Counts:
    """Frames seen on the wire, per direction ``"A>B"`` and ``"B>A"``."""

    forwarded: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)  # by the loss draw
    refused: dict[str, int] = field(default_factory=dict)  # by the interface: queue full, or link down

    def add(self, kind: str, direction: str) -> None:
        """Count one frame of ``kind`` (forwarded, dropped, refused) going ``direction``."""
        table = getattr(self, kind)
        table[direction] = table.get(direction, 0) + 1


class Wire:
    """Frames between interfaces ``a`` and ``b``, each direction ``delay_s`` late, a fraction ``loss`` dropped."""

    def __init__(self, a: str, b: str, *, delay_s: float, loss: float, seed: int) -> None:
        if not delay_s >= 0:
            raise ValueError(f"delay_s must be >= 0 seconds, got {delay_s!r}")
        if not 0 <= loss < 1:
            raise ValueError(f"loss must be a fraction in [0, 1), got {loss!r}")
        self.names = (a, b)
        self.delay_s, self.loss = float(delay_s), float(loss)
        # One generator per direction: the losses one way do not shift with the traffic the other way.
        self.rngs = {a: random.Random(f"{seed}:{a}>{b}"), b: random.Random(f"{seed}:{b}>{a}")}
        self.sockets = {name: self._open(name) for name in self.names}
        self.queues: dict[str, deque[tuple[float, bytes]]] = {name: deque() for name in self.names}
        self.counts = Counts()
        self.stopped = False

    @staticmethod
    def _open(name: str) -> socket.socket:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        sock.bind((name, ETH_P_ALL))
        sock.setblocking(False)
        for forced, plain, size in (
            (SO_RCVBUFFORCE, socket.SO_RCVBUF, RECEIVE_BUFFER),
            (SO_SNDBUFFORCE, socket.SO_SNDBUF, SEND_BUFFER),
        ):
            try:
                sock.setsockopt(socket.SOL_SOCKET, forced, size)
            except PermissionError:
                sock.setsockopt(socket.SOL_SOCKET, plain, size)
        return sock

    def run(self) -> Counts:
        """Relay until ``stop()``; return the counts."""
        selector = selectors.DefaultSelector()
        for name, sock in self.sockets.items():
            selector.register(sock, selectors.EVENT_READ, name)
        try:
            while not self.stopped:
                wait = self._send_due()
                for key, _ in selector.select(min(wait, 0.2)):
                    self._read(key.data)
        finally:
            selector.close()
            for sock in self.sockets.values():
                sock.close()
        return self.counts

    def stop(self, *_: Any) -> None:
        """End ``run`` at its next wake-up (a signal handler)."""
        self.stopped = True

    def _read(self, source: str) -> None:
        a, b = self.names
        target = b if source == a else a
        direction = "A>B" if source == a else "B>A"
        sock, queue, rng = self.sockets[source], self.queues[target], self.rngs[source]
        for _ in range(DRAIN):
            try:
                frame, address = sock.recvfrom(MAX_FRAME)
            except BlockingIOError:
                return
            except OSError as exc:  # the link was taken down: its socket reports it once
                if exc.errno in (errno.ENETDOWN, errno.ENXIO):
                    return
                raise
            if address[2] == socket.PACKET_OUTGOING:  # our own writes to this side, seen again
                continue
            if self.loss and rng.random() < self.loss:
                self.counts.add("dropped", direction)
                continue
            queue.append((time.monotonic() + self.delay_s, frame))

    def _send_due(self) -> float:
        """Write every frame whose time has come; return seconds until the next one (or 1)."""
        now = time.monotonic()
        wait = 1.0
        a, _ = self.names
        for target, queue in self.queues.items():
            direction = "B>A" if target == a else "A>B"
            sock = self.sockets[target]
            while queue and queue[0][0] <= now:
                try:
                    sock.send(queue[0][1])
                    self.counts.add("forwarded", direction)
                except BlockingIOError:  # the socket's own buffer is full: hold the frame, as a link's queue would
                    break
                except OSError:  # the token bucket's queue is full, or the link is down: the frame is lost
                    self.counts.add("refused", direction)
                queue.popleft()
            if queue:
                due_in = queue[0][0] - now
                wait = min(wait, due_in if due_in > 0 else BACKLOG_RETRY_S)
        return max(wait, 0.0)


#: The relay's nice value, set while it is still root: a wire must not wait behind the workloads it carries.
RELAY_NICE = -10


def raise_priority() -> None:
    """Run ahead of the devices' processes (nice ``RELAY_NICE``; root only, kept after the drop).

    A relay copies every frame in Python, so on a loaded host its link runs
    as slow as the relay is scheduled: at load 10 on this 2-core host an 8 MB
    transfer over a 100 Mbit/s link took 1.34 s against the rate's 0.64 s. A
    real wire does not share the boards' CPUs; at nice -10 the relay gets about
    nine times a device process's share of a busy core.
    """
    os.setpriority(os.PRIO_PROCESS, 0, RELAY_NICE)


def drop_privileges(user: str) -> None:
    """Become ``UID:GID`` for good (no supplementary groups): the open sockets stay, root's rights go."""
    uid, _, gid = user.partition(":")
    if not (uid.isdigit() and gid.isdigit()) or int(uid) == 0:
        raise ValueError(f"--user must be UID:GID of an account other than root, got {user!r}")
    os.setgroups([])
    os.setresgid(int(gid), int(gid), int(gid))
    os.setresuid(int(uid), int(uid), int(uid))


def main(argv: list[str] | None = None) -> int:
    """Command line: relay between two interfaces until stopped; print the counts."""
    parser = argparse.ArgumentParser(prog="python -m edgelab.cluster.link_relay", description=__doc__.splitlines()[0])
    parser.add_argument("a", help="one interface (the device's link)")
    parser.add_argument("b", help="the other interface (towards the bridge)")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="one-way delay added in each direction")
    parser.add_argument("--loss", type=float, default=0.0, help="fraction of frames dropped in each direction")
    parser.add_argument("--seed", type=int, default=0, help="seeds the loss draws")
    parser.add_argument(
        "--user", default=None, metavar="UID:GID", help="run as this user once the packet sockets are open"
    )
    args = parser.parse_args(argv)
    try:
        wire = Wire(args.a, args.b, delay_s=args.delay_ms / 1000, loss=args.loss, seed=args.seed)
        if os.geteuid() == 0:
            raise_priority()
        if args.user is not None:
            drop_privileges(args.user)
    except (ValueError, OSError) as exc:
        print(f"link_relay: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, wire.stop)
    signal.signal(signal.SIGINT, wire.stop)
    print(
        f"link_relay: {args.a} <-> {args.b}, delay {args.delay_ms} ms, loss {args.loss}, seed {args.seed}", flush=True
    )
    counts = wire.run()
    print(f"link_relay: forwarded {counts.forwarded}, dropped {counts.dropped}, refused {counts.refused}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
