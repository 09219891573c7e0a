"""One layer's cost, as the analytic models and users' models list them: shape, parameters, multiply-adds."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Layer:
    """One layer's cost: its kind, output shape, trainable and non-trainable parameters, multiply-adds."""

    name: str
    kind: str  # conv, dense, batchnorm, activation, add, pool
    output: tuple[int, ...]  # per sample
    params: int = 0
    non_trainable: int = 0
    macs: int = 0
    fused: bool = False  # an activation Keras applies inside the previous layer: no tensor of its own

    @property
    def output_size(self) -> int:
        """Floats this layer outputs per sample."""
        return math.prod(self.output)
