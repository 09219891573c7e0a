"""Peer-to-peer exchange of compressed gradients: the remedy qiao/fig3-4b names (l.252).

Paper: Qiao et al. (l.252): peer-to-peer "can remove the communication
bottleneck between workers and parameter servers but also increase traffic
between workers. Therefore, parameter compression [...] [is] proposed to reduce
the traffic". The compressors are those of ``edgelab.sync.compress``
(qiao/method-grad-quant, qiao/method-grad-sparsify).

Every worker encodes its gradient once (per layer, as the Sync-SGD runs do),
sends the same ``Encoded`` to each of the other N-1 workers, decodes all N
encodings (its own too, so every worker sums the same values), sums them in
worker order and divides by N: every worker holds the same bits, the mean of the
decoded gradients. ``simulate`` does the same in numpy; the devices run it in
``edgelab.collectives.worker``.

The defaults: ``topk:0.01``, the density qiao/method-grad-sparsify judges (int32
index and float32 value per kept element), and ``qsgd:127``, the honest 8-bit
quantiser: 127 levels take 7 bits and the sign 1, so 8 bits an element
(``qsgd:255`` would take 9), plus one float32 norm per layer.

Each worker draws from its own generator, ``default_rng([seed, worker])``, made
fresh for every exchange: repeated iterations send the same bytes. Top-k's
residual (error feedback) is what the device would carry to its next training
step; one exchange has none, so it is dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgelab.common.errors import ConfigError
from edgelab.sync.compress import COMPRESSORS, Compressor, Encoded, build_compressor

#: top-k at method-grad-sparsify's judged density, and the 8-bit QSGD (7-bit level and a sign bit).
DEFAULT_COMPRESSORS = ("topk:0.01", "qsgd:127")


def check_compressors(specs: Sequence[str]) -> tuple[str, ...]:
    """``specs`` as a tuple, each a compressor of ``edgelab.sync.compress`` other than ``"none"`` (no repeats).

    Raises
    ------
    ConfigError
        Naming ``compressors`` and the value, before any cluster work.
    """
    allowed = f"a list of distinct compressor specs among {', '.join(c for c in COMPRESSORS if c != 'none')}"
    specs = tuple(specs)
    if len(set(specs)) != len(specs):
        raise ConfigError("compressors", specs, allowed)
    for spec in specs:
        try:
            compressor = build_compressor(spec)
        except ConfigError:
            compressor = None
        if compressor is None:
            raise ConfigError("compressors", specs, allowed)
    return specs


def layers(vector: np.ndarray, sizes: Sequence[int]) -> list[np.ndarray]:
    """The flat gradient cut back into its layers (``sizes``: elements of each, in order)."""
    if sum(sizes) != vector.size:
        raise ConfigError("sizes", list(sizes), f"layer sizes summing to the vector's {vector.size} elements")
    return np.split(vector, np.cumsum(sizes)[:-1])


def encode(compressor: Compressor, vector: np.ndarray, sizes: Sequence[int], *, seed: int, worker: int) -> Encoded:
    """What ``worker`` sends every peer: its gradient encoded layer by layer, from its own generator."""
    return compressor.encode(layers(vector, sizes), np.random.default_rng([seed, worker]))


def decode(compressor: Compressor, encoded: Encoded) -> np.ndarray:
    """The flat gradient an encoding stands for (float32, as sent)."""
    return np.concatenate([a.ravel() for a in compressor.decode(encoded)])


def sum_in_order(decoded: Sequence[np.ndarray]) -> np.ndarray:
    """The decoded gradients summed in worker order (the order every worker uses: the same bits on all)."""
    total = decoded[0].copy()
    for vector in decoded[1:]:
        total += vector
    return total


def wire_bytes(payload: Any) -> int:
    """Bytes of Dask's serialized frames of ``payload`` (header plus buffers): what crosses a link."""
    from distributed.protocol import serialize_bytelist

    return sum(memoryview(frame).nbytes for frame in serialize_bytelist(payload))


@dataclass
class Exchange:
    """One compressed peer-to-peer exchange in numpy: what each worker sent, decoded, and the average."""

    encoded: list[Encoded]  # one per worker, sent to each of the others
    decoded: list[np.ndarray]  # (parameters,) each
    average: np.ndarray  # what every worker holds: the decoded gradients summed in worker order, over N


def simulate(spec: str, vectors: Sequence[np.ndarray], sizes: Sequence[int], *, seed: int) -> Exchange:
    """The exchange the devices run, in numpy on the workers' flat ``vectors``."""
    compressor = build_compressor(check_compressors([spec])[0])
    assert compressor is not None  # check_compressors refuses "none"
    encoded = [encode(compressor, v, sizes, seed=seed, worker=w) for w, v in enumerate(vectors)]
    decoded = [decode(compressor, e) for e in encoded]
    total = sum_in_order(decoded)
    return Exchange(encoded, decoded, total / total.dtype.type(len(vectors)))
