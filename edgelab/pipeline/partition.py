"""Cut a Keras functional model into pipeline stages, one per device worker.

Paper: Jeon, Lee, Lee, Kim, Kim, "Implementation of AIoT Edge Cluster System via
Distributed Deep Learning Pipeline" (catalog ``jeon``). They cut a fine-tuned
MobileNetV2 of 157 layers into 5 stages of 27/27/36/53/14 layers "considering
the amount of computation"; each node sends its output activation to the next.

A cut after layer ``i`` is valid when exactly one tensor crosses from
``model.layers[:i + 1]`` to ``model.layers[i + 1:]``, so a stage needs nothing
from its predecessor but that one tensor and no residual connection is ever
cut. ``model.layers`` order is topological for functional models, so a stage
is a contiguous run of layers.

The graph is read from Keras' private node bookkeeping (``model._nodes_by_depth``,
``node.arguments``, ``tensor._keras_history``): Keras 3 has no public API for a
model's call graph. Keras is imported inside the functions: importing TensorFlow
costs ~620 MB of RSS, and only device workers should pay it.
"""

from __future__ import annotations

import inspect
import math
import numbers
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgelab.errors import ConfigError

if TYPE_CHECKING:
    import keras
    import pandas as pd

BALANCES = ("macs", "params", "time")
# Jeon et al. l.163: layers per stage of the 157-layer model.
JEON_STAGE_SIZES = (27, 27, 36, 53, 14)
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


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: a contiguous run of layers that one worker holds.

    Parameters
    ----------
    index
        Stage number, 1-based as in the paper (stage 1 receives the images).
    first, last
        Inclusive indices into ``model.layers``.
    layers
        Names of the stage's layers.
    macs, params
        Sums over the stage's layers (per image for MACs).
    output_bytes
        Bytes per image of the tensor the stage passes on (the model output for the last stage).
    input_shape, output_shape
        Shapes without the batch axis of the tensor the stage receives and passes on. A stage with
        several (the first of a multi-input model, the last of a multi-output one) has a tuple of shapes.
    seconds
        Sum of the measured per-layer times, when ``partition`` was given ``layer_times``.
    """

    index: int
    first: int
    last: int
    layers: tuple[str, ...]
    macs: int
    params: int
    output_bytes: int
    input_shape: tuple[Any, ...]
    output_shape: tuple[Any, ...]
    seconds: float | None = None

    @property
    def n_layers(self) -> int:
        """Number of layers in the stage."""
        return self.last - self.first + 1


@dataclass(frozen=True)
class Partition:
    """A model cut into stages, with what each stage costs.

    Parameters
    ----------
    model_name, n_layers
        The model's name and ``len(model.layers)``.
    stages
        The stages, in pipeline order.
    balance
        ``"macs"``, ``"params"`` or ``"time"``: the cost the cuts were chosen to balance;
        ``"given"``: the caller chose the cuts.
    cuts
        Last layer index of every stage but the last.
    """

    model_name: str
    n_layers: int
    stages: tuple[Stage, ...]
    balance: str
    cuts: tuple[int, ...]

    def _costs(self) -> list[float]:
        if self.balance == "time":
            return [s.seconds or 0.0 for s in self.stages]
        if self.balance == "params":
            return [float(s.params) for s in self.stages]
        return [float(s.macs) for s in self.stages]

    @property
    def bottleneck_share(self) -> float:
        """Largest stage's share of the balanced cost (MACs when the cuts were given); 1.0 if nothing costs."""
        costs = self._costs()
        return max(costs) / sum(costs) if sum(costs) > 0 else 1.0

    @property
    def speedup_bound(self) -> float:
        """Most a pipeline of these stages can gain in throughput over one device of the same kind.

        The steady state of a pipeline runs at the pace of its slowest stage, so the
        bound is ``1 / bottleneck_share`` (at most the number of stages).
        """
        return 1.0 / self.bottleneck_share

    def to_frame(self) -> pd.DataFrame:
        """One row per stage, for reports (a ``seconds`` column when layer times were given)."""
        import pandas as pd

        total = sum(s.macs for s in self.stages)
        rows = []
        for s in self.stages:
            row = {
                "stage": s.index,
                "first": s.first,
                "last": s.last,
                "first_layer": s.layers[0],
                "last_layer": s.layers[-1],
                "layers": s.n_layers,
                "macs": s.macs,
                "mac_share": s.macs / total if total else 0.0,
                "params": s.params,
                "output_shape": s.output_shape,
                "output_bytes": s.output_bytes,
            }
            if s.seconds is not None:
                row["seconds"] = s.seconds
            rows.append(row)
        return pd.DataFrame(rows)

    def to_dict(self) -> dict[str, Any]:
        """Everything, as plain JSON types (tuples become lists)."""
        stages = [{**_jsonable(asdict(s)), "n_layers": s.n_layers} for s in self.stages]
        return {
            "model_name": self.model_name,
            "n_layers": self.n_layers,
            "balance": self.balance,
            "cuts": list(self.cuts),
            "bottleneck_share": self.bottleneck_share,
            "speedup_bound": self.speedup_bound,
            "stages": stages,
        }


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


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


class _Graph:
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


def _shape(t: Any) -> tuple[Any, ...]:
    return tuple(t.shape[1:])


def _elements(t: Any) -> int:
    if any(d is None for d in _shape(t)):
        raise ConfigError("model", t, "fixed input sizes: MACs and bytes per image need every axis but the batch")
    return math.prod(_shape(t))


def _bytes(t: Any) -> int:
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
    graph = _Graph(resolve_model(model))
    costs = []
    for i, layer in enumerate(graph.layers):
        nodes = graph.layer_nodes(i)
        macs = sum(_macs(layer, n) for n in nodes)
        first = nodes[0].outputs
        out = sum(_bytes(t) for t in first)
        costs.append(LayerCost(i, layer.name, type(layer).__name__, macs, layer.count_params(), _shape(first[0]), out))
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
    graph = _Graph(resolve_model(model))
    return [i for i in range(len(graph.layers) - 1) if graph.why_not(i) is None]


def _check_cuts(graph: _Graph, cuts: Sequence[int | str]) -> tuple[int, ...]:
    names = {layer.name: i for i, layer in enumerate(graph.layers)}
    valid = [i for i in range(len(graph.layers) - 1) if graph.why_not(i) is None]
    indices = []
    for cut in cuts:
        i = names.get(cut, -1) if isinstance(cut, str) else int(cut) if _is_int(cut) else -1
        if i < 0:
            raise ConfigError("cuts", cut, "layer indices or layer names of the model, each the last layer of a stage")
        reason = graph.why_not(i)
        if reason is not None:
            near = [v for v in valid if v < i][-2:] + [v for v in valid if v > i][:2]
            nearby = ", ".join(f"{v} ({graph.layers[v].name})" for v in near) or "none"
            raise ConfigError("cuts", cut, f"valid cut points (one tensor crosses); {reason}; nearby: {nearby}")
        indices.append(i)
    if any(b <= a for a, b in zip(indices, indices[1:], strict=False)):
        raise ConfigError("cuts", list(cuts), "strictly increasing layer positions")
    return tuple(indices)


def _balanced_cuts(costs: Sequence[float], valid: Sequence[int], n_stages: int) -> tuple[int, ...]:
    """Cuts among ``valid`` that minimise the largest stage cost; among the optima, the earliest cuts.

    Linear partition by dynamic programming over prefix sums, O(n_stages * len(valid)^2).
    ``best[k][j]``: smallest possible largest cost of layers ``j + 1 ..`` in ``k`` stages.
    """
    prefix: list[float] = [0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    n = len(costs)

    def cost(j: int, v: int) -> float:  # layers j+1 .. v
        return prefix[v + 1] - prefix[j + 1]

    starts = [-1, *valid]
    best: list[dict[int, float]] = [{}, {j: cost(j, n - 1) for j in starts}]
    for k in range(2, n_stages + 1):
        best.append(
            {j: min((max(cost(j, v), best[k - 1][v]) for v in valid if v > j), default=math.inf) for j in starts}
        )
    bottleneck = best[n_stages][-1]
    # Walk forward taking the first cut that still allows the optimum.
    cuts, j = [], -1
    for k in range(n_stages, 1, -1):
        j = next(v for v in valid if v > j and max(cost(j, v), best[k - 1][v]) <= bottleneck)
        cuts.append(j)
    return tuple(cuts)


def _stage(graph: _Graph, index: int, first: int, last: int, costs: list[LayerCost], times: Any) -> Stage:
    start, end = graph.span(first, last)
    ins = graph.crossing(start - 1) if start > 0 else list(graph.model.inputs)
    outs = graph.crossing(end) if end < graph.n_ops - 1 else list(graph.model.outputs)
    shape_in = _shape(ins[0]) if len(ins) == 1 else tuple(_shape(t) for t in ins)
    shape_out = _shape(outs[0]) if len(outs) == 1 else tuple(_shape(t) for t in outs)
    own = costs[first : last + 1]
    return Stage(
        index=index,
        first=first,
        last=last,
        layers=tuple(c.name for c in own),
        macs=sum(c.macs for c in own),
        params=sum(c.params for c in own),
        output_bytes=sum(_bytes(t) for t in outs),
        input_shape=shape_in,
        output_shape=shape_out,
        seconds=None if times is None else float(sum(times[first : last + 1])),
    )


def partition(
    model: keras.Model | Callable[[], keras.Model],
    n_stages: int | None = None,
    *,
    balance: str = "macs",
    cuts: Sequence[int | str] | None = None,
    layer_times: Sequence[float] | None = None,
) -> Partition:
    """Cut a model into pipeline stages, at given cuts or balancing a cost.

    Parameters
    ----------
    model
        A functional model, or a function that builds one.
    n_stages
        Number of stages. With ``cuts`` it may be omitted (it is then ``len(cuts) + 1``).
    balance
        Cost per layer the chosen cuts balance: ``"macs"``, ``"params"`` or ``"time"`` (``layer_times``).
        The cuts minimise the largest stage cost; ties go to the earliest cuts.
    cuts
        The last layer (index or name) of every stage but the last; each must be a cut point.
    layer_times
        Measured seconds per layer, one per ``model.layers`` entry; needed for ``balance="time"``.

    Returns
    -------
    Partition
        With ``balance="given"`` when ``cuts`` were passed.

    Raises
    ------
    ConfigError
        For a cut that is not a cut point (the message says why and lists valid ones nearby), cuts not
        strictly increasing, ``n_stages`` < 1 or above the number of cut points + 1, an unknown
        ``balance``, or ``balance="time"`` without one time per layer.

    Examples
    --------
    Jeon et al.'s split of the flat 157-layer MobileNetV2:

    >>> model = flat_mobilenet_v2()
    >>> [s.n_layers for s in partition(model, cuts=jeon_cuts(model)).stages]
    [27, 27, 36, 53, 14]
    """
    model = resolve_model(model)
    graph = _Graph(model)
    n = len(graph.layers)
    if balance not in BALANCES:
        raise ConfigError("balance", balance, f"one of {', '.join(BALANCES)}")
    if layer_times is not None:
        times = [float(t) for t in layer_times]
        if len(times) != n or not all(math.isfinite(t) and t >= 0 for t in times):
            raise ConfigError("layer_times", layer_times, f"{n} finite seconds >= 0, one per layer of {model.name}")
    elif balance == "time":
        raise ConfigError("layer_times", None, "measured seconds per layer, required when balance='time'")
    costs = layer_costs(model)
    if cuts is not None:
        chosen = _check_cuts(graph, cuts)
        if n_stages is not None and n_stages != len(chosen) + 1:
            raise ConfigError("n_stages", n_stages, f"None or {len(chosen) + 1}, one more than the cuts given")
        label = "given"
    else:
        valid = [i for i in range(n - 1) if graph.why_not(i) is None]
        if not _is_int(n_stages) or not 1 <= n_stages <= len(valid) + 1:
            allowed = f"1 to {len(valid) + 1}: {model.name} has {len(valid)} valid cut points (or pass cuts)"
            raise ConfigError("n_stages", n_stages, allowed)
        per_layer = {"macs": [c.macs for c in costs], "params": [c.params for c in costs], "time": layer_times}
        chosen = _balanced_cuts(per_layer[balance], valid, n_stages)
        label = balance
    bounds = list(zip([0, *(c + 1 for c in chosen)], [*chosen, n - 1], strict=True))
    stages = tuple(_stage(graph, k + 1, a, b, costs, layer_times) for k, (a, b) in enumerate(bounds))
    return Partition(model.name, n, stages, label, chosen)


def jeon_cuts(model: keras.Model | Callable[[], keras.Model]) -> tuple[int, ...]:
    """Jeon et al.'s 27/27/36/53/14 split of their 157-layer model, as cuts: (26, 53, 89, 142).

    Raises ConfigError when the model does not have 157 layers (see ``flat_mobilenet_v2``).
    """
    model = resolve_model(model)
    if len(model.layers) != sum(JEON_STAGE_SIZES):
        allowed = f"a model of {sum(JEON_STAGE_SIZES)} layers such as flat_mobilenet_v2(); got {len(model.layers)}"
        raise ConfigError("model", model.name, allowed)
    ends = [sum(JEON_STAGE_SIZES[: k + 1]) - 1 for k in range(len(JEON_STAGE_SIZES) - 1)]
    return tuple(ends)


def stage_model(model: keras.Model | Callable[[], keras.Model], stage: Stage) -> keras.Model:
    """A standalone functional model of one stage, sharing the original layer objects (and weights).

    The stage's layers are called again, in the model's execution order, on a new ``keras.Input``
    of the crossing tensor's shape (stage 1 gets copies of the model's inputs). This adds a node to
    every reused layer; the original model is unaffected (its config keeps only its own nodes). The
    result's config round-trips: ``keras.Model.from_config(sub.get_config())`` plus
    ``set_weights(sub.get_weights())`` computes the same outputs. Keras 3 also accepts
    ``keras.Model(intermediate_tensor, output)`` and clones the nodes itself, but names the new input
    after a global tensor counter (``keras_tensor_29CLONE``), so the config would depend on what the
    process built before.

    Parameters
    ----------
    model
        The model the stage was cut from.
    stage
        A stage of ``partition(model, ...)``.

    Returns
    -------
    keras.Model
        Named ``<model>_stage<k>``; one input and one output unless the model itself has several.
    """
    import keras

    model = resolve_model(model)
    graph = _Graph(model)
    names = tuple(layer.name for layer in graph.layers[stage.first : stage.last + 1])
    ends = [i for i in (stage.first - 1, stage.last) if 0 <= i < len(graph.layers) - 1]
    if names != stage.layers or not names or any(graph.why_not(i) for i in ends):
        raise ConfigError("stage", stage.index, f"a stage of a partition of {model.name} (from partition())")
    start, end = graph.span(stage.first, stage.last)
    inside = [n for n in graph.nodes if start <= graph.pos[id(n.operation)] <= end]
    new: dict[int, Any] = {}
    inputs = []
    if start == 0:
        for t in model.inputs:
            new[id(t)] = keras.Input(shape=_shape(t), dtype=t.dtype, name=t._keras_history.operation.name)
            inputs.append(new[id(t)])
    else:
        for j, t in enumerate(graph.crossing(start - 1)):
            name = f"{model.name}_stage{stage.index}_input" + (f"_{j}" if j else "")
            new[id(t)] = keras.Input(shape=_shape(t), dtype=t.dtype, name=name)
            inputs.append(new[id(t)])
    for node in inside:
        if node.is_input:
            continue
        args, kwargs = node.arguments.fill_in(new)
        outputs = keras.tree.flatten(node.operation(*args, **kwargs))
        new.update({id(t): y for t, y in zip(node.outputs, outputs, strict=True)})
    outs = [new[id(t)] for t in (graph.crossing(end) if end < graph.n_ops - 1 else model.outputs)]
    return keras.Model(
        inputs[0] if len(inputs) == 1 else inputs,
        outs[0] if len(outs) == 1 else outs,
        name=f"{model.name}_stage{stage.index}",
    )


def flat_mobilenet_v2(
    num_classes: int = 10,
    *,
    image_size: int = 224,
    weights: str | os.PathLike[str] | None = None,
    dropout: float = 0.2,
    activation: str = "softmax",
) -> keras.Model:
    """Jeon et al.'s model as one flat functional model of 157 layers.

    ``keras.applications.MobileNetV2(include_top=False)`` (154 layers) followed by
    GlobalAveragePooling2D, Dropout and Dense, built on the base's output so the base's
    layers are the model's own (no nested model). The paper does not state the dropout
    rate or the image size.

    Parameters
    ----------
    num_classes
        Width of the output layer (10 tomato classes in the paper).
    image_size
        Side of the square RGB input, >= 32.
    weights
        None (random), ``"imagenet"`` or the path of a weights file, passed to Keras.
    dropout
        Dropout rate before the output layer.
    activation
        Activation of the output layer.

    Returns
    -------
    keras.Model
        Named ``jeon_mobilenet_v2``; its head layers are ``global_average_pooling2d``, ``dropout``, ``dense``.
    """
    import keras

    if not _is_int(num_classes) or num_classes < 1:
        raise ConfigError("num_classes", num_classes, "an integer >= 1")
    if not _is_int(image_size) or image_size < 32:
        raise ConfigError("image_size", image_size, "an integer >= 32 (MobileNetV2's smallest input)")
    if not (weights in (None, "imagenet") or isinstance(weights, str | os.PathLike) and Path(weights).is_file()):
        raise ConfigError("weights", weights, "None, 'imagenet' or the path of an existing weights file")
    if not isinstance(dropout, numbers.Real) or not 0 <= dropout < 1:
        raise ConfigError("dropout", dropout, "a rate in [0, 1)")
    weights = None if weights is None else str(weights)
    base = keras.applications.MobileNetV2(include_top=False, weights=weights, input_shape=(image_size, image_size, 3))
    x = keras.layers.GlobalAveragePooling2D(name="global_average_pooling2d")(base.output)  # (B, 1280)
    x = keras.layers.Dropout(dropout, name="dropout")(x)
    out = keras.layers.Dense(num_classes, activation=activation, name="dense")(x)  # (B, num_classes)
    return keras.Model(base.input, out, name="jeon_mobilenet_v2")


def layer_count_check() -> dict[str, dict[str, int]]:
    """Layers and parameters of the Keras models the paper's "157 layers" could be (weights=None, 224x224).

    Catalog (Keras 3.15.1): include_top=False 154 / 2,257,984; include_top=True 156 / 3,538,984;
    flat base + GAP + Dropout + Dense(10) 157 / 2,270,794.

    Returns
    -------
    dict[str, dict[str, int]]
        ``{"include_top_false" | "include_top_true" | "flat": {"layers": ..., "params": ...}}``.
    """
    import keras

    built = {
        "include_top_false": keras.applications.MobileNetV2(include_top=False, weights=None, input_shape=(224, 224, 3)),
        "include_top_true": keras.applications.MobileNetV2(include_top=True, weights=None),
        "flat": flat_mobilenet_v2(weights=None),
    }
    return {k: {"layers": len(m.layers), "params": m.count_params()} for k, m in built.items()}
