"""A parameter server's round end in one pass: the last deltas summed in, the mean taken, the step applied.

``RunningMean`` and ``apply_delta`` end a synchronous round in numpy passes
over the model: each of the last devices' deltas added into the float64 sums,
the sums divided into the mean (cast to float32), the mean added to the
weights. Each pass is bound by memory, not arithmetic, and they stand between
the last reply and the next round's weights (a 2-device round's two replies
come together). One compiled loop does them all for each element in turn,
with the same float operations in the same order, so the same bits: 0.09 ms
against 0.38 ms for the last delta of a LeNet-MLP's 109,386 weights on this
2-core host (``benchmarks/bench_sync.py``'s model).

numba compiles it (cached on disk) in the process that aggregates, the
client. Importing numba and loading the kernel cost that process about a
second of CPU, so ``warm_in_background`` does it on a thread of its own while
the devices load their data; rounds that end before it is ready, and
platforms without numba (a 32-bit board), take the numpy passes, which give
the same bits (``available``).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

_kernel: Any = None  # the compiled ``_fold_mean_step``, once loaded
_ready = threading.Event()
_lock = threading.Lock()
_warming: threading.Thread | None = None
_missing: ImportError | None = None


def _fold_mean_step(
    acc: np.ndarray,
    parts: tuple[np.ndarray, np.ndarray],
    part_weights: tuple[float, float],
    has_b: bool,
    divisor: float,
    weights: np.ndarray,
    scale: np.float32,
    out: np.ndarray,
) -> None:
    # Element by element what the numpy passes compute: the sums so far (``acc``; empty before the first
    # list: 0) plus each part times its weight in float64, in order (the second only if ``has_b``); divided
    # and rounded to float32 (the mean); then scaled and added in float32 (``apply_delta``). Adding 0.0
    # first or last gives the same bits.
    has_acc = acc.size > 0
    part_a, part_b = parts
    weight_a, weight_b = part_weights
    for i in range(weights.size):
        total = acc[i] if has_acc else 0.0
        total = total + np.float64(part_a[i]) * weight_a
        if has_b:
            total = total + np.float64(part_b[i]) * weight_b
        mean = np.float32(total / divisor)
        out[i] = weights[i] + (mean if scale == 1.0 else scale * mean)


def available() -> bool:
    """Whether the one-pass round end is ready in this process (numba imported, the kernel loaded)."""
    return _ready.is_set()


def warm() -> None:
    """Import numba and load (or compile) the kernel now, if not done yet; ImportError without numba."""
    global _kernel, _missing
    with _lock:
        if _ready.is_set():
            return
        if _missing is not None:
            raise _missing
        try:
            import numba
        except ImportError as exc:
            _missing = ImportError(f"the one-pass round end needs numba (pip install numba): {exc}")
            raise _missing from exc
        kernel = numba.njit(cache=True, nogil=True)(_fold_mean_step)
        # The signature every round calls it with: float32 buffers, float64 sums, Python floats.
        one = np.zeros(1, np.float32)
        kernel(np.zeros(1), (one, one), (1.0, 1.0), True, 1.0, one, np.float32(1.0), one.copy())
        _kernel = kernel
        _ready.set()


def warm_in_background() -> None:
    """Start ``warm`` on a daemon thread, once per process; without numba the numpy passes stay."""
    global _warming
    with _lock:
        if _warming is not None or _ready.is_set():
            return
        _warming = threading.Thread(target=_warm_quietly, name="edgelab-fused-warm", daemon=True)
        _warming.start()


def _warm_quietly() -> None:
    try:
        warm()
    except ImportError:
        pass  # ``available`` stays False: the numpy passes, the same bits


def fold_mean_step(
    acc: np.ndarray | None,
    parts: list[np.ndarray],
    part_weights: list[float],
    divisor: float,
    weights: np.ndarray,
    scale: float,
) -> np.ndarray:
    """``weights + scale * float32((acc + sum(part * weight)) / divisor)`` as the numpy passes round it, in one pass.

    ``acc`` (the float64 sums so far; None: none yet, 0) and one or two
    ``parts`` (float32) with their ``part_weights``, summed in in order;
    ``weights`` and the result float32. All one-dimensional, of one size.
    """
    if not 1 <= len(parts) <= 2 or len(parts) != len(part_weights):
        got = f"{len(parts)}, {len(part_weights)} weights"
        raise ValueError(f"parts must be one or two arrays with a weight each: {got}")
    named = [("weights", weights, np.float32), *((f"parts[{i}]", p, np.float32) for i, p in enumerate(parts))]
    if acc is not None:
        named.append(("acc", acc, np.float64))
    for name, array, dtype in named:
        if array.dtype != dtype or array.ndim != 1 or array.shape != weights.shape:
            raise ValueError(f"{name} must be a 1-D {np.dtype(dtype).name} array of {weights.size} elements")
    warm()
    out = np.empty(weights.shape, np.float32)
    part_b, weight_b = (parts[1], float(part_weights[1])) if len(parts) == 2 else (parts[0], 0.0)
    # numpy scales a float32 array by a Python float in float32 (NEP 50): the scale is rounded first.
    _kernel(
        acc if acc is not None else _NO_SUMS,
        (parts[0], part_b),
        (float(part_weights[0]), weight_b),
        len(parts) == 2,
        float(divisor),
        weights,
        np.float32(scale),
        out,
    )
    return out


_NO_SUMS = np.zeros(0)  # stands for the sums where there are none yet (empty: read as 0)
