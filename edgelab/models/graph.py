"""A Keras functional model's call graph, read layer by layer: what each layer costs, and where it can be cut.

The graph is read from Keras' private node bookkeeping (``model._nodes_by_depth``,
``node.arguments``, ``tensor._keras_history``): Keras 3 has no public API for a
model's call graph. Keras is imported inside the functions: importing TensorFlow
costs ~620 MB of RSS, and only device workers should pay it.

A cut after layer ``i`` is valid when exactly one tensor crosses from
``model.layers[:i + 1]`` to ``model.layers[i + 1:]``, so a stage needs nothing
from its predecessor but that one tensor and no residual connection is ever
cut. ``model.layers`` order is topological for functional models, so a stage
is a contiguous run of layers.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from edgelab.common.errors import ConfigError

if TYPE_CHECKING:
    import keras


_MODEL_ALLOWED = "a Keras functional model or a function that builds one"


@dataclass(frozen=True)
class LayerCost:
    """What one layer costs per image.

    Parameters
    ----------
    index, name, kind
        Position in ``model.layers``, layer name and class name.
    macs
        Multiply-accumulates per image (see ``layer_costs`` for which layers count).
    params
        Parameters, trainable or not (BatchNormalization's moving statistics included).
    output_shape
        Shape of the layer's output without the batch axis.
    output_bytes
        Bytes of the layer's outputs per image, at their dtype (float32: 4 per element).
    """

    index: int
    name: str
    kind: str
    macs: int
    params: int
    output_shape: tuple[int, ...]
    output_bytes: int


def resolve_model(model: keras.Model | Callable[[], keras.Model]) -> keras.Model:
    """Return the functional model ``model`` is, or builds.

    Parameters
    ----------
    model
        A built functional ``keras.Model`` or a function of no arguments that returns one.
        A built ``keras.Sequential`` becomes the equivalent functional model over the same
        layer objects, so its ``layers`` gain the ``InputLayer`` at index 0.

    Returns
    -------
    keras.Model
        A functional model.
    """
    import keras

    if not isinstance(model, keras.Model) and callable(model):
        try:
            inspect.signature(model).bind()
        except (TypeError, ValueError) as err:
            raise ConfigError("model", model, _MODEL_ALLOWED + " (it takes no arguments)") from err
        model = model()
    if isinstance(model, keras.Sequential):
        try:
            model = keras.Model(model.inputs, model.outputs, name=model.name)
        except (AttributeError, ValueError) as err:
            raise ConfigError("model", model, _MODEL_ALLOWED + " (this Sequential model is not built)") from err
    if not isinstance(model, keras.Model) or not isinstance(getattr(model, "_nodes_by_depth", None), dict):
        raise ConfigError("model", model, _MODEL_ALLOWED)
    return model


class Graph:
    """The call graph of a functional model, with every operation at its position in ``model.operations``.

    ``model.operations`` is ``model.layers`` plus bare ops (``keras.ops.add`` on symbolic tensors);
    a bare op belongs to the stage of the next layer.
    """

    def __init__(self, model: keras.Model) -> None:
        self.model = model
        self.layers = model.layers
        ops = model.operations
        self.pos = {id(op): p for p, op in enumerate(ops)}
        self.n_ops = len(ops)
        self.layer_pos = [self.pos[id(layer)] for layer in self.layers]
        # Execution order of the model's own nodes (a layer re-called elsewhere has more nodes).
        self.nodes = [n for d in sorted(model._nodes_by_depth, reverse=True) for n in model._nodes_by_depth[d]]
        self.tensors: dict[int, Any] = {}
        self.producer: dict[int, int] = {}
        self.first_use: dict[int, int] = {}
        self.last_use: dict[int, int] = {}
        self.input_positions = [self.pos[id(n.operation)] for n in self.nodes if n.is_input]
        for node in self.nodes:
            p = self.pos[id(node.operation)]
            for t in node.outputs:
                self.tensors[id(t)] = t
                self.producer[id(t)] = p
            for t in node.input_tensors:
                self.first_use[id(t)] = min(self.first_use.get(id(t), p), p)
                self.last_use[id(t)] = max(self.last_use.get(id(t), p), p)
        # A model output is used "after the end": it must be carried to the last stage's output.
        for t in model.outputs:
            self.last_use[id(t)] = self.n_ops

    def layer_nodes(self, index: int) -> list[Any]:
        """The model's nodes of layer ``index`` (one unless the layer is shared)."""
        return [n for n in self.nodes if n.operation is self.layers[index]]

    def span(self, first: int, last: int) -> tuple[int, int]:
        """Positions in ``model.operations`` of the stage holding layers ``first..last``."""
        start = 0 if first == 0 else self.layer_pos[first - 1] + 1
        end = self.n_ops - 1 if last == len(self.layers) - 1 else self.layer_pos[last]
        return start, end

    def crossing(self, q: int) -> list[Any]:
        """Tensors made at or before position ``q`` and used after it, in the order they were made."""
        ids = [i for i, p in self.producer.items() if p <= q < self.last_use.get(i, -1)]
        return [self.tensors[i] for i in sorted(ids, key=lambda i: self.producer[i])]

    def why_not(self, i: int) -> str | None:
        """Why a cut after layer ``i`` is not valid, or None if it is."""
        if not 0 <= i < len(self.layers) - 1:
            return f"a cut is a layer index 0..{len(self.layers) - 2} (the last layer ends the last stage)"
        q = self.layer_pos[i]
        name = self.layers[i].name
        if any(p > q for p in self.input_positions):
            return f"a model input enters the graph after layer {i} ({name!r})"
        if any(self.first_use.get(t, q + 1) <= q < p for t, p in self.producer.items()):
            return f"a shared layer at or before layer {i} ({name!r}) uses a tensor made after it"
        crossing = self.crossing(q)
        if len(crossing) != 1:
            return f"{len(crossing)} tensors cross the cut after layer {i} ({name!r}): a residual or skip spans it"
        return None


def tensor_shape(t: Any) -> tuple[Any, ...]:
    """A Keras tensor's shape without its batch axis."""
    return tuple(t.shape[1:])


def _elements(t: Any) -> int:
    if any(d is None for d in tensor_shape(t)):
        raise ConfigError("model", t, "fixed input sizes: MACs and bytes per image need every axis but the batch")
    return math.prod(tensor_shape(t))


def tensor_bytes(t: Any) -> int:
    """Bytes of one image's worth of a Keras tensor, at its dtype."""
    # Bits from the dtype name ("float32" -> 4 bytes, "bfloat16" -> 2); "bool" has no digits and takes 1.
    bits = re.search(r"\d+", str(t.dtype))
    return _elements(t) * (max(1, int(bits.group()) // 8) if bits else 1)


def _macs(layer: Any, node: Any) -> int:
    import keras

    elements = _elements(node.outputs[0])
    if isinstance(layer, keras.layers.SeparableConv1D | keras.layers.SeparableConv2D):
        positions = elements // layer.filters
        return positions * (math.prod(layer.depthwise_kernel.shape) + math.prod(layer.pointwise_kernel.shape))
    if isinstance(layer, keras.layers.DepthwiseConv1D | keras.layers.DepthwiseConv2D):
        channels = layer.kernel.shape[-2] * layer.kernel.shape[-1]
        return elements // channels * math.prod(layer.kernel.shape)
    if isinstance(layer, keras.layers.Conv1D | keras.layers.Conv2D | keras.layers.Conv3D):
        # kernel (k..., in/groups, filters): one MAC per kernel element at every output position
        return elements // layer.filters * math.prod(layer.kernel.shape)
    if isinstance(layer, keras.layers.Dense):
        return elements // layer.units * math.prod(layer.kernel.shape)
    if isinstance(getattr(layer, "_nodes_by_depth", None), dict):
        return sum(c.macs for c in layer_costs(layer))
    return 0


def layer_costs(model: keras.Model | Callable[[], keras.Model]) -> list[LayerCost]:
    """MACs, parameters and output size per image of every layer, in ``model.layers`` order.

    MACs are counted analytically from the output shape and the kernel, including stride,
    padding, groups and depth multiplier: Conv1D/2D/3D, DepthwiseConv1D/2D, SeparableConv1D/2D
    and Dense (a nested functional model counts its own layers). Every other layer counts 0
    MACs: BatchNormalization, activations, Add, pooling, Dropout, Reshape, and bare ``keras.ops``
    calls. Bias additions are not MACs. A shared layer counts every call the model makes.

    Parameters
    ----------
    model
        A functional model, or a function that builds one (see ``resolve_model``).

    Returns
    -------
    list[LayerCost]
        One per layer. Raises ConfigError if an output has an unknown size other than the batch.
    """
    graph = Graph(resolve_model(model))
    costs = []
    for i, layer in enumerate(graph.layers):
        nodes = graph.layer_nodes(i)
        macs = sum(_macs(layer, n) for n in nodes)
        first = nodes[0].outputs
        out = sum(tensor_bytes(t) for t in first)
        costs.append(
            LayerCost(i, layer.name, type(layer).__name__, macs, layer.count_params(), tensor_shape(first[0]), out)
        )
    return costs


def cut_points(model: keras.Model | Callable[[], keras.Model]) -> list[int]:
    """Every layer index after which the model can be cut into two pipeline stages.

    Index ``i`` is a cut point when exactly one tensor crosses from ``model.layers[:i + 1]``
    to ``model.layers[i + 1:]``. A model output made before the cut counts as crossing (it must
    be carried to the end), so a multi-output model has cut points only after its outputs but
    one; every model input must enter before the cut, so a multi-input model has cut points
    only after its inputs have joined. No cut ever falls inside a residual block.

    Parameters
    ----------
    model
        A functional model, or a function that builds one.

    Returns
    -------
    list[int]
        Increasing layer indices, each ``< len(model.layers) - 1``.
    """
    graph = Graph(resolve_model(model))
    return [i for i in range(len(graph.layers) - 1) if graph.why_not(i) is None]
