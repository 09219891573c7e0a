"""The least plumbing a synchronous parameter-server round can have: the reference beside ``bench_sync.py``'s part A.

What part A's overhead would be if edgelab were nothing but its step. Each
device is a plain process (no Dask, no nanny, no event loop) holding a shard
of the digits, with the very step an edgelab device runs
(``edgelab.runtime.steps.train_steps``: the same compiled call, gather and delta)
and one plain TCP connection to the client. A round: the client sends the
flat weights to every device (no pickle, no header), each device receives
them into the same buffer every round, trains one batch and sends back two
timings and its delta; the client receives each delta into a buffer of its
own, sums them into a float64 running mean as they arrive (the parameter
server's arithmetic, in preallocated buffers) and adds the mean to the
weights in place. No records, no memory readings, no recovery, no checks. The
devices share the host's cores under the policy edgelab's devices use
(``edgelab.cluster.device_scheduling``), so that the two differ in their plumbing alone.

Overhead = round wall minus compute, with compute as part A defines it (the
slowest device's step wall, or the devices' step CPU over the host's cores
when they outnumber them). What is left is what moving the bytes, waking the
processes and the mean cost on this host with Python at both ends: a floor
under any implementation of the round, edgelab's included.

:func:`run_bare_in_workers` runs the same devices as threads in edgelab's own
device workers: the processes a round channel's device answers in, with none
of edgelab's code on the round's path. Beside the plain processes it says
what hosting a device in a Dask worker costs a round.
"""

from __future__ import annotations

import multiprocessing
import os
import selectors
import socket
import statistics
import struct
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from raw_loopback import recv_exactly  # this folder is on the path wherever this module runs

#: A device's reply head: its step's wall and CPU seconds.
TIMES = struct.Struct("!dd")
#: Rounds before the measured ones (TensorFlow's and the sockets' first rounds).
WARMUP = 20
#: How long the devices may take to connect (spawned ones import TensorFlow first).
ACCEPT_TIMEOUT_S = 300.0


def serve(port: int, x: np.ndarray, y: np.ndarray, index: int, batch: int, seed: int, own_process: bool = True) -> None:
    """A device: connect to the client, then train one batch per weights received until it closes.

    ``own_process``: a process of its own, set up as edgelab's device workers are; else a thread in one of
    them, which already is.
    """
    if own_process:
        os.environ.update({"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1", "OMP_NUM_THREADS": "1"})
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from edgelab.cluster import device_scheduling
    from edgelab.common.wire import Flat, aligned_empty, pack
    from edgelab.models.builtin import ModelSpec
    from edgelab.runtime.plugin import DeviceRuntime
    from edgelab.runtime.steps import Shard, train_steps

    if own_process:
        device_scheduling.apply(device_scheduling.chosen())  # sharing the cores as edgelab's devices do
    model = DeviceRuntime().model(ModelSpec("mlp"))  # built and traced as a device builds it
    shard = Shard(x, y, channel_axis=False)
    layout, (flat,) = pack(model.get_weights())
    buffer = aligned_empty(flat.nbytes, np.uint8)  # as a device's channel receives: TensorFlow takes it uncopied
    weights = Flat(layout, (buffer.view(flat.dtype),))  # the arrays are views of the buffer each round refills
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        step = 0
        while recv_exactly(sock, memoryview(buffer)):
            per_epoch = len(shard) // batch
            order = shard.order(seed, index, step // per_epoch)
            start = step % per_epoch * batch
            cpu0, wall0 = time.process_time(), time.perf_counter()
            delta, _ = train_steps(model, shard, weights, order[start : start + batch], 1, batch)
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            sock.sendmsg([TIMES.pack(wall, cpu), memoryview(pack(delta.arrays)[1][0]).cast("B")])
            step += 1


def run_bare(
    n: int, x: np.ndarray, y: np.ndarray, *, rounds: int, repeats: int, batch: int = 64
) -> list[dict[str, Any]]:
    """``repeats`` runs of ``rounds`` rounds on ``n`` bare devices; per run the median round, compute and overhead.

    ``x`` (uint8 images) and ``y`` are split into ``n`` shards, one per device.
    """
    ctx = multiprocessing.get_context("spawn")
    devices: list[Any] = []

    def start(port: int) -> None:
        for i, s in _shards(n, y):
            devices.append(ctx.Process(target=serve, args=(port, x[s], y[s], i, batch, 0), daemon=True))
            devices[-1].start()

    try:
        return _connect_and_run(n, start, rounds=rounds, repeats=repeats, batch=batch)
    finally:
        for device in devices:
            device.join(30)
            if device.is_alive():
                device.kill()


def run_bare_in_workers(
    client: Any, workers: list[str], x: np.ndarray, y: np.ndarray, *, rounds: int, repeats: int, batch: int = 64
) -> list[dict[str, Any]]:
    """As :func:`run_bare`, each device a thread in one of ``workers`` (edgelab's device workers, by name).

    The same processes a round channel's device answers in (a Dask worker, its
    event loop, heartbeats and threads, its GIL, its scheduling policy) with
    none of edgelab's code on the round's path: what hosting a device in a
    Dask worker costs a round, beside :func:`run_bare`'s plain processes.
    """
    import site

    known = {str(w["name"]): a for a, w in client.scheduler_info(n_workers=-1)["workers"].items()}
    addresses = [known[name] for name in workers]
    # The workers import this module by name, from this folder.
    client.run(site.addsitedir, os.path.dirname(os.path.abspath(__file__)), workers=addresses)

    def start(port: int) -> None:
        for (i, s), address in zip(_shards(len(workers), y), addresses, strict=True):
            client.run(serve_on_thread, port, x[s], y[s], i, batch, 0, workers=[address])

    # The device threads end when their sockets close.
    return _connect_and_run(len(workers), start, rounds=rounds, repeats=repeats, batch=batch)


def serve_on_thread(port: int, x: np.ndarray, y: np.ndarray, index: int, batch: int, seed: int) -> None:
    """:func:`serve` on a daemon thread of this process (a Dask worker's, run with ``client.run``)."""
    import threading

    threading.Thread(target=serve, args=(port, x, y, index, batch, seed, False), daemon=True).start()


def _shards(n: int, y: np.ndarray) -> list[tuple[int, np.ndarray]]:
    return list(enumerate(np.array_split(np.arange(len(y)), n)))


def _connect_and_run(
    n: int, start: Callable[[int], None], *, rounds: int, repeats: int, batch: int
) -> list[dict[str, Any]]:
    """Listen, ``start(port)`` the ``n`` devices, accept them, then ``repeats`` runs of ``rounds`` rounds."""
    from edgelab.common.wire import pack
    from edgelab.models.builtin import ModelSpec, build_model

    cores = len(os.sched_getaffinity(0))
    _, (initial,) = pack(build_model(ModelSpec("mlp")).get_weights())
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(ACCEPT_TIMEOUT_S)  # a device that never connects fails the run rather than hanging it
        start(server.getsockname()[1])
        socks = [server.accept()[0] for _ in range(n)]  # in the order they connect: the shards are alike
    try:
        for sock in socks:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return [_rounds(socks, initial.copy(), rounds, batch, cores) for _ in range(repeats)]
    finally:
        for sock in socks:
            sock.close()


def _rounds(socks: list[socket.socket], weights: np.ndarray, rounds: int, batch: int, cores: int) -> dict[str, Any]:
    n = len(socks)
    replies = [np.empty(weights.size, weights.dtype) for _ in range(n)]
    heads = [bytearray(TIMES.size) for _ in range(n)]
    acc, term = np.empty(weights.size, np.float64), np.empty(weights.size, np.float64)
    mean = np.empty_like(weights)
    walls, computes = [], []
    with selectors.DefaultSelector() as selector:
        for i, sock in enumerate(socks):
            selector.register(sock, selectors.EVENT_READ, i)
        for r in range(WARMUP + rounds):
            t0 = time.perf_counter()
            out = memoryview(weights).cast("B")
            for sock in socks:
                sock.sendall(out)
            arrived: set[int] = set()
            folded, times = 0, [(0.0, 0.0)] * n
            while folded < n:
                for key, _ in selector.select():
                    i = key.data
                    recv_exactly(socks[i], memoryview(heads[i]))
                    recv_exactly(socks[i], memoryview(replies[i]).cast("B"))
                    times[i] = TIMES.unpack(heads[i])
                    arrived.add(i)
                    while folded in arrived:  # in device order, as edgelab's running mean sums
                        if folded == 0:
                            np.multiply(replies[0], float(batch), out=acc, dtype=np.float64)
                        else:
                            np.multiply(replies[folded], float(batch), out=term, dtype=np.float64)
                            acc += term
                        folded += 1
            np.divide(acc, float(batch * n), out=mean, casting="unsafe")
            weights += mean
            wall = time.perf_counter() - t0
            if r >= WARMUP:
                walls.append(wall)
                computes.append(max(max(t[0] for t in times), sum(t[1] for t in times) / cores))
    overheads = [w - c for w, c in zip(walls, computes, strict=True)]
    return {
        "devices": n,
        "rounds": rounds,
        "round_ms": 1e3 * statistics.median(walls),
        "compute_ms": 1e3 * statistics.median(computes),
        "overhead_ms": 1e3 * statistics.median(overheads),
    }
