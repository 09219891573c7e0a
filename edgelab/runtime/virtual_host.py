"""Many emulated devices in one worker process: a host for virtual devices.

A device worker normally is one device (``edgelab.runtime.plugin``). Here one
worker process hosts many: each device's shard and its compressor's residual
are kept under the device's own key (``device_key``), and a round trains the
host's devices one after another on the process's one compiled model,
swapping each device's state in. The devices' optimizer is plain SGD, which
keeps nothing between rounds, so weights, shard, residual and seed are all
there is of a device.

Each device's round is ``edgelab.runtime.tasks.train_round`` unchanged: its
CPU time is measured around its own training only (the process trains one
device at a time), so its emulated time is its own compute and link, not the
host's queue. Under a strategy that averages deltas weighted by samples the
host sends back its devices' mean and their samples, not every delta: the
server's mean of the hosts' means weighted by samples is the same mean (to
float rounding: the sums are grouped by host).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from edgelab.models.builtin import ModelSpec
from edgelab.models.user import UserModelPayload
from edgelab.runtime.plugin import current
from edgelab.runtime.protocol import Weights, device_call
from edgelab.runtime.steps import warm
from edgelab.runtime.tasks import RoundTask, shard_of, train_round
from edgelab.sync.aggregate import RunningMean


def device_key(run_id: str, index: int) -> str:
    """Where a virtual device's state lives in its host's runtime: the run's id and the device's index."""
    return f"{run_id}/{index}"


@device_call
def load_devices(
    run_id: str,
    spec: ModelSpec,
    shards: dict[int, tuple[np.ndarray, np.ndarray]],
    batch_size: int,
    steps: int,
    user_model: UserModelPayload | None = None,
) -> dict[int, dict[str, Any]]:
    """Keep each hosted device's shard (``shards``: by device index) and warm the host's one model once."""
    rt = current()
    if user_model is not None:
        rt.user_models = {user_model.digest: user_model}
    loaded: dict[int, dict[str, Any]] = {}
    warm_cpu_s = 0.0
    for index, (x, y) in shards.items():
        rt.bytes_received += int(x.nbytes + y.nbytes)
        shard = shard_of(spec, x, y)
        if not loaded:  # one model per process: traced once, on the first device's batches
            cpu0 = time.process_time()
            warm(rt.model(spec), shard, batch_size, steps)
            warm_cpu_s = time.process_time() - cpu0
        rt.shards[device_key(run_id, index)] = shard
        loaded[index] = {"host": rt.device, "samples": len(shard), "bytes": int(x.nbytes + y.nbytes)}
    for record in loaded.values():
        record["warm_cpu_s"] = warm_cpu_s / len(loaded)  # the host's one tracing, shared by its devices
    return loaded


@device_call
def train_devices(tasks: list[RoundTask], weights: Weights, mean: bool) -> tuple[Any, list[dict[str, Any]]]:
    """Train each hosted device's round (``tasks``, keyed by ``device_key``) from ``weights``, one after another.

    Returns ``(updates, records)``: with ``mean``, ``updates`` is
    ``(mean delta, samples)`` over the devices that trained on anything
    (``None`` if none did), each decoded first when the devices compress;
    without it, each device's delta as it sent it, in the order of ``tasks``.
    ``records`` are the devices' round records, each naming this host.
    """
    rt = current()
    running = RunningMean(len(tasks)) if mean else None
    deltas, records, samples = [], [], 0
    for i, task in enumerate(tasks):
        delta, record = train_round(task, weights)
        record["host"] = rt.device
        records.append(record)
        if running is None:
            deltas.append(delta)
        elif record["samples"] > 0:
            dense = delta if task.compressor is None else task.compressor.decode(delta)
            running.add(i, dense.arrays if hasattr(dense, "arrays") else dense, record["samples"])
            samples += record["samples"]
        else:
            running.skip(i)
    if running is None:
        return deltas, records
    return ((running.result(), samples) if samples else None), records


def release_devices(run_id: str, dask_worker: Any = None) -> None:
    """Forget every hosted device's state of a run (run with ``client.run``)."""
    rt = current(dask_worker)
    prefix = device_key(run_id, 0)[:-1]
    for store in (rt.shards, rt.residuals):
        for key in [k for k in store if k.startswith(prefix)]:
            store.pop(key)
