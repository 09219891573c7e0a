"""Measure what one training step of a model needs, in a fresh process: ``python -m edgelab.emulation.memory_probe``.

A worker that has trained other models holds their memory (TensorFlow's
allocator keeps what it freed), so the peak of a step there says little about
the step itself. A fresh process does: the framework is imported, its RSS is
the baseline, the model is built and a first step traced, the peak counter is
reset (``/proc/self/clear_refs``), and a second step's peak RSS above the
baseline is the need: the model, its optimizer, the traced step and the
activations of one batch. Run on the device (``edgelab.runtime.tasks.probe_memory``),
with the device's own thread settings.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def measure(model: str, batch_size: int) -> dict[str, float]:
    """Peak RSS of a training step of ``model`` at ``batch_size`` above the framework's baseline, in MB.

    ``model``: a built-in model's name, or the path of a user's model's payload (``UserModelPayload.save``).
    """
    import numpy as np
    import tensorflow  # noqa: F401 - the framework's own footprint is the baseline

    from edgelab.common import process_memory
    from edgelab.models.builtin import ModelSpec, build_model
    from edgelab.models.user import UserModel, UserModelPayload

    baseline = process_memory.rss_bytes()
    if model.endswith(".npz"):
        payload = UserModelPayload.load(Path(model))
        net = build_model(ModelSpec(UserModel("probe", payload.digest, ())), payload)
    else:
        net = build_model(ModelSpec(model))
    x = np.zeros((batch_size, *net.input_shape[1:]), np.float32)
    y = np.zeros((batch_size,), np.int64)
    net.train_on_batch(x, y)  # traces the step: a one-off cost, not the step's
    if not process_memory.reset_peak():
        raise OSError("this system cannot reset the peak RSS counter (/proc/self/clear_refs)")
    net.train_on_batch(x, y)
    peak = process_memory.peak_bytes() or process_memory.rss_bytes()
    return {"baseline_mb": baseline / 2**20, "need_mb": (peak - baseline) / 2**20}


if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1], int(sys.argv[2]))))
