"""What a device does in pipelined training: hold a stage and its optimizer, run its passes of each micro-batch.

A stage's forward keeps only its input for the micro-batch; its backward
recomputes the stage's forward under a gradient tape from that input (GPipe's
re-materialization), so no activations wait on the device between the two
passes. Under GPipe the gradients of a mini-batch's micro-batches are summed
on the device and applied once, by ``apply_update``. Under PipeDream's 1F1B
(``immediate``) each backward applies its own gradients at once, and weight
stashing keeps the weights each forward used, so its backward differentiates
the same function (``version`` in the records: the number of updates the
stage had made when the micro-batch went forward).

Each pass measures what the device did (CPU time, host wall start and end,
bytes in and out) and appends it to the records that travel with the
micro-batch. A trailing ``*after`` argument is the stage's previous pass:
Dask then runs a stage's passes in the schedule's order.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgelab.pipeline.worker import StageMissingError
from edgelab.runtime.plugin import current


@dataclass
class _TrainStage:
    model: Any
    optimizer: Any
    loss: Any  # the last stage's loss function; None elsewhere
    inputs: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)  # (step, micro-batch) -> input
    stash: dict[tuple[int, int], tuple[int, list[np.ndarray]]] = field(default_factory=dict)  # version, weights
    gradients: list[Any] | None = None  # summed over the mini-batch's micro-batches
    updates: int = 0


def load_train_stage(
    run_id: str,
    stage: str,
    config: str,
    weights: list[np.ndarray],
    learning_rate: float,
    momentum: float,
    loss: str | None,
    dask_worker: Any = None,
) -> dict[str, Any]:
    """Rebuild a stage from its Keras config and weights, with an SGD optimizer, and keep it on this device."""
    import keras

    rt = current(dask_worker)
    model = keras.Model.from_config(json.loads(config))
    model.set_weights(weights)
    optimizer = keras.optimizers.SGD(learning_rate=learning_rate, momentum=momentum)
    optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.get(loss) if loss else None
    rt.stages[(run_id, stage)] = _TrainStage(model, optimizer, loss_fn)
    received = int(sum(w.nbytes for w in weights)) + len(config)
    rt.bytes_received += received
    return {"device": rt.device, "stage": stage, "parameters": int(model.count_params()), "bytes": received}


def _held(run_id: str, stage: str) -> tuple[Any, _TrainStage]:
    rt = current()
    held = rt.stages.get((run_id, stage))
    if held is None:
        raise StageMissingError(rt.device, run_id, stage)
    return rt, held


def _record(rt: Any, kind: str, stage: str, step: int, m: int, t_start: float, cpu0: float, **sizes: int) -> dict:
    return {
        "kind": kind,
        "stage": stage,
        "step": step,
        "micro_batch": m,
        "device": rt.device,
        "pid": os.getpid(),
        "t_start": t_start,
        "t_end": time.time(),
        "cpu_s": time.process_time() - cpu0,
        **sizes,
    }


def forward(
    run_id: str, stage: str, step: int, m: int, payload: Any, stash: bool, *after: Any
) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """Micro-batch ``m``'s forward; keep its input (and with ``stash`` the weights) for its backward."""
    x, records = payload if isinstance(payload, tuple) else (payload, [])
    rt, held = _held(run_id, stage)
    t_start, cpu0 = time.time(), time.process_time()
    x = np.asarray(x, np.float32)
    held.inputs[(step, m)] = x
    if stash:
        held.stash[(step, m)] = (held.updates, [np.array(v) for v in held.model.trainable_variables])
    out = np.asarray(held.model(x, training=True), np.float32)
    rt.bytes_received += int(x.nbytes)
    rt.bytes_sent += int(out.nbytes)
    sizes = {"bytes_in": int(x.nbytes), "bytes_out": int(out.nbytes), "version": held.updates}
    return out, [*records, _record(rt, "forward", stage, step, m, t_start, cpu0, **sizes)]


def forward_loss_backward(
    run_id: str,
    stage: str,
    step: int,
    m: int,
    payload: Any,
    labels: np.ndarray,
    scale: float,
    immediate: bool,
    *after: Any,
) -> tuple[np.ndarray, list[dict[str, Any]], float]:
    """The last stage: forward, the loss (times ``scale``, this micro-batch's share of the mini-batch), backward.

    With ``immediate`` the gradients are applied at once (1F1B). Returns the
    gradient with respect to the stage's input, the records, and the
    micro-batch's mean loss.
    """
    import tensorflow as tf

    x, records = payload if isinstance(payload, tuple) else (payload, [])
    rt, held = _held(run_id, stage)
    t_start, cpu0 = time.time(), time.process_time()
    x = tf.convert_to_tensor(np.asarray(x, np.float32))
    with tf.GradientTape() as tape:
        tape.watch(x)
        # Keras' loss by name is per example: its mean over the micro-batch, as Loss objects reduce.
        loss = tf.reduce_mean(held.loss(labels, held.model(x, training=True)))
        scaled = loss * scale
    grad_x, *grads = tape.gradient(scaled, [x, *held.model.trainable_variables])
    version = held.updates
    _accumulate(held, grads)
    if immediate:
        _apply(held)
    grad_x = np.asarray(grad_x, np.float32)
    rt.bytes_received += int(x.numpy().nbytes)
    rt.bytes_sent += int(grad_x.nbytes)
    sizes = {"bytes_in": int(x.numpy().nbytes), "bytes_out": int(grad_x.nbytes), "version": version}
    return grad_x, [*records, _record(rt, "forward+backward", stage, step, m, t_start, cpu0, **sizes)], float(loss)


def backward(
    run_id: str, stage: str, step: int, m: int, payload: Any, immediate: bool, *after: Any
) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """Micro-batch ``m``'s backward through this stage, from the gradient of its output; pass the input's on.

    The stage's forward is recomputed from the kept input (re-materialization),
    with the weights its forward used when they were stashed; with
    ``immediate`` the gradients are applied to the current weights at once.
    """
    import tensorflow as tf

    grad_out, records = payload[0], payload[1]  # the last stage's triple carries its loss too
    rt, held = _held(run_id, stage)
    t_start, cpu0 = time.time(), time.process_time()
    x = tf.convert_to_tensor(held.inputs.pop((step, m)))
    variables = held.model.trainable_variables
    version, stashed = held.stash.pop((step, m), (held.updates, None))
    current = [np.array(v) for v in variables] if stashed is not None else None
    if stashed is not None:
        for v, w in zip(variables, stashed, strict=True):
            v.assign(w)
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = held.model(x, training=True)
    grad_x, *grads = tape.gradient(out, [x, *variables], output_gradients=grad_out)
    if current is not None:
        for v, w in zip(variables, current, strict=True):
            v.assign(w)
    _accumulate(held, grads)
    if immediate:
        _apply(held)
    grad_x = np.asarray(grad_x, np.float32)
    rt.bytes_received += int(np.asarray(grad_out).nbytes)
    rt.bytes_sent += int(grad_x.nbytes)
    sizes = {"bytes_in": int(np.asarray(grad_out).nbytes), "bytes_out": int(grad_x.nbytes), "version": version}
    return grad_x, [*records, _record(rt, "backward", stage, step, m, t_start, cpu0, **sizes)]


def _accumulate(held: _TrainStage, grads: list[Any]) -> None:
    if held.gradients is None:
        held.gradients = list(grads)
    else:
        held.gradients = [a + g for a, g in zip(held.gradients, grads, strict=True)]


def _apply(held: _TrainStage) -> None:
    if held.model.trainable_variables:  # a stage of weightless layers only (an input, a reshape) has none
        held.optimizer.apply_gradients(zip(held.gradients, held.model.trainable_variables, strict=True))
    held.gradients = None
    held.updates += 1


def apply_update(run_id: str, stage: str, step: int, *after: Any) -> dict[str, Any]:
    """Apply the summed gradients of mini-batch ``step`` once (``after``: the stage's last pass, for order)."""
    rt, held = _held(run_id, stage)
    t_start, cpu0 = time.time(), time.process_time()
    if held.gradients is None:
        raise RuntimeError(f"stage {stage} of run {run_id} has no gradients for step {step}")
    _apply(held)
    return _record(rt, "update", stage, step, -1, t_start, cpu0, version=held.updates)


def stage_weights(run_id: str, stage: str) -> list[np.ndarray]:
    """The stage's current weights."""
    _, held = _held(run_id, stage)
    return [np.asarray(w) for w in held.model.get_weights()]
