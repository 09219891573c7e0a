"""Aggregation maths in plain numpy, with no framework imports.

Lists of arrays that are views of flat buffers alike (``edgelab.common.wire.Flat``: the
weights and deltas as they travel) are worked on buffer by buffer: the same
element-wise arithmetic, so the same bits, with one numpy call per buffer.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from edgelab.common.wire import Flat, flat_form
from edgelab.sync import fused

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
    running = RunningMean(len(arrays))
    for i, (layers, weight) in enumerate(zip(arrays, weights, strict=True)):
        running.add(i, layers, weight)
    return running.result()


class RunningMean:
    """``weighted_mean`` of ``n`` lists of arrays handed over one by one, in any order, folded in as they come.

    Each list is folded in as soon as every list before it has been: the
    same float64 sum in the same order as ``weighted_mean``, so the same bits,
    but most of the work is done while later lists are still on their way (a
    parameter server's mean of the updates that have arrived, while the last
    device still trains). The last two are kept until the result is asked for,
    and ``added_to`` sums them in with the step in one pass. A list with
    nothing to count (``skip``) leaves the mean.

    Examples
    --------
    >>> running = RunningMean(3)
    >>> running.add(2, [np.array([6.0])], 1)  # kept until 0 and 1 are in
    >>> running.skip(1)
    >>> running.add(0, [np.array([0.0])], 2)
    >>> [a.tolist() for a in running.result()]
    [[2.0]]
    """

    def __init__(self, n: int, *, recycle: RunningMean | None = None) -> None:
        self.n = n
        # Sums kept from a running mean that is done: summing into warm memory rather than fresh
        # saved a LeNet-MLP round's first fold a third of its 0.2 ms on this 2-core host.
        self._spare = recycle._give_up_buffers() if recycle is not None else []
        self._gave_up = False
        self._waiting: dict[int, tuple[NDArrays, float] | None] = {}
        self._next = 0  # the index folded in next
        #: how many lists were summed in so far (skipped ones not counted)
        self.folded = 0
        self._total: float = 0  # summed in index order from 0, as sum() does
        self._acc: list[np.ndarray] | None = None
        self._term: list[np.ndarray] = []
        self._dtypes: list[np.dtype] = []
        self._layout: Any = None  # a Flat's layout, worked on buffer by buffer; None: layer by layer
        # While every weight so far is this same power of two, the sums are kept divided by it (``_fold``).
        self._scale: float | None = None
        self._layers: list[tuple[int, ...]] | None = None  # every list's layer shapes, as the first had them
        self._pending: list[tuple[NDArrays, float]] = []  # the last two lists, not summed in yet (``_hand_over``)

    def add(self, index: int, arrays: NDArrays, weight: float) -> None:
        """Hand over list ``index`` (0 <= index < n) and its weight."""
        self._hand_over(index, (arrays, weight))

    def skip(self, index: int) -> None:
        """List ``index`` has nothing to count."""
        self._hand_over(index, None)

    def _hand_over(self, index: int, item: tuple[NDArrays, float] | None) -> None:
        if self._gave_up:
            raise ValueError("this running mean gave its sums to the next one: it takes no more lists")
        if not 0 <= index < self.n or index < self._next or index in self._waiting:
            raise ValueError(f"index={index} is not one still expected of 0..{self.n - 1}")
        self._waiting[index] = item
        while self._next in self._waiting:
            ready = self._waiting.pop(self._next)
            self._next += 1
            if ready is None:
                continue
            self._check_layers(ready[0])
            self._total += ready[1]
            self.folded += 1
            if self._next > self.n - 2:
                # One of the last two: kept until the result is asked for, which may sum them in with the
                # step in one pass (``added_to``). The two replies of a 2-device round come together.
                self._pending.append(ready)
            else:
                self._fold(*ready)

    def _check_layers(self, arrays: NDArrays) -> None:
        layers = [a.shape for a in arrays]
        if self._layers is None:
            self._layers = layers
        elif layers != self._layers:
            raise ValueError("the lists of arrays do not have the same layers")

    def _fold(self, arrays: NDArrays, weight: float) -> None:
        # Equal weights that are a power of two (a batch of 64 on every device) are summed without them:
        # scaling by a power of two is exact and commutes with every rounding of the sum and of the final
        # division (no float64 overflow or underflow from float32 parts), so ``w * sum(l_i)`` is
        # ``sum(w * l_i)`` to the bit, at one pass over the sums a list instead of two.
        if self._acc is None:  # the first: ``(0 + w0 * l0)``, as sum() starts from 0 (-0.0 becomes 0.0)
            self._layout = arrays.layout if isinstance(arrays, Flat) else None
            parts = arrays.flats if isinstance(arrays, Flat) else list(arrays)
            self._dtypes = [part.dtype for part in parts]
            self._acc = self._buffers([part.shape for part in parts])
            self._term = self._buffers([part.shape for part in parts])
            self._scale = weight if _power_of_two(weight) and _narrow(parts) else None
            for acc, part in zip(self._acc, parts, strict=True):
                if self._scale is not None:
                    np.add(part, 0.0, out=acc, dtype=np.float64)  # the part cast up, plus 0
                else:
                    np.multiply(part, weight, out=acc, dtype=np.float64)  # the part cast up, then scaled
                    acc += 0.0
            return
        parts = self._checked_parts(arrays, weight)
        if self._scale is not None:
            for acc, part in zip(self._acc, parts, strict=True):
                np.add(acc, part, out=acc)
            return
        # In two buffers, in place, two passes (cast and scale in one): a temporary array per
        # operation (the plain expression) cost three times as long for two LeNet-MLP deltas.
        for acc, term, part in zip(self._acc, self._term, parts, strict=True):
            np.multiply(part, weight, out=term, dtype=np.float64)
            acc += term

    def _checked_parts(self, arrays: NDArrays, weight: float) -> NDArrays:
        """A list's parts as the sums are kept, checked; the sums made true ones if it breaks their scale."""
        parts = self._parts(arrays)
        if len(parts) != len(self._acc) or any(p.shape != a.shape for p, a in zip(parts, self._acc, strict=True)):
            raise ValueError("the lists of arrays do not have the same layers")
        if self._scale is not None and (weight != self._scale or not _narrow(parts)):
            for acc in self._acc:
                acc *= self._scale  # the true sums, exactly: from here on each list is scaled as it comes
            self._scale = None
        return parts

    def _fold_pending(self) -> None:
        pending, self._pending = self._pending, []
        for item in pending:
            self._fold(*item)

    def _buffers(self, shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
        """float64 arrays of ``shapes``: spare ones where they fit, else new."""
        spare = self._spare.pop(0) if self._spare else []
        if [a.shape for a in spare] == shapes:
            return spare
        return [np.empty(shape, np.float64) for shape in shapes]

    def _give_up_buffers(self) -> list[list[np.ndarray]]:
        """The sums' buffers, for another running mean; this one can give no result from then on."""
        self._gave_up = True
        buffers = [b for b in (self._acc, self._term) if b]
        self._acc, self._term, self._pending = None, [], []
        return buffers

    def _parts(self, arrays: NDArrays) -> NDArrays:
        """``arrays`` as the sums are kept: flat buffers while every list is a ``Flat`` alike, else layer by layer."""
        if self._layout is not None:
            if isinstance(arrays, Flat) and arrays.layout == self._layout:
                return list(arrays.flats)
            # A list of another form: the sums so far, seen layer by layer (the same elements, the same bits).
            self._acc = list(Flat(self._layout, tuple(self._acc)))
            self._term = list(Flat(self._layout, tuple(self._term)))
            self._dtypes = [np.dtype(dtype) for dtype, _, _ in self._layout]
            self._layout = None
        return list(arrays)

    def result(self) -> NDArrays:
        """The weighted mean, cast back to the first list's dtypes (a ``Flat`` if the lists were)."""
        self._check_complete()
        self._fold_pending()
        divisor = self._divisor(self._scale)
        means = tuple(
            np.divide(acc, divisor, out=np.empty(acc.shape, dtype), casting="unsafe")  # as astype()
            for acc, dtype in zip(self._acc, self._dtypes, strict=True)
        )
        return Flat(self._layout, means) if self._layout is not None else list(means)

    def added_to(self, weights: NDArrays, *, scale: float = 1.0) -> NDArrays:
        """``apply_delta(weights, self.result(), scale=scale)``, bit for bit; in one pass where it can.

        Where ``weights`` and the lists not yet summed in (the last two) are
        float32 ``Flat`` buffers alike, summing them in, the mean and the step
        are one compiled loop (``edgelab.sync.fused``): a round's end with one
        pass over the model instead of four.
        """
        self._check_complete()
        plan = self._one_pass(weights)
        if plan is None:
            return apply_delta(weights, self.result(), scale=scale)
        part_weights, divisor = plan
        parts = [arrays.flats for arrays, _ in self._pending]
        accs = self._acc if self._acc is not None else [None] * len(weights.flats)
        steps = tuple(
            fused.fold_mean_step(acc, [p[i] for p in parts], part_weights, divisor, w, scale)
            for i, (acc, w) in enumerate(zip(accs, weights.flats, strict=True))
        )
        return Flat(weights.layout, steps)

    def _one_pass(self, weights: NDArrays) -> tuple[list[float], float] | None:
        """The lists' weights and the divisor of a one-pass end as the numpy passes would round it; None: none here."""
        if not self._pending or not fused.available() or not isinstance(weights, Flat):
            return None
        if any(not isinstance(a, Flat) or a.layout != weights.layout for a, _ in self._pending):
            return None
        if any(f.dtype != np.float32 for f in weights.flats):
            return None
        if self._acc is not None and self._layout != weights.layout:  # sums kept layer by layer
            return None
        part_weights = [weight for _, weight in self._pending]
        # As ``_fold`` would: the sums kept divided by a common power of two while every weight is it.
        common = part_weights[0] if self._acc is None and _power_of_two(part_weights[0]) else self._scale
        if common is not None and any(w != common for w in part_weights):
            if self._acc is not None:
                return None  # the kept sums made true ones mid-way: left to the numpy passes (rare)
            common = None  # ``(0 + l0) * w0`` is ``0 + l0 * w0``, to the bit: the true sums from the start
        return ([1.0] * len(part_weights) if common is not None else part_weights), self._divisor(common)

    def _check_complete(self) -> None:
        if self._gave_up:
            raise ValueError("this running mean gave its sums to the next one: take its result before that")
        if self._next < self.n:
            raise ValueError(f"lists {sorted(set(range(self._next, self.n)) - set(self._waiting))} never came")
        if not self.folded or float(self._total) <= 0:
            raise ValueError(f"weights must sum to > 0, got {self._total!r}")

    def _divisor(self, common: float | None) -> float:
        # Sums kept divided by the common weight: divided by the count, the very quotient of the true sums by the total.
        total = float(self._total)
        return total / common if common is not None else total


def _power_of_two(weight: float) -> bool:
    return bool(weight > 0) and math.isfinite(weight) and math.frexp(weight)[0] == 0.5


def _narrow(parts: NDArrays) -> bool:
    """Whether each part is at most 32 bits an element: scaled by any weight, it stays far inside float64's range."""
    return all(part.dtype.itemsize <= 4 for part in parts)


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
