"""The work a device does for a run: load its shard, train a round, evaluate, monitor itself, probe a step's memory.

The client calls these directly (``device_call``: on Dask's comms or the
device's round channel) or as Dask tasks.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgelab.common import process_memory
from edgelab.common.wire import Packed
from edgelab.emulation.monitor import DEFAULT_INTERVAL_S, ResourceSampler
from edgelab.models.builtin import ModelSpec, crop, prepare_images
from edgelab.models.user import UserModelPayload
from edgelab.runtime import round_wire
from edgelab.runtime.plugin import DeviceRuntime, current
from edgelab.runtime.protocol import ShardMissingError, Weights, call_name_of, device_call, nbytes
from edgelab.runtime.steps import Shard, set_weights, train_steps, warm


def load_shard(
    run_id: str,
    spec: ModelSpec,
    x: np.ndarray,
    y: np.ndarray,
    batch_size: int,
    steps: int,
    user_model: UserModelPayload | None = None,
) -> dict[str, Any]:
    """Keep a shard of the training data on this device (sent by the master) and warm its model.

    The model is traced on real batches of the run's size now, the way its
    rounds will run them (``steps`` batches per round), so that no round's
    measured CPU time holds tracing. A user's model (``edgelab.models.user``)
    comes with its first shard: its architecture and initial weights.
    """
    rt = current()
    if user_model is not None:
        rt.user_models = {user_model.digest: user_model}  # one at a time, as the models themselves
    rt.bytes_received += int(x.nbytes + y.nbytes)
    shard = shard_of(spec, x, y)
    cpu0 = time.process_time()
    warm(rt.model(spec), shard, batch_size, steps)
    rt.shards[run_id] = shard
    return {
        "device": rt.device,
        "samples": len(shard),
        "bytes": int(x.nbytes + y.nbytes),
        "warm_cpu_s": time.process_time() - cpu0,
    }


def shard_of(spec: ModelSpec, x: np.ndarray, y: np.ndarray) -> Shard:
    """A device's training data as its rounds read it.

    The images as the model takes them (a built-in ResNet's crop of CIFAR's, made once here, not per batch),
    the labels as int64, and whether ``spec``'s model wants a channel axis the images lack.
    """
    images = np.ascontiguousarray(crop(spec.name, np.asarray(x)))
    return Shard(
        x=images,
        y=np.asarray(y, dtype=np.int64),
        channel_axis=np.shape(prepare_images(spec.name, images[:1]))[1:] != images.shape[1:],
    )


def release(run_id: str, dask_worker: Any = None) -> None:
    """Forget a run's shard and all-reduce state (run with ``client.run``)."""
    rt = current(dask_worker)
    rt.shards.pop(run_id, None)
    rt.peers.pop(run_id, None)
    rt.residuals.pop(run_id, None)


def initial_weights(spec: ModelSpec) -> Weights:
    """The seeded initial weights every device and the parameter server start from."""
    rt = current()
    rt.model(spec)
    weights = [w.copy() for w in rt.initial[spec]]
    rt.bytes_sent += nbytes(weights)
    return weights


@dataclass(frozen=True)
class RoundTask:
    """One device's part of one synchronization round."""

    run_id: str
    spec: ModelSpec
    device_index: int
    round: int
    epoch: int
    first_step: int  # index of the first batch of this round within the epoch
    steps: int  # batches to train before synchronizing (per local epoch)
    batch_size: int
    seed: int
    local_epochs: int = 1  # epochs of this round, from ``epoch`` on (federated averaging's E)
    # Compresses the delta before it is sent back (edgelab.sync.compress); None sends it whole.
    compressor: Any = None


@device_call
def train_round(task: RoundTask, weights: Weights) -> tuple[Any, dict[str, Any]]:
    """Train ``task.steps`` batches from ``weights`` and return the weight delta.

    Returns
    -------
    delta, record
        ``delta`` = local weights after training minus ``weights`` (``Packed``:
        it arrives as the list of arrays, in one buffer), or what
        ``task.compressor`` made of it (plus the residual it kept, under error
        feedback: a device that restarts loses it, as a board would); ``record``
        holds what was measured: CPU seconds of this worker process during the
        compute (all threads), host wall seconds, bytes in and out, samples,
        loss and the memory working set above the framework baseline; and, under
        ``"monitor"``, the resource samples taken since the previous round.
    """
    rt = current()
    shard = rt.shards.get(task.run_id)
    if shard is None:
        raise ShardMissingError(rt.device, task.run_id)
    received = nbytes(weights)
    rt.bytes_received += received
    pulled = weights  # what the round started from (several local epochs reassign ``weights``)
    model = rt.model(task.spec)

    # Each device walks its data in its own seeded order, fresh every epoch.
    start = task.first_step * task.batch_size
    stop = start + task.steps * task.batch_size
    orders = [shard.order(task.seed, task.device_index, task.epoch + e)[start:stop] for e in range(task.local_epochs)]

    # The step's peak, not the RSS after it: the activations are freed once the step ends.
    peak_measured = process_memory.reset_peak()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    delta, loss = train_steps(model, shard, weights, orders[0], task.steps, task.batch_size)
    step = delta
    for order in orders[1:]:  # each local epoch from where the last ended; the delta is their sum
        weights = [w + d for w, d in zip(weights, step.arrays, strict=True)]
        step, loss = train_steps(model, shard, weights, order, task.steps, task.batch_size)
        delta = Packed([d + m for d, m in zip(delta.arrays, step.arrays, strict=True)])
    cpu_s, wall_s = time.process_time() - cpu0, time.perf_counter() - wall0
    peak = process_memory.peak_bytes() if peak_measured else None

    dense = nbytes(delta.arrays)
    sent = dense
    if task.compressor is not None:
        cpu_c = time.process_time()
        delta = _compress(rt, task, delta.arrays, loss, pulled)
        cpu_s += time.process_time() - cpu_c  # the device compresses: its time is the device's
        sent = serialized_bytes(delta)
    rt.bytes_sent += sent
    rss = process_memory.rss_bytes()
    measured = {
        "pid": os.getpid(),
        "samples": int(sum(len(o) for o in orders)),
        "cpu_s": cpu_s,
        "wall_s": wall_s,
        "bytes_received": received,
        "bytes_sent": sent,
        "bytes_sent_dense": dense,
        "loss": loss,
        "rss_bytes": rss,
        "working_set_bytes": rss - rt.baseline_rss,
        "peak_working_set_bytes": (peak - rt.baseline_rss) if peak is not None else None,
    }
    # The monitor's samples travel with the result, so a device that dies loses only its last round's.
    monitor = rt.sampler.drain() if rt.sampler is not None else []
    return delta, round_wire.record(task, rt.device, measured, monitor)


def _compress(rt: DeviceRuntime, task: RoundTask, delta: Weights, loss: float, weights: Weights) -> Any:
    """The round's delta as ``task.compressor`` sends it, with the state it keeps on this device.

    ``loss`` is the round's training loss and ``weights`` what it started from (eSGD chooses by them).
    """
    from edgelab.sync.compress import compress_with_feedback

    rng = np.random.default_rng([task.seed, task.device_index, task.round])
    kept = rt.residuals.get(task.run_id)
    # A round run again (a device was lost mid-round) starts from the residual its first try started from:
    # folding the cut try's leftover in as well would count it twice.
    start = None if kept is None else kept[1] if kept[0] == task.round else kept[2]
    encoded, after = compress_with_feedback(task.compressor, delta, start, rng, loss=loss, weights=weights)
    rt.residuals[task.run_id] = (task.round, start, after)
    return encoded


def serialized_bytes(value: Any) -> int:
    """Bytes ``value`` takes on the wire, as Dask serializes it (header and frames)."""
    from distributed.protocol import serialize_bytelist

    return int(sum(memoryview(frame).nbytes for frame in serialize_bytelist(value)))


def evaluate(spec: ModelSpec, weights: Weights, x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """Accuracy and loss of ``weights`` on held-out data, computed on this device."""
    model = current().model(spec)
    set_weights(model, weights)
    result = model.evaluate(prepare_images(spec.name, x), y, batch_size=1000, verbose=0, return_dict=True)
    return {"accuracy": float(result["accuracy"]), "loss": float(result["loss"])}


def start_monitor(interval_s: float = DEFAULT_INTERVAL_S, dask_worker: Any = None) -> str:
    """Start (or restart) this device's resource sampler (run with ``client.run``)."""
    rt = current(dask_worker)
    if rt.sampler is not None:
        rt.sampler.stop()
    rt.sampler = ResourceSampler(counters=rt.counters, interval_s=interval_s)
    rt.sampler.start()
    return rt.device


def stop_monitor(dask_worker: Any = None) -> list[dict[str, float]]:
    """Stop this device's sampler and return its samples (run with ``client.run``)."""
    rt = current(dask_worker)
    if rt.sampler is None:
        return []
    samples = rt.sampler.stop()
    rt.sampler = None
    return samples


@device_call
def echo(*values: Any) -> tuple[Any, ...]:
    """The values, sent back: what a direct call costs without its work (``benchmarks/bench_sync.py``)."""
    return values


#: What a client may call on a device directly, without the scheduler (``DeviceRuntime._direct``).


def probe_memory(model: str | UserModelPayload, batch_size: int, timeout_s: float = 600.0) -> dict[str, float]:
    """What a training step of ``model`` needs on this device, measured in a fresh process (``memory_probe``).

    ``model``: a built-in model's name, or a user's model's payload (handed to the process as a file).
    """
    import json
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory(prefix="edgelab-probe-") as tmp:
        arg = model
        if isinstance(model, UserModelPayload):
            arg = str(Path(tmp) / "model.npz")
            model.save(Path(arg))
        out = subprocess.run(
            [sys.executable, "-m", "edgelab.emulation.memory_probe", arg, str(batch_size)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=True,
        )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


# Its calls travel in the lean form on round channels.
assert call_name_of(train_round) == round_wire.ROUND_FN  # noqa: S101 - a rename must move the wire's name too
# Rounds of one model, batch size and number of batches cost alike; others need not (DeviceRuntime.run).
train_round.cost_key = lambda task, _weights: (task.spec, task.steps, task.batch_size)  # type: ignore[attr-defined]
