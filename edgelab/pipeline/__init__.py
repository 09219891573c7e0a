"""Pipelines: a model cut into stages, one stage per device worker.

For inference (a stream of inputs) and for training (GPipe-style micro-batches).
"""

from __future__ import annotations

from edgelab.models.graph import LayerCost, cut_points, layer_costs, resolve_model
from edgelab.models.mobilenet import flat_mobilenet_v2, layer_count_check
from edgelab.pipeline.partition import BALANCES, JEON_STAGE_SIZES, Partition, Stage, jeon_cuts, partition, stage_model

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
