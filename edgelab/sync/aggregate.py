"""Aggregation maths in plain numpy, with no framework imports.

Lists of arrays that are views of flat buffers alike (``edgelab.wire.Flat``: the
weights and deltas as they travel) are worked on buffer by buffer: the same
element-wise arithmetic, so the same bits, with one numpy call per buffer.
"""

from __future__ import annotations

import numpy as np

from edgelab.wire import Flat, flat_form

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
    flat = flat_form(arrays)
    if flat is not None:  # the same element-wise maths, once per buffer instead of once per layer
        layout, buffers = flat
        return Flat(layout, tuple(_mean(list(parts), weights, total) for parts in zip(*buffers, strict=True)))
    return [_mean(list(layers), weights, total) for layers in zip(*arrays, strict=True)]


def _mean(layers: NDArrays, weights: list[float], total: float) -> np.ndarray:
    """``(0 + w0 * l0 + w1 * l1 + ...) / total`` in float64, in this order, cast back to the layers' dtype.

    The float64 accumulation in a fixed order keeps the result reproducible.
    Computed in two buffers, in place: a temporary array per operation (the
    plain expression) cost three times as long for two LeNet-MLP deltas.
    """
    acc = np.empty(layers[0].shape, np.float64)
    term = np.empty_like(acc)
    for i, (w, layer) in enumerate(zip(weights, layers, strict=True)):
        out = acc if i == 0 else term
        out[...] = layer
        out *= w
        if i == 0:
            acc += 0.0  # as sum() starts from 0: -0.0 becomes 0.0
        else:
            acc += term
    return np.divide(acc, total, out=np.empty(acc.shape, layers[0].dtype), casting="unsafe")  # as astype()


def apply_delta(weights: NDArrays, delta: NDArrays, *, scale: float = 1.0) -> NDArrays:
    """``weights + scale * delta``, layer by layer (buffer by buffer when both are ``Flat`` alike)."""
    flat = flat_form([weights, delta])
    if flat is not None:
        layout, (w_flats, d_flats) = flat
        return Flat(layout, tuple(_add(w, d, scale) for w, d in zip(w_flats, d_flats, strict=True)))
    return [_add(w, d, scale) for w, d in zip(weights, delta, strict=True)]


def _add(w: np.ndarray, d: np.ndarray, scale: float) -> np.ndarray:
    if scale == 1.0:  # 1.0 * d is d, bit for bit: skip a pass over the weights
        return (w + d).astype(w.dtype, copy=False)
    return (w + scale * d).astype(w.dtype, copy=False)
