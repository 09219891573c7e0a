"""Gradient compressors: what a device sends instead of its fp32 round delta.

Papers (surveyed by Qiao et al., qiao/method-grad-quant and qiao/method-grad-sparsify):

* ``sign``, ``sign_ef``: 1-bit SGD, Seide et al., "1-Bit Stochastic Gradient
  Descent and its Application to Data-Parallel Distributed Training of Speech
  DNNs", Interspeech 2014 (with error feedback: the quantisation error is kept
  and added to the next delta). Here one scale per tensor, the mean |x|.
* ``terngrad``, ``terngrad_noclip``: Wen et al., "TernGrad: Ternary Gradients to
  Reduce Communication in Distributed Deep Learning", NeurIPS 2017
  (arxiv.org/abs/1705.07878): per-layer scale max|x| after clipping at 2.5
  standard deviations, stochastic ternary {-1, 0, 1}, unbiased for the clipped x.
* ``qsgd:<s>``: Alistarh et al., "QSGD: Communication-Efficient SGD via Gradient
  Quantization and Encoding", NeurIPS 2017 (arxiv.org/abs/1610.02132):
  stochastic rounding of |x| / ||x||_2 to s levels, unbiased.
* ``topk:<density>``: Lin et al., "Deep Gradient Compression", ICLR 2018
  (arxiv.org/abs/1712.01887): the largest |x| per tensor are sent, the rest
  accumulates on the device until it is large enough (no momentum correction).
* ``dgc:<density>:<momentum>``: the same, with DGC's momentum correction and
  momentum factor masking (Lin et al., section 3.2): the device keeps a
  velocity ``u <- m u + delta`` and accumulates ``v <- v + u``; top-k of ``v``
  is sent, and both ``u`` and ``v`` are cleared where it was. Momentum then
  lives on the devices: leave the server's ``momentum`` at 0.
* ``esgd:<density>``: a rule after eSGD (Tao and Li, "eSGD: Communication
  Efficient Distributed Deep Learning on the Edge", HotEdge 2018) as the
  survey describes it: while the device's training loss falls it sends the
  same coordinates as last round; when the loss does not fall it draws new
  ones at random with probability proportional to |weight|. The values are
  the accumulated delta there; the rest stays in the residual.
* ``randomk:<density>``: Wangni et al., "Gradient Sparsification for
  Communication-Efficient Distributed Optimization", NeurIPS 2018
  (arxiv.org/abs/1710.09854): each coordinate kept with probability p and
  rescaled by 1/p, unbiased.

Every compressor works on a list of arrays (one per layer) and returns an
``Encoded`` holding only compact numpy arrays: packed bits, bit-packed levels,
int32 indices with float32 values, or a seed the receiver regenerates the mask
from. Its pickled size is what crosses the wire.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgelab.common.errors import ConfigError

NDArrays = list[np.ndarray]

#: Specs ``build_compressor`` accepts (``<s>``: levels, an int in [1, 256]; ``<density>``: a fraction in (0, 1]).
COMPRESSORS = (
    "none",
    "sign",
    "sign_ef",
    "terngrad",
    "terngrad_noclip",
    "qsgd:<s>",
    "topk:<density>",
    "dgc:<density>:<momentum>",
    "esgd:<density>",
    "randomk:<density>",
)
#: TernGrad clips each layer at this many standard deviations before ternarizing (Wen et al., section 3.3).
TERNGRAD_CLIP_STD = 2.5
#: QSGD's largest number of levels.
QSGD_MAX_LEVELS = 256


@dataclass(frozen=True, eq=False)  # arrays have no single truth value: compare fields yourself
class Encoded:
    """What crosses the wire for one delta: compact arrays and scalars, nothing else.

    ``arrays`` cover all tensors at once (the tensors flattened and concatenated
    in order); ``shapes`` and ``dtypes`` let the receiver cut them apart again.
    """

    name: str  # the compressor's spec
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    arrays: tuple[np.ndarray, ...]
    seed: int = 0  # random-k: the receiver regenerates the kept mask from it

    @property
    def sizes(self) -> list[int]:
        """Elements of each tensor."""
        return [math.prod(s) for s in self.shapes]

    @property
    def payload_bytes(self) -> int:
        """Bytes of the arrays alone (the pickle adds a few hundred bytes of framing)."""
        return sum(a.nbytes for a in self.arrays)


class Compressor(ABC):
    """Encodes a device's round delta into fewer bytes, and decodes it on the server."""

    #: the spec it was built from, e.g. ``"qsgd:4"``
    name: str
    #: whether the device keeps a residual (what was not sent) and adds it to the next delta
    error_feedback: bool

    @abstractmethod
    def encode(self, arrays: NDArrays, rng: np.random.Generator) -> Encoded:
        """Compress ``arrays``; random choices are drawn from ``rng`` only."""

    @abstractmethod
    def decode(self, encoded: Encoded) -> NDArrays:
        """The arrays ``encoded`` stands for: the shapes and dtypes ``encode`` was given."""

    def compress(
        self,
        delta: NDArrays,
        state: Any,
        rng: np.random.Generator,
        *,
        loss: float | None = None,
        weights: NDArrays | None = None,
    ) -> tuple[Encoded, Any]:
        """Encode a round's ``delta`` from the ``state`` the device kept; the encoded update and the new state.

        The state is the residual under error feedback: ``delta + residual -
        decode(encoded)``, what was meant but not sent (``None`` without error
        feedback). ``loss`` (the round's training loss) and ``weights`` (what the
        round started from) are for compressors whose choice depends on them.
        """
        if not self.error_feedback:
            return self.encode(list(delta), rng), None
        target = list(delta) if state is None else [d + r for d, r in zip(delta, state, strict=True)]
        encoded = self.encode(target, rng)
        return encoded, [t - d for t, d in zip(target, self.decode(encoded), strict=True)]


def build_compressor(spec: str) -> Compressor | None:
    """The compressor a spec names, or ``None`` for ``"none"``.

    Examples
    --------
    >>> build_compressor("qsgd:4").name, build_compressor("topk:0.01").error_feedback
    ('qsgd:4', True)
    """
    allowed = (
        f"one of {', '.join(COMPRESSORS)} (qsgd levels an integer in [1, {QSGD_MAX_LEVELS}], "
        "density a number in (0, 1], momentum a number in [0, 1))"
    )
    if not isinstance(spec, str):
        raise ConfigError("compressor", spec, allowed)
    kind, _, arg = spec.partition(":")
    if not arg and spec in ("none", "sign", "sign_ef", "terngrad", "terngrad_noclip"):
        if spec == "none":
            return None
        if kind.startswith("sign"):
            return Sign(error_feedback=spec == "sign_ef")
        return TernGrad(clip=spec == "terngrad")
    if kind == "qsgd" and arg.isdigit() and 1 <= int(arg) <= QSGD_MAX_LEVELS:
        return QSGD(levels=int(arg))
    if kind in ("topk", "randomk", "dgc", "esgd"):
        arg, _, second = arg.partition(":") if kind == "dgc" else (arg, "", "0")
        density, momentum = _number(arg), _number(second)
        if 0.0 < density <= 1.0 and 0.0 <= momentum < 1.0:
            if kind == "dgc":
                return DGC(density=density, momentum=momentum, spec=spec)
            if kind == "esgd":
                return ESGD(density=density, spec=spec)
            return TopK(density=density, spec=spec) if kind == "topk" else RandomK(density=density, spec=spec)
    raise ConfigError("compressor", spec, allowed)


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def compress_with_feedback(
    c: Compressor,
    delta: NDArrays,
    residual: Any,
    rng: np.random.Generator,
    *,
    loss: float | None = None,
    weights: NDArrays | None = None,
) -> tuple[Encoded, Any]:
    """Encode ``delta`` from the state ``c`` keeps on the device (``Compressor.compress``); it and the new state.

    Under plain error feedback the state is the residual, ``delta + residual -
    decode(encoded)``: what was meant but not sent; ``None`` when ``c`` keeps
    none. DGC's is (accumulation, velocity), eSGD's (residual, coordinates, loss).
    """
    return c.compress(delta, residual, rng, loss=loss, weights=weights)


def _flatten(arrays: NDArrays) -> tuple[np.ndarray, list[slice]]:
    """All tensors as one float64 vector, and the slice of it each tensor is."""
    ends = np.cumsum([np.size(a) for a in arrays], dtype=int).tolist()
    flat = np.concatenate([np.asarray(a, np.float64).ravel() for a in arrays]) if arrays else np.zeros(0)
    return flat, [slice(end - np.size(a), end) for a, end in zip(arrays, ends, strict=True)]


def _unflatten(flat: np.ndarray, encoded: Encoded) -> NDArrays:
    out, start = [], 0
    for shape, dtype, size in zip(encoded.shapes, encoded.dtypes, encoded.sizes, strict=True):
        out.append(flat[start : start + size].reshape(shape).astype(dtype))
        start += size
    return out


def _header(arrays: NDArrays) -> tuple[tuple[tuple[int, ...], ...], tuple[str, ...]]:
    return tuple(np.shape(a) for a in arrays), tuple(np.asarray(a).dtype.str for a in arrays)


def _per_tensor(values: np.ndarray, sizes: list[int]) -> np.ndarray:
    """One value per tensor repeated over its elements."""
    return np.repeat(values.astype(np.float64), sizes)


def _pack_uint(values: np.ndarray, bits: int) -> np.ndarray:
    """Unsigned ints below 2**bits, ``bits`` bits each, packed into bytes (little end first)."""
    planes = (values[:, None] >> np.arange(bits, dtype=values.dtype)) & 1  # (n, bits)
    return np.packbits(planes.astype(np.uint8).ravel())


def _unpack_uint(packed: np.ndarray, bits: int, n: int) -> np.ndarray:
    planes = np.unpackbits(packed, count=n * bits).reshape(n, bits).astype(np.int64)
    return planes @ (1 << np.arange(bits, dtype=np.int64))


class Sign(Compressor):
    """1-bit: the sign of each element (packed 8 per byte) and one scale per tensor, its mean |x|."""

    def __init__(self, *, error_feedback: bool) -> None:
        self.error_feedback = error_feedback
        self.name = "sign_ef" if error_feedback else "sign"

    def encode(self, arrays: NDArrays, rng: np.random.Generator) -> Encoded:
        """Compress ``arrays`` (see the class docstring)."""
        flat, parts = _flatten(arrays)
        scales = np.array([np.abs(flat[p]).mean() if p.stop > p.start else 0.0 for p in parts])
        return Encoded(self.name, *_header(arrays), (np.packbits(flat >= 0), scales.astype(np.float32)))

    def decode(self, encoded: Encoded) -> NDArrays:
        """The arrays ``encoded`` stands for."""
        bits, scales = encoded.arrays
        signs = np.unpackbits(bits, count=sum(encoded.sizes)).astype(np.float64) * 2 - 1
        return _unflatten(signs * _per_tensor(scales, encoded.sizes), encoded)


class TernGrad(Compressor):
    """Ternary {-1, 0, 1} (2 bits each, 4 per byte: code = t + 1) and one scale per tensor.

    Element i is sent as sign(x_i) with probability |x_i| / s, else 0, where
    s = max|x| of the tensor after clipping it at ``TERNGRAD_CLIP_STD``
    standard deviations (``clip=False``: no clipping, so unbiased for x itself).
    """

    error_feedback = False

    def __init__(self, *, clip: bool) -> None:
        self.clip = clip
        self.name = "terngrad" if clip else "terngrad_noclip"

    def encode(self, arrays: NDArrays, rng: np.random.Generator) -> Encoded:
        """Compress ``arrays`` (see the class docstring)."""
        x, parts = _flatten(arrays)
        scales = np.zeros(len(parts))
        for i, part in enumerate(parts):
            if part.stop == part.start:
                continue
            if self.clip:
                bound = TERNGRAD_CLIP_STD * x[part].std()
                x[part] = np.clip(x[part], -bound, bound)
            scales[i] = np.abs(x[part]).max()
        scale = _per_tensor(scales, [p.stop - p.start for p in parts])
        prob = np.divide(np.abs(x), scale, out=np.zeros_like(x), where=scale > 0)
        ternary = np.sign(x) * (rng.random(x.size) < prob)
        codes = _pack_uint((ternary + 1).astype(np.uint8), 2)
        return Encoded(self.name, *_header(arrays), (codes, scales.astype(np.float32)))

    def decode(self, encoded: Encoded) -> NDArrays:
        """The arrays ``encoded`` stands for."""
        codes, scales = encoded.arrays
        ternary = _unpack_uint(codes, 2, sum(encoded.sizes)) - 1
        return _unflatten(ternary * _per_tensor(scales, encoded.sizes), encoded)


class QSGD(Compressor):
    """QSGD with ``levels`` levels: per element a level in [0, s] and a sign, one L2 norm per tensor.

    Levels are bit-packed at ``levels.bit_length()`` bits each (s = 1: 1 bit,
    s = 4: 3 bits, s = 16: 5 bits), signs 1 bit each. The paper's Elias coding
    of the levels would be smaller still for small s; the bytes here are an
    upper bound on QSGD's.
    """

    error_feedback = False

    def __init__(self, *, levels: int) -> None:
        self.levels = levels
        self.bits = levels.bit_length()
        self.name = f"qsgd:{levels}"

    def encode(self, arrays: NDArrays, rng: np.random.Generator) -> Encoded:
        """Compress ``arrays`` (see the class docstring)."""
        flat, parts = _flatten(arrays)
        norms = np.array([np.linalg.norm(flat[p]) for p in parts])
        norm = _per_tensor(norms, [p.stop - p.start for p in parts])
        scaled = np.divide(np.abs(flat), norm, out=np.zeros_like(flat), where=norm > 0) * self.levels
        lower = np.floor(scaled)
        # round up with probability equal to the remainder: unbiased
        level = (lower + (rng.random(flat.size) < scaled - lower)).astype(np.uint16)
        payload = (_pack_uint(level, self.bits), np.packbits(flat < 0), norms.astype(np.float32))
        return Encoded(self.name, *_header(arrays), payload)

    def decode(self, encoded: Encoded) -> NDArrays:
        """The arrays ``encoded`` stands for."""
        levels, negative, norms = encoded.arrays
        n = sum(encoded.sizes)
        sign = 1.0 - 2.0 * np.unpackbits(negative, count=n)
        magnitude = _unpack_uint(levels, self.bits, n) / self.levels
        return _unflatten(sign * magnitude * _per_tensor(norms, encoded.sizes), encoded)


def kept_count(density: float, size: int) -> int:
    """Elements top-k keeps of a tensor: ceil(density * size), at least 1 (none of an empty tensor)."""
    return min(size, max(1, math.ceil(density * size))) if size else 0


class TopK(Compressor):
    """The ``kept_count`` largest |x| of each tensor: int32 indices into all tensors and float32 values.

    The rest stays in the device's residual (error feedback), DGC's local
    accumulation.
    """

    error_feedback = True

    def __init__(self, *, density: float, spec: str) -> None:
        self.density = density
        self.name = spec

    def encode(self, arrays: NDArrays, rng: np.random.Generator) -> Encoded:
        """Compress ``arrays`` (see the class docstring)."""
        flat, parts = _flatten(arrays)
        kept = []
        for part in parts:
            k = kept_count(self.density, part.stop - part.start)
            if k:
                kept.append(part.start + np.sort(np.argpartition(-np.abs(flat[part]), k - 1)[:k]))
        index = np.concatenate(kept).astype(np.int32) if kept else np.zeros(0, np.int32)
        return Encoded(self.name, *_header(arrays), (index, flat[index].astype(np.float32)))

    def decode(self, encoded: Encoded) -> NDArrays:
        """The arrays ``encoded`` stands for."""
        index, values = encoded.arrays
        flat = np.zeros(sum(encoded.sizes))
        flat[index] = values
        return _unflatten(flat, encoded)


class RandomK(Compressor):
    """Each element kept with probability p = density and sent as x / p: unbiased, no residual.

    Only the kept values (float32) and a seed travel: the receiver regenerates
    the mask from the seed.
    """

    error_feedback = False

    def __init__(self, *, density: float, spec: str) -> None:
        self.density = density
        self.name = spec

    def _mask(self, seed: int, n: int) -> np.ndarray:
        return np.random.default_rng(seed).random(n) < self.density

    def encode(self, arrays: NDArrays, rng: np.random.Generator) -> Encoded:
        """Compress ``arrays`` (see the class docstring)."""
        flat, _ = _flatten(arrays)
        seed = int(rng.integers(2**63))
        kept = flat[self._mask(seed, flat.size)] / self.density
        return Encoded(self.name, *_header(arrays), (kept.astype(np.float32),), seed=seed)

    def decode(self, encoded: Encoded) -> NDArrays:
        """The arrays ``encoded`` stands for."""
        flat = np.zeros(sum(encoded.sizes))
        flat[self._mask(encoded.seed, flat.size)] = encoded.arrays[0]
        return _unflatten(flat, encoded)


class DGC(TopK):
    """Top-k with Deep Gradient Compression's momentum correction and momentum factor masking.

    Its residual is ``(v, u)``: the accumulation not sent yet and the device's
    velocity. Each round ``u <- m u + delta``, ``v <- v + u``; top-k of ``v``
    is sent and both are zeroed where it was (DGC's masking: the stale
    momentum of a sent coordinate is not pushed again). At ``m = 0`` it is
    ``TopK`` with its residual, bit for bit.
    """

    def __init__(self, *, density: float, momentum: float, spec: str) -> None:
        super().__init__(density=density, spec=spec)
        self.momentum = momentum

    def compress(
        self,
        delta: NDArrays,
        state: Any,
        rng: np.random.Generator,
        *,
        loss: float | None = None,
        weights: NDArrays | None = None,
    ) -> tuple[Encoded, tuple[NDArrays, NDArrays]]:
        """Encode this round's ``delta`` from the kept ``(v, u)``; the encoded update and the new pair."""
        if state is None:
            velocity = list(delta)
            target = list(delta)
        else:
            accumulated, previous = state
            velocity = [self.momentum * u + d for u, d in zip(previous, delta, strict=True)]
            target = [v + u for v, u in zip(accumulated, velocity, strict=True)]
        encoded = self.encode(target, rng)
        sent = np.zeros(sum(encoded.sizes), bool)
        sent[encoded.arrays[0]] = True
        masks = _unflatten(sent.astype(np.float64), encoded)
        kept = [np.where(m != 0, 0, t).astype(t.dtype) for m, t in zip(masks, target, strict=True)]
        velocity = [np.where(m != 0, 0, u).astype(u.dtype) for m, u in zip(masks, velocity, strict=True)]
        return encoded, (kept, velocity)


class ESGD(TopK):
    """eSGD's choice of coordinates as the survey describes it (module docstring), top-k's sizes and encoding.

    Its state is ``(residual, index, loss)``: what was not sent, the
    coordinates of the last round and that round's training loss. Each tensor
    keeps ``kept_count`` coordinates, as top-k; a new draw is without
    replacement, with probability proportional to ``|w| + tiny`` (a weight of 0
    can still be drawn).
    """

    def compress(
        self,
        delta: NDArrays,
        state: Any,
        rng: np.random.Generator,
        *,
        loss: float | None = None,
        weights: NDArrays | None = None,
    ) -> tuple[Encoded, tuple[NDArrays, np.ndarray, float | None]]:
        """Encode this round's ``delta`` (see the class docstring); ``weights`` are needed to draw anew."""
        residual, index, last_loss = state if state is not None else (None, None, None)
        target = list(delta) if residual is None else [d + r for d, r in zip(delta, residual, strict=True)]
        falling = index is not None and loss is not None and last_loss is not None and loss < last_loss
        if not falling:
            if weights is None:
                raise ValueError("esgd draws coordinates by |weight|: compress() needs the round's weights")
            index = self._draw(weights, rng)
        flat, _ = _flatten(target)
        encoded = Encoded(self.name, *_header(target), (index, flat[index].astype(np.float32)))
        return encoded, ([t - d for t, d in zip(target, self.decode(encoded), strict=True)], index, loss)

    def _draw(self, weights: NDArrays, rng: np.random.Generator) -> np.ndarray:
        flat, parts = _flatten(weights)
        kept = []
        for part in parts:
            k = kept_count(self.density, part.stop - part.start)
            if k:
                p = np.abs(flat[part]) + 1e-12
                kept.append(
                    part.start + np.sort(rng.choice(part.stop - part.start, size=k, replace=False, p=p / p.sum()))
                )
        return np.concatenate(kept).astype(np.int32) if kept else np.zeros(0, np.int32)
