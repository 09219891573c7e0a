"""What a device worker does in a pipeline: hold its stage, run micro-batches through it.

A stage (a slice of a model's layers, or a whole model for the single-device
and ensemble baselines) arrives once as its Keras config and numpy weights,
is rebuilt and traced on the device, and is kept in the device's runtime
(``edgelab.runtime.plugin.DeviceRuntime.stages``) until the run is released. Each
micro-batch task measures what the device did: the CPU time of its process
and, within it, of its computing threads (``edgelab.common.compute_cpu``), host
wall start and end, and the bytes it received and passed on. Activations travel
worker to worker with their records, and only the last stage's come back.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgelab.common import process_memory
from edgelab.common.compute_cpu import compute_cpu_ns
from edgelab.runtime.plugin import current
from edgelab.runtime.protocol import StateMissingError


class StageMissingError(StateMissingError):
    """A device holds no such stage: its worker restarted since the stage was loaded."""

    def __init__(self, device: str, run_id: str, stage: str) -> None:
        super().__init__(device, run_id, stage)
        self.device, self.run_id, self.stage = device, run_id, stage

    def __str__(self) -> str:
        return f"device {self.device} holds no stage {self.stage} of run {self.run_id}; its worker restarted"


@dataclass
class _Stage:
    model: Any
    predict: Any  # a traced function for any batch size


def load_stage(
    run_id: str, stage: str, config: str, weights: list[np.ndarray], micro_batch: int, dask_worker: Any = None
) -> dict[str, Any]:
    """Rebuild a stage from its Keras config and weights, trace it, and keep it on this device.

    Parameters
    ----------
    run_id, stage
        Which run and which stage (``"stage-1"``, ``"member-0"``, ``"whole"``).
    config
        ``json.dumps(model.get_config())`` of the stage's functional model.
    weights
        Its weights, as ``model.get_weights()`` gives them.
    micro_batch
        Micro-batch size the stream will send; the stage is traced on it now, so
        no streamed micro-batch pays for tracing in its measured time.

    Returns
    -------
    dict
        device, stage, parameters, bytes received and the CPU seconds the load took.
    """
    import keras
    import tensorflow as tf

    rt = current(dask_worker)
    cpu0 = time.process_time()
    model = keras.Model.from_config(json.loads(config))
    model.set_weights(weights)
    shape = tuple(model.input_shape[1:])
    # One trace serves every batch size (the stream's last micro-batch may be short).
    predict = tf.function(lambda x: model(x, training=False), input_signature=[tf.TensorSpec((None, *shape))])
    for size in (micro_batch, 1):
        predict(np.zeros((size, *shape), np.float32))
    received = int(sum(w.nbytes for w in weights)) + len(config)
    rt.bytes_received += received
    rt.stages[(run_id, stage)] = _Stage(model, predict)
    return {
        "device": rt.device,
        "stage": stage,
        "parameters": int(model.count_params()),
        "bytes": received,
        "load_cpu_s": time.process_time() - cpu0,
        "working_set_bytes": process_memory.rss_bytes() - rt.baseline_rss,  # as the baseline was read
    }


def run_stage(run_id: str, stage: str, micro_batch: int, payload: Any) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """Run one micro-batch through this device's stage and pass the activations on.

    ``payload`` is the micro-batch (from the master) or the previous stage's
    ``(activations, records)``. The records of a micro-batch travel with its
    data, so a device that dies later loses none of what earlier stages measured.
    """
    x, records = payload if isinstance(payload, tuple) else (payload, [])
    rt = current()
    held = rt.stages.get((run_id, stage))
    if held is None:
        raise StageMissingError(rt.device, run_id, stage)
    t_start, cpu0, compute0 = time.time(), time.process_time(), compute_cpu_ns()
    out = held.predict(np.asarray(x, np.float32)).numpy()  # (B, ...) activations, float32
    cpu_s, compute1, t_end = time.process_time() - cpu0, compute_cpu_ns(), time.time()
    rt.bytes_received += int(x.nbytes)
    rt.bytes_sent += int(out.nbytes)
    record = {
        "stage": stage,
        "micro_batch": micro_batch,
        "images": int(x.shape[0]),
        "device": rt.device,
        "pid": os.getpid(),
        "t_start": t_start,
        "t_end": t_end,
        "cpu_s": cpu_s,
        # The computing threads' share of cpu_s (the rest: the worker's comms meanwhile).
        "compute_cpu_s": cpu_s if compute0 is None or compute1 is None else (compute1 - compute0) / 1e9,
        "bytes_in": int(x.nbytes),
        "bytes_out": int(out.nbytes),
    }
    return out, [*records, record]


def cpu_so_far() -> dict[str, float]:
    """The device's CPU seconds so far: its process's (all threads) and its event loop's (run with ``client.run``).

    A Dask worker's event loop, on the process's main thread, does its comms: taking inputs in and handing
    outputs on, with their TLS and framing. Read on another thread (a Dask that ran it elsewhere),
    ``event_loop_s`` is NaN.
    """
    on_loop = threading.current_thread() is threading.main_thread()
    return {"process_s": time.process_time(), "event_loop_s": time.thread_time() if on_loop else float("nan")}


def release_run(run_id: str, dask_worker: Any = None) -> int:
    """Forget a run's stages on this device; how many it held (run with ``client.run``)."""
    rt = current(dask_worker)
    held = [key for key in rt.stages if key[0] == run_id]
    for key in held:
        del rt.stages[key]
    return len(held)
