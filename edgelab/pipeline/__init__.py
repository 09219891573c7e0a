"""Pipeline inference: a model cut into stages, one stage per device worker."""

from __future__ import annotations

from edgelab.pipeline.partition import (
    BALANCES,
    JEON_STAGE_SIZES,
    LayerCost,
    Partition,
    Stage,
    cut_points,
    flat_mobilenet_v2,
    jeon_cuts,
    layer_costs,
    layer_count_check,
    partition,
    resolve_model,
    stage_model,
)

__all__ = [
    "BALANCES",
    "JEON_STAGE_SIZES",
    "LayerCost",
    "Partition",
    "Stage",
    "cut_points",
    "flat_mobilenet_v2",
    "jeon_cuts",
    "layer_count_check",
    "layer_costs",
    "partition",
    "resolve_model",
    "stage_model",
]
