"""Aggregation maths in plain numpy, with no framework imports."""

from __future__ import annotations

import numpy as np

NDArrays = list[np.ndarray]


def weighted_mean(arrays: list[NDArrays], weights: list[float]) -> NDArrays:
    """Layer-wise weighted mean of several lists of arrays.

    Examples
    --------
    >>> [a.tolist() for a in weighted_mean([[np.array([0.0])], [np.array([3.0])]], [1, 2])]
    [[2.0]]
    """
    if not arrays:
        raise ValueError("arrays must not be empty")
    if len(arrays) != len(weights):
        raise ValueError(f"got {len(arrays)} arrays but {len(weights)} weights")
    total = float(sum(weights))
    if total <= 0:
        raise ValueError(f"weights must sum to > 0, got {weights!r}")
    # float64 accumulation in a fixed order keeps the result reproducible
    return [
        (sum(w * layer.astype(np.float64) for w, layer in zip(weights, layers, strict=True)) / total).astype(
            layers[0].dtype
        )
        for layers in zip(*arrays, strict=True)
    ]


def apply_delta(weights: NDArrays, delta: NDArrays, *, scale: float = 1.0) -> NDArrays:
    """``weights + scale * delta``, layer by layer."""
    if scale == 1.0:  # 1.0 * d is d, bit for bit: skip a pass over the weights
        return [(w + d).astype(w.dtype, copy=False) for w, d in zip(weights, delta, strict=True)]
    return [(w + scale * d).astype(w.dtype, copy=False) for w, d in zip(weights, delta, strict=True)]
