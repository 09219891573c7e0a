"""Fused-tile partitioning: the first layers of a sequential CNN cut vertically into a g x g grid of tiles.

Paper: Zhao, Barijough, Gerstlauer, "DeepThings: Distributed Adaptive Deep
Learning Inference on Resource-Constrained IoT Edge Clusters" (2018), as the
survey describes it (catalog ``qiao/fig3-6``): each tile holds every neuron,
in every fused layer, that its outputs depend on, so tiles run on separate
devices with no exchange and their outputs, stitched, are the untiled output.

The last fused layer's output map is split into a g x g grid. For each output
tile the layers are walked backward: a layer of kernel k, stride s, dilation d
and leading padding p maps output rows [a, b) to input rows
[a*s - p, (b-1)*s + (k-1)*d + 1 - p), the receptive-field halo. The part of
that range outside the real feature map is padding, so a tile pads only where
it touches the map's border (TF's "same" padding is asymmetric at stride 2:
the extra row goes to the bottom and right) and runs every layer with "valid"
padding. A tile is a standalone Keras model (pads, then the layers' clones with
the original weights), so a device worker rebuilds it from its config like any
pipeline stage (``edgelab.pipeline.worker``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from edgelab.common import checks
from edgelab.common.errors import ConfigError
from edgelab.models.graph import layer_costs, resolve_model

if TYPE_CHECKING:
    import keras

CONVOLUTIONS = ("Conv2D", "DepthwiseConv2D", "SeparableConv2D")
POOLINGS = ("MaxPooling2D", "AveragePooling2D")
PADDINGS = ("ZeroPadding2D",)
# Per-position layers: a tile computes them exactly as the whole map does (inference mode).
POINTWISE = ("BatchNormalization", "Activation", "ReLU", "LeakyReLU", "ELU", "Dropout", "Rescaling")
TILEABLE = CONVOLUTIONS + POOLINGS + PADDINGS + POINTWISE

Span = tuple[int, int]  # half-open [lo, hi) along one axis
Pads = tuple[int, int, int, int]  # top, bottom, left, right


@dataclass(frozen=True)
class Geometry:
    """How one fused layer maps input positions to output positions.

    Parameters
    ----------
    index, name, kind
        Position in ``model.layers``, name and class name.
    kernel, strides, dilation
        Per spatial axis (rows, columns); 1 for per-position layers.
    pads
        The layer's own padding of the whole map (top, bottom, left, right), as TF applies it.
    pad_value
        What padding holds: 0, or -inf for max pooling (TF ignores padded positions there).
    in_shape, out_shape
        (H, W, C) of the whole map.
    macs_per_position
        Multiply-accumulates per output position (``edgelab.models.graph.layer_costs``).
    """

    index: int
    name: str
    kind: str
    kernel: tuple[int, int]
    strides: tuple[int, int]
    dilation: tuple[int, int]
    pads: Pads
    pad_value: float
    in_shape: tuple[int, int, int]
    out_shape: tuple[int, int, int]
    macs_per_position: int

    def input_span(self, axis: int, out: Span) -> tuple[Span, tuple[int, int]]:
        """Input positions output span ``out`` depends on along ``axis`` (0 rows, 1 columns), clipped to the map.

        Returns the clipped span and the padding (before, after) a tile must add where it leaves the map.
        """
        k, s, d, lead = self.kernel[axis], self.strides[axis], self.dilation[axis], self.pads[2 * axis]
        lo, hi = out[0] * s - lead, (out[1] - 1) * s + (k - 1) * d + 1 - lead
        size = self.in_shape[axis]
        clipped = (max(lo, 0), min(hi, size))
        return clipped, (clipped[0] - lo, hi - clipped[1])


@dataclass(frozen=True)
class Tile:
    """One tile: what it computes at every fused layer.

    ``spans[i]`` is the (rows, cols) region of layer i's *input* the tile holds
    (``spans[0]``: the image region, halo included); ``spans[-1]`` its share of
    the last layer's output. ``pads[i]`` is the padding it adds before layer i.
    """

    row: int
    col: int
    spans: tuple[tuple[Span, Span], ...]
    pads: tuple[Pads, ...]
    macs: int
    peak_bytes: int

    @property
    def input_region(self) -> tuple[Span, Span]:
        """Rows and columns of the image the tile receives (halo included)."""
        return self.spans[0]

    @property
    def output_region(self) -> tuple[Span, Span]:
        """Rows and columns of the last fused layer's output the tile computes."""
        return self.spans[-1]


@dataclass(frozen=True)
class TileGrid:
    """A g x g fused-tile partition of a model's first layers."""

    model_name: str
    grid: int
    layers: tuple[Geometry, ...]
    tiles: tuple[Tile, ...]
    untiled_macs: int
    untiled_peak_bytes: int
    itemsize: int = 4

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """(H, W, C) of the image."""
        return self.layers[0].in_shape

    @property
    def output_shape(self) -> tuple[int, int, int]:
        """(H, W, C) of the last fused layer's output."""
        return self.layers[-1].out_shape

    @property
    def redundancy(self) -> float:
        """Total tile MACs over untiled MACs: the halo overlap's recomputation (1.0 for one tile)."""
        return sum(t.macs for t in self.tiles) / self.untiled_macs if self.untiled_macs else 1.0

    def input_bytes(self, tile: Tile) -> int:
        """Bytes of the image region a tile receives (float32)."""
        (r0, r1), (c0, c1) = tile.input_region
        return (r1 - r0) * (c1 - c0) * self.input_shape[2] * self.itemsize

    def output_bytes(self, tile: Tile) -> int:
        """Bytes of the output a tile sends to the gather node (float32)."""
        (r0, r1), (c0, c1) = tile.output_region
        return (r1 - r0) * (c1 - c0) * self.output_shape[2] * self.itemsize


def fused_layers(model: keras.Model | Callable[[], keras.Model], upto: int | str) -> tuple[Any, list[Geometry]]:
    """The model and the geometry of its first layers, through ``upto`` (a count after the input, or a name).

    Raises
    ------
    ConfigError
        ``upto`` beyond the model or not one of its layers; a fused layer the partitioner cannot tile
        (named, with its kind); a layer that is not fed by the one before it (not a sequential chain);
        channels-first data, or an input of unknown size.
    """
    model = resolve_model(model)
    names = [layer.name for layer in model.layers]
    last = _last_index(model, upto, names)
    costs = layer_costs(model)
    geometry = []
    for i in range(1, last + 1):
        layer, previous = model.layers[i], model.layers[i - 1]
        kind = type(layer).__name__
        if kind not in TILEABLE:
            allowed = f"layers the partitioner can tile ({', '.join(TILEABLE)}); fuse fewer layers"
            raise ConfigError("layers", f"{layer.name} ({kind})", allowed)
        if len(layer._inbound_nodes) != 1 or layer.input is not previous.output:
            raise ConfigError("model", layer.name, "a sequential chain: each fused layer fed by the one before it")
        if getattr(layer, "data_format", "channels_last") != "channels_last":
            raise ConfigError("layers", f"{layer.name} ({layer.data_format})", "channels_last layers")
        geometry.append(_geometry(i, layer, costs[i]))
    return model, geometry


def _last_index(model: Any, upto: int | str, names: list[str]) -> int:
    n = len(names) - 1  # layers after the InputLayer
    if isinstance(upto, str):
        if upto not in names[1:]:
            raise ConfigError("upto", upto, f"the name of one of {model.name}'s layers")
        return names.index(upto)
    # The number of layers of the model to fuse.
    checks.integer("upto", upto, at_least=1, at_most=n, also=f"the name of one of {model.name}'s layers")
    return upto


def _geometry(index: int, layer: Any, cost: Any) -> Geometry:
    kind = type(layer).__name__
    shape_in = tuple(layer.input.shape[1:])
    shape_out = tuple(layer.output.shape[1:])
    if len(shape_in) != 3 or any(d is None for d in shape_in):
        raise ConfigError("model", layer.name, "fixed (H, W, C) inputs to every fused layer")
    kernel, strides, dilation, pads, value = (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 0.0
    if kind in PADDINGS:
        (top, bottom), (left, right) = layer.padding
        pads = (top, bottom, left, right)
    elif kind in CONVOLUTIONS + POOLINGS:
        kernel = tuple(layer.kernel_size if kind in CONVOLUTIONS else layer.pool_size)
        strides = tuple(layer.strides)
        dilation = tuple(layer.dilation_rate) if kind in CONVOLUTIONS else (1, 1)
        if layer.padding == "same":
            rows = _same_pads(shape_in[0], kernel[0], strides[0], dilation[0])
            cols = _same_pads(shape_in[1], kernel[1], strides[1], dilation[1])
            pads = (*rows, *cols)
        value = -math.inf if kind == "MaxPooling2D" else 0.0
    per_position = cost.macs // math.prod(shape_out[:2])
    shapes = (shape_in, shape_out)
    geometry = Geometry(index, layer.name, kind, kernel, strides, dilation, pads, value, *shapes, per_position)
    expected = tuple(_out_size(geometry, axis) for axis in (0, 1))
    if expected != shape_out[:2]:
        raise ConfigError("layers", f"{layer.name} ({kind})", f"a layer whose output is {expected} for this input")
    return geometry


def _same_pads(size: int, k: int, s: int, d: int) -> tuple[int, int]:
    """TF's "same" padding: the output has ceil(size / s) positions; the odd row goes after."""
    total = max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0)
    return total // 2, total - total // 2


def _out_size(g: Geometry, axis: int) -> int:
    padded = g.in_shape[axis] + g.pads[2 * axis] + g.pads[2 * axis + 1]
    return (padded - (g.kernel[axis] - 1) * g.dilation[axis] - 1) // g.strides[axis] + 1


def plan_tiles(model: keras.Model | Callable[[], keras.Model], upto: int | str, grid: int) -> TileGrid:
    """Split the output of the first ``upto`` layers into ``grid`` x ``grid`` tiles and walk each back to the image.

    Parameters
    ----------
    model
        A sequential Keras model (``keras.Sequential`` or a functional chain), or a function that builds one.
    upto
        How many layers after the input to fuse, or the name of the last fused layer.
    grid
        Tiles per side, >= 1 and at most the output map's smaller side.

    Returns
    -------
    TileGrid
        Every tile's regions, paddings, MACs and peak activation bytes, with the untiled totals.

    Examples
    --------
    A 3x3 "same" convolution on an 8x8 map in a 2x2 grid: the top-left tile needs rows and columns 0..4
    (one halo row and column) and pads only its top and left.

    >>> import keras
    >>> net = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Conv2D(1, 3, padding="same")])
    >>> t = plan_tiles(net, 1, 2).tiles[0]
    >>> t.input_region, t.pads[0]
    (((0, 5), (0, 5)), (1, 0, 1, 0))
    """
    checks.integer("grid", grid, at_least=1)  # tiles per side
    model, layers = fused_layers(model, upto)
    height, width, _ = layers[-1].out_shape
    if grid > min(height, width):
        allowed = f"at most {min(height, width)}: the output of {layers[-1].name} is {height}x{width}"
        raise ConfigError("grid", grid, allowed)
    rows = [(height * i // grid, height * (i + 1) // grid) for i in range(grid)]
    cols = [(width * j // grid, width * (j + 1) // grid) for j in range(grid)]
    tiles = tuple(_walk_back(layers, i, j, rows[i], cols[j]) for i in range(grid) for j in range(grid))
    whole = _walk_back(layers, 0, 0, (0, height), (0, width))
    return TileGrid(model.name, grid, tuple(layers), tiles, whole.macs, whole.peak_bytes)


def _walk_back(layers: list[Geometry], row: int, col: int, rows: Span, cols: Span, itemsize: int = 4) -> Tile:
    spans: list[tuple[Span, Span]] = [(rows, cols)]
    pads: list[Pads] = []
    macs, peak = 0, 0
    for g in reversed(layers):
        out_rows, out_cols = spans[0]
        in_rows, (top, bottom) = g.input_span(0, out_rows)
        in_cols, (left, right) = g.input_span(1, out_cols)
        spans.insert(0, (in_rows, in_cols))
        pads.insert(0, (top, bottom, left, right))
        out_positions = (out_rows[1] - out_rows[0]) * (out_cols[1] - out_cols[0])
        padded = (in_rows[1] - in_rows[0] + top + bottom) * (in_cols[1] - in_cols[0] + left + right)
        macs += out_positions * g.macs_per_position
        # Layer by layer a tile holds its padded input and its output at once.
        peak = max(peak, (padded * g.in_shape[2] + out_positions * g.out_shape[2]) * itemsize)
    return Tile(row, col, tuple(spans), tuple(pads), macs, peak)


def prefix_model(model: keras.Model | Callable[[], keras.Model], upto: int | str) -> keras.Model:
    """The untiled reference: the model's input through the last fused layer."""
    import keras

    model, layers = fused_layers(model, upto)
    return keras.Model(model.inputs[0], model.layers[layers[-1].index].output, name=f"{model.name}_fused")


def split_input(plan: TileGrid, x: np.ndarray) -> list[np.ndarray]:
    """Each tile's image region, halo included: ``(B, h, w, C)`` float32 arrays in tile order."""
    if tuple(x.shape[1:]) != plan.input_shape:
        raise ConfigError("x", tuple(x.shape), f"images of shape (B, {', '.join(map(str, plan.input_shape))})")
    regions = [t.input_region for t in plan.tiles]
    return [np.ascontiguousarray(x[:, r0:r1, c0:c1], np.float32) for (r0, r1), (c0, c1) in regions]


def stitch(plan: TileGrid, outputs: list[np.ndarray]) -> np.ndarray:
    """The tiles' outputs put back in place: ``(B, H, W, C)`` of the last fused layer."""
    if len(outputs) != len(plan.tiles):
        raise ConfigError("outputs", len(outputs), f"one output per tile ({len(plan.tiles)})")
    whole = np.empty((outputs[0].shape[0], *plan.output_shape), outputs[0].dtype)
    for tile, out in zip(plan.tiles, outputs, strict=True):
        (r0, r1), (c0, c1) = tile.output_region
        whole[:, r0:r1, c0:c1] = out
    return whole


def tile_model(model: keras.Model | Callable[[], keras.Model], plan: TileGrid, tile: Tile) -> keras.Model:
    """A standalone Keras model of one tile: its border padding, then clones of the fused layers with "valid" padding.

    The clones carry the original weights; the config round-trips through ``keras.Model.from_config``
    once ``edgelab.pipeline.tile_worker`` is imported (it registers the two layers a tile adds).
    """
    import keras

    from edgelab.pipeline.tile_worker import tile_layers

    tile_padding, border_average = tile_layers()
    model = resolve_model(model)
    (r0, r1), (c0, c1) = tile.input_region
    inp = keras.Input((r1 - r0, c1 - c0, plan.input_shape[2]), name=f"tile_{tile.row}_{tile.col}_input")
    x, clones = inp, []
    for g, pads in zip(plan.layers, tile.pads, strict=True):
        layer = model.layers[g.index]
        config = layer.get_config()
        if g.kind == "AveragePooling2D" and config["padding"] == "same":
            # TF's "same" average divides by the real positions only: a zero pad would dilute the border.
            x = border_average(g.kernel, g.strides, pads, name=g.name)(x)
            continue
        if any(pads):
            x = tile_padding(pads, g.pad_value, name=f"{g.name}_tilepad")(x)
        if g.kind in PADDINGS:
            continue
        if g.kind in CONVOLUTIONS + POOLINGS:
            config["padding"] = "valid"
        clone = type(layer).from_config(config)
        x = clone(x)
        clones.append((clone, layer))
    for clone, layer in clones:
        clone.set_weights(layer.get_weights())
    return keras.Model(inp, x, name=f"{plan.model_name}_tile_{tile.row}_{tile.col}")


def run_locally(model: keras.Model | Callable[[], keras.Model], plan: TileGrid, x: np.ndarray) -> np.ndarray:
    """Every tile run in this process and stitched: the cluster's result without the cluster."""
    model = resolve_model(model)
    parts = split_input(plan, x)
    outputs = [
        np.asarray(tile_model(model, plan, t)(part, training=False)) for t, part in zip(plan.tiles, parts, strict=True)
    ]
    return stitch(plan, outputs)
