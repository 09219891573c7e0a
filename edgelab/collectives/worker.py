"""The schedules of ``edgelab.collectives.schedules`` run between Dask workers, over their own comms.

Each device worker gets a ``CollectivesPlugin`` (a ``WorkerPlugin``: per-worker
state made in ``setup``, a comm handler registered the way
``edgelab.runtime.plugin.DeviceRuntime`` registers its own). A worker device computes
a real gradient of the LeNet-MLP on its MNIST shard with TensorFlow and keeps
it; then the client starts the schedule on every device at once
(``client.run`` of a coroutine, on each worker's event loop). In each step a
device sends its pieces straight to their destinations' ``COLLECTIVE_OP``
handlers (Dask's worker-to-worker rpc, TCP on loopback), waits for the pieces
the step sends it, and applies them in the schedule's order, exactly as
``collectives.simulate`` does. Every send is counted where it is made: its
payload bytes (the array's) and its wire bytes (Dask's serialized frames,
``serialize_bytelist``: header plus payload).

``CollectiveRun.exchange_compressed`` runs the peer-to-peer pattern again with
each worker's gradient compressed before it is sent (``edgelab.collectives.compressed_p2p``):
the ``Encoded`` crosses the same handler, and its bytes are counted the same way.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from distributed import WorkerPlugin, get_worker
from distributed.protocol import serialize_bytelist, to_serialize

from edgelab.cluster.device_cluster import DeviceCluster, device_resource, scheduler_workers
from edgelab.collectives import compressed_p2p
from edgelab.collectives.schedules import Schedule, apply_piece
from edgelab.models.builtin import ModelSpec
from edgelab.models.user import UserModel, UserModelPayload
from edgelab.sync.compress import build_compressor

PLUGIN_NAME = "edgelab-collectives"
#: The worker handler a peer's piece of a schedule reaches.
COLLECTIVE_OP = "edgelab_collective"
#: How long a device waits for a step's pieces before it gives the schedule up.
STEP_TIMEOUT_S = 60.0


@dataclass
class _Run:
    """One device's part of a run: its gradient, its buffers in the schedule running, pieces received."""

    gradient: np.ndarray | None = None
    buffers: dict[str, np.ndarray] = field(default_factory=dict)
    inbox: dict[tuple[str, int, int], np.ndarray] = field(default_factory=dict)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class CollectivesPlugin(WorkerPlugin):
    """Per-worker state of collective runs, and the handler peers send pieces to."""

    name: str = PLUGIN_NAME
    runs: dict[str, _Run] = field(default_factory=dict)
    models: dict[ModelSpec, Any] = field(default_factory=dict)

    def setup(self, worker: Any) -> None:  # noqa: D102 - WorkerPlugin hook
        self.worker = worker
        worker.handlers[COLLECTIVE_OP] = self._receive

    def teardown(self, worker: Any) -> None:  # noqa: D102 - WorkerPlugin hook
        worker.handlers.pop(COLLECTIVE_OP, None)
        self.runs.clear()
        self.models.clear()

    async def _receive(self, run_id: str, key: tuple[str, int, int], data: Any) -> str:
        run = self.runs.setdefault(run_id, _Run())
        run.inbox[tuple(key)] = data  # type: ignore[index]
        run.arrived.set()
        return "OK"


def _plugin(worker: Any = None) -> CollectivesPlugin:
    plugin = (worker or get_worker()).plugins.get(PLUGIN_NAME)
    if plugin is None:
        raise RuntimeError("edgelab collectives plugin is not installed on this worker")
    return plugin  # type: ignore[no-any-return]


# ------------------------------------------------------------- on devices ----


def gradient(
    run_id: str, spec: ModelSpec, x: np.ndarray, y: np.ndarray, payload: UserModelPayload | None = None
) -> dict[str, Any]:
    """A task: this device's gradient of the mean loss on its shard, flattened; kept for the run's schedules.

    A user's model (``spec.name`` a ``UserModel``) comes with its ``payload`` and is differentiated with its own loss.
    """
    import tensorflow as tf

    from edgelab.models.builtin import build_model, prepare_images

    plugin = _plugin()
    if spec not in plugin.models:
        plugin.models[spec] = build_model(spec, payload)  # seeded, or the user's weights: the same on every device
    model = plugin.models[spec]
    loss_fn = model.loss if payload is not None else tf.keras.losses.sparse_categorical_crossentropy
    start = time.process_time()
    with tf.GradientTape() as tape:
        out = model(prepare_images(spec.name, x), training=True)
        loss = tf.reduce_mean(loss_fn(y, out))
    grads = tape.gradient(loss, model.trainable_variables)
    flat = np.concatenate([g.numpy().ravel() for g in grads])  # (parameters,) float32
    cpu_s = time.process_time() - start
    plugin.runs.setdefault(run_id, _Run()).gradient = flat
    sizes = [int(np.size(g)) for g in grads]  # the layers, for compressors that work per layer
    return {"gradient": flat, "loss": float(loss), "cpu_s": cpu_s, "sizes": sizes}


async def _execute(
    run_id: str, execution: str, schedule: Schedule, addresses: list[str], dask_worker: Any = None
) -> list[dict[str, Any]]:
    """Run this device's part of ``schedule``; a record per piece it sent (step, destination, bytes)."""
    plugin = _plugin(dask_worker)
    me = addresses.index(dask_worker.address)
    run = plugin.runs.setdefault(run_id, _Run())
    run.buffers = {} if me >= schedule.workers else {"x": run.gradient.copy()}  # type: ignore[union-attr]
    records = []
    for t, step in enumerate(schedule.steps):
        # Every send reads its source as the step found it (the simulator's rule).
        outgoing = {k: run.buffers[s.what.source][s.what.span(schedule.length)].copy()
                    for k, s in enumerate(step) if s.src == me}  # fmt: skip
        sends = []
        for k, payload in outgoing.items():
            dst = step[k].dst
            if dst == me:
                continue
            wire = sum(memoryview(frame).nbytes for frame in serialize_bytelist(payload))
            records.append({"step": t, "src": me, "dst": dst, "payload_bytes": payload.nbytes, "wire_bytes": wire})
            rpc = dask_worker.rpc(addresses[dst])
            sends.append(getattr(rpc, COLLECTIVE_OP)(run_id=run_id, key=(execution, t, k), data=to_serialize(payload)))
        expected = [(execution, t, k) for k, s in enumerate(step) if s.dst == me and s.src != me]
        await asyncio.gather(*sends)
        await _wait(run, expected, f"device {me}, step {t} of {schedule.pattern}")
        for k, s in enumerate(step):
            if s.dst == me:
                payload = outgoing[k] if s.src == me else run.inbox.pop((execution, t, k))
                apply_piece(run.buffers, s.what, payload, schedule.length)
    return records


async def _exchange_compressed(
    run_id: str, execution: str, spec: str, sizes: list[int], seed: int, addresses: list[str], dask_worker: Any = None
) -> dict[str, Any]:
    """Peer-to-peer with this worker's gradient compressed: a record per send, and the codec's CPU seconds."""
    plugin = _plugin(dask_worker)
    me, n = addresses.index(dask_worker.address), len(addresses)
    run = plugin.runs.setdefault(run_id, _Run())
    compressor = build_compressor(spec)
    start = time.process_time()
    encoded = compressed_p2p.encode(compressor, run.gradient, sizes, seed=seed, worker=me)  # type: ignore[arg-type]
    encode_s = time.process_time() - start
    wire = compressed_p2p.wire_bytes(encoded)
    records, sends = [], []
    for dst in range(n):
        if dst == me:
            continue
        records.append({"step": 0, "src": me, "dst": dst, "payload_bytes": encoded.payload_bytes, "wire_bytes": wire})
        rpc = dask_worker.rpc(addresses[dst])
        sends.append(getattr(rpc, COLLECTIVE_OP)(run_id=run_id, key=(execution, 0, me), data=to_serialize(encoded)))
    await asyncio.gather(*sends)
    await _wait(run, [(execution, 0, src) for src in range(n) if src != me], f"device {me}, p2p with {spec}")
    start = time.process_time()
    received = [encoded if src == me else run.inbox.pop((execution, 0, src)) for src in range(n)]
    run.buffers = {"sum": compressed_p2p.sum_in_order([compressed_p2p.decode(compressor, e) for e in received])}
    return {"sends": records, "encode_cpu_s": encode_s, "decode_cpu_s": time.process_time() - start}


async def _wait(run: _Run, keys: list[tuple[str, int, int]], where: str) -> None:
    deadline = asyncio.get_running_loop().time() + STEP_TIMEOUT_S
    while any(k not in run.inbox for k in keys):
        run.arrived.clear()
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            missing = [k for k in keys if k not in run.inbox]
            raise TimeoutError(f"{where}: pieces {missing} did not arrive within {STEP_TIMEOUT_S} s")
        try:
            await asyncio.wait_for(run.arrived.wait(), remaining)
        except TimeoutError:
            continue


def _result(run_id: str, name: str, dask_worker: Any = None) -> np.ndarray | None:
    """The buffer ``name`` this device holds after a schedule (None on a device without it)."""
    return _plugin(dask_worker).runs[run_id].buffers.get(name)


def _has_plugin(dask_worker: Any = None) -> bool:
    return PLUGIN_NAME in dask_worker.plugins


def _release(run_id: str, dask_worker: Any = None) -> None:
    _plugin(dask_worker).runs.pop(run_id, None)


# ------------------------------------------------------------- on the client ----


@dataclass
class Execution:
    """One run of a schedule on the devices: what was sent, how long it took here, what each worker holds."""

    sends: pd.DataFrame  # a row per piece sent: step, src, dst, payload_bytes, wire_bytes
    host_s: float
    results: list[np.ndarray]  # each worker's result buffer
    codec: pd.DataFrame | None = None  # compressed exchanges: a row per worker, encode_cpu_s and decode_cpu_s

    def step_bytes(self, devices: int, column: str = "payload_bytes") -> list[np.ndarray]:
        """Measured bytes per directed link, one (devices, devices) matrix per step."""
        steps = int(self.sends["step"].max()) + 1 if len(self.sends) else 0
        out = [np.zeros((devices, devices), dtype=np.int64) for _ in range(steps)]
        for row in self.sends.itertuples():
            out[row.step][row.src, row.dst] += getattr(row, column)
        return out


class CollectiveRun:
    """A run on the cluster: the plugin installed, each worker's gradient computed and held on its device."""

    def __init__(self, cluster: DeviceCluster, workers: list[str], servers: list[str]) -> None:
        self.cluster, self.workers, self.servers = cluster, list(workers), list(servers)
        self.run_id = uuid.uuid4().hex[:12]
        client = cluster.client
        # Registered once per cluster: registering again would tear down the models the devices built.
        if not all(client.run(_has_plugin).values()):
            client.register_plugin(CollectivesPlugin(), name=PLUGIN_NAME)
        self.addresses = {w["name"]: a for a, w in scheduler_workers(client).items()}

    def gradients(self, spec: ModelSpec, shards: list[tuple[np.ndarray, np.ndarray]]) -> list[dict[str, Any]]:
        """Each worker's gradient on its shard, computed on its device (kept there for the schedules)."""
        client = self.cluster.client
        payload = spec.name.payload if isinstance(spec.name, UserModel) else None  # a reference pickles light
        futures = [
            client.submit(gradient, self.run_id, spec, x, y, payload, resources={device_resource(d): 1}, pure=False)
            for d, (x, y) in zip(self.workers, shards, strict=True)
        ]
        return client.gather(futures)  # type: ignore[no-any-return]

    def execute(self, schedule: Schedule) -> Execution:
        """Run ``schedule`` on the devices once (workers first, then servers, as the schedule numbers them)."""
        devices = [*self.workers, *self.servers[: schedule.servers]]
        addresses = [self.addresses[d] for d in devices]
        client = self.cluster.client
        execution = uuid.uuid4().hex[:8]
        start = time.perf_counter()
        sent = client.run(_execute, self.run_id, execution, schedule, addresses, workers=addresses)
        host_s = time.perf_counter() - start
        results = client.run(_result, self.run_id, schedule.result, workers=addresses[: schedule.workers])
        sends = pd.DataFrame([r for a in addresses for r in sent[a]],
                             columns=["step", "src", "dst", "payload_bytes", "wire_bytes"])  # fmt: skip
        return Execution(sends, host_s, [results[a] for a in addresses[: schedule.workers]])

    def exchange_compressed(self, spec: str, sizes: list[int], seed: int) -> Execution:
        """Peer-to-peer among the workers once, each gradient sent compressed by ``spec``; results are the sums."""
        addresses = [self.addresses[d] for d in self.workers]
        client = self.cluster.client
        execution = uuid.uuid4().hex[:8]
        start = time.perf_counter()
        out = client.run(_exchange_compressed, self.run_id, execution, spec, list(sizes), seed, addresses,
                         workers=addresses)  # fmt: skip
        host_s = time.perf_counter() - start
        results = client.run(_result, self.run_id, "sum", workers=addresses)
        sends = pd.DataFrame([r for a in addresses for r in out[a]["sends"]],
                             columns=["step", "src", "dst", "payload_bytes", "wire_bytes"])  # fmt: skip
        codec = pd.DataFrame([{"worker": i, "encode_cpu_s": out[a]["encode_cpu_s"],
                               "decode_cpu_s": out[a]["decode_cpu_s"]} for i, a in enumerate(addresses)])  # fmt: skip
        return Execution(sends, host_s, [results[a] for a in addresses], codec)

    def close(self) -> None:
        """Drop the run's state on every device."""
        self.cluster.client.run(_release, self.run_id)
