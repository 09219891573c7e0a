"""Cut a Keras functional model into pipeline stages, one per device worker.

Paper: Jeon, Lee, Lee, Kim, Kim, "Implementation of AIoT Edge Cluster System via
Distributed Deep Learning Pipeline" (catalog ``jeon``). They cut a fine-tuned
MobileNetV2 of 157 layers into 5 stages of 27/27/36/53/14 layers "considering
the amount of computation"; each node sends its output activation to the next.

The cuts are those ``edgelab.models.graph`` finds valid (one tensor crosses,
no residual connection is cut); a stage is a contiguous run of layers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from edgelab.common.checks import is_integer
from edgelab.common.errors import ConfigError
from edgelab.models.graph import Graph, LayerCost, layer_costs, resolve_model, tensor_bytes, tensor_shape

if TYPE_CHECKING:
    import keras
    import pandas as pd

BALANCES = ("macs", "params", "time")
# Jeon et al. l.163: layers per stage of the 157-layer model.
JEON_STAGE_SIZES = (27, 27, 36, 53, 14)


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


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _check_cuts(graph: Graph, cuts: Sequence[int | str]) -> tuple[int, ...]:
    names = {layer.name: i for i, layer in enumerate(graph.layers)}
    valid = [i for i in range(len(graph.layers) - 1) if graph.why_not(i) is None]
    indices = []
    for cut in cuts:
        i = names.get(cut, -1) if isinstance(cut, str) else int(cut) if is_integer(cut) else -1
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


def _stage(graph: Graph, index: int, first: int, last: int, costs: list[LayerCost], times: Any) -> Stage:
    start, end = graph.span(first, last)
    ins = graph.crossing(start - 1) if start > 0 else list(graph.model.inputs)
    outs = graph.crossing(end) if end < graph.n_ops - 1 else list(graph.model.outputs)
    shape_in = tensor_shape(ins[0]) if len(ins) == 1 else tuple(tensor_shape(t) for t in ins)
    shape_out = tensor_shape(outs[0]) if len(outs) == 1 else tuple(tensor_shape(t) for t in outs)
    own = costs[first : last + 1]
    return Stage(
        index=index,
        first=first,
        last=last,
        layers=tuple(c.name for c in own),
        macs=sum(c.macs for c in own),
        params=sum(c.params for c in own),
        output_bytes=sum(tensor_bytes(t) for t in outs),
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
    graph = Graph(model)
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
        if not is_integer(n_stages) or not 1 <= n_stages <= len(valid) + 1:
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
    graph = Graph(model)
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
            new[id(t)] = keras.Input(shape=tensor_shape(t), dtype=t.dtype, name=t._keras_history.operation.name)
            inputs.append(new[id(t)])
    else:
        for j, t in enumerate(graph.crossing(start - 1)):
            name = f"{model.name}_stage{stage.index}_input" + (f"_{j}" if j else "")
            new[id(t)] = keras.Input(shape=tensor_shape(t), dtype=t.dtype, name=name)
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
