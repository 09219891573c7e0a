"""The survey's convolution cost formulas, beside the MACs and parameters of real Keras layers.

Qiao et al. (lines 262-279) give the cost of a standard convolution,
K·K·M·N·W_out·H_out "computation steps" (one step = one multiply-accumulate),
of MobileNet's depthwise separable one, K·K·W_out·H_out·M + M·N·W_out·H_out,
their ratio 1/N + 1/K², and say that group convolution, ShuffleNet's channel
shuffle and SqueezeNet cut cost. Here the formulas are plain functions; the
counts come from walking real Keras layers (``edgelab.pipeline.partition.
layer_costs``: kernel elements times output positions, groups and depth
multiplier included), and the builders make the layers the formulas describe,
MobileNet V1 and its standard-convolution twin, SqueezeNet 1.0 and AlexNet.

``edgelab.models.costs`` describes edgelab's own models from shapes without
TensorFlow; this module imports Keras (inside each function) and counts what
Keras built.

References: Howard et al. 2017, MobileNets, arxiv.org/abs/1704.04861; Zhang et
al. 2017, ShuffleNet, arxiv.org/abs/1707.01083; Iandola et al. 2016,
SqueezeNet, arxiv.org/abs/1602.07360; Krizhevsky et al. 2012, AlexNet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from edgelab.common import checks
from edgelab.common.errors import ConfigError
from edgelab.common.seeding import seeded

if TYPE_CHECKING:
    import keras

#: Whole networks ``build_network`` makes; MobileNet's twin has each separable pair as one standard 3×3 conv.
NETWORKS = ("mobilenet", "mobilenet_twin", "squeezenet", "alexnet", "alexnet_single_tower")
#: Layer kinds ``build_layer`` makes: the standard conv (grouped when ``groups`` > 1) and MobileNet's two steps.
LAYER_KINDS = ("standard", "separable", "depthwise", "pointwise")


@dataclass(frozen=True)
class ConvShape:
    """One convolution of the survey's symbols: K×K kernel, M in, N out channels, W_out = H_out = W, G groups.

    Stride 1 and "same" padding, so the output is W×W like the input; no bias
    (the formulas count multiply-accumulates of the kernel only).
    """

    k: int
    m: int
    n: int
    w: int
    groups: int = 1

    def __post_init__(self) -> None:
        for name in ("k", "m", "n", "w", "groups"):
            checks.integer(name.upper() if len(name) == 1 else name, getattr(self, name), at_least=1, numpy=True)
        if self.m % self.groups or self.n % self.groups:
            raise ConfigError("groups", self.groups, f"a divisor of both M={self.m} and N={self.n}")

    @property
    def standard_macs(self) -> int:
        """The survey's K·K·M·N·W_out·H_out, divided by G for a grouped conv (each filter sees M/G channels)."""
        return group_conv_macs(k=self.k, m=self.m, n=self.n, w=self.w, groups=self.groups)

    @property
    def separable_macs(self) -> int:
        """The survey's K·K·W_out·H_out·M + 1·1·M·N·W_out·H_out."""
        return separable_macs(k=self.k, m=self.m, n=self.n, w=self.w)

    def label(self) -> str:
        """``K=3 M=32 N=64 W=14`` (and ``G=4`` when grouped)."""
        groups = f" G={self.groups}" if self.groups > 1 else ""
        return f"K={self.k} M={self.m} N={self.n} W={self.w}{groups}"


# ------------------------------------------------------------- formulas ----


def conv_macs(*, k: int, m: int, n: int, w: int, h: int | None = None) -> int:
    """Standard convolution: K·K·M·N·W_out·H_out (qiao/eq-conv-cost); ``h`` defaults to ``w``."""
    return group_conv_macs(k=k, m=m, n=n, w=w, h=h, groups=1)


def group_conv_macs(*, k: int, m: int, n: int, w: int, groups: int, h: int | None = None) -> int:
    """Group convolution: K·K·(M/G)·N·W_out·H_out, 1/G of the standard cost (qiao/eq-group-conv, derived)."""
    h = w if h is None else h
    given = zip("KMNWHG", (k, m, n, w, h, groups), strict=True)
    k, m, n, w, h, groups = (checks.integer(s, v, at_least=1, numpy=True) for s, v in given)
    if m % groups:
        raise ConfigError("groups", groups, f"a divisor of M={m}")
    return k * k * (m // groups) * n * w * h


def separable_macs(*, k: int, m: int, n: int, w: int, h: int | None = None) -> int:
    """Depthwise separable: K·K·W_out·H_out·M + 1·1·M·N·W_out·H_out (qiao/eq-dwconv-cost)."""
    h = w if h is None else h
    given = zip("KMNWH", (k, m, n, w, h), strict=True)
    k, m, n, w, h = (checks.integer(s, v, at_least=1, numpy=True) for s, v in given)
    return k * k * w * h * m + m * n * w * h


def separable_ratio(*, k: int, n: int) -> float:
    """Cost of the separable layer over the standard one: 1/N + 1/K² (qiao/eq-dwconv-ratio)."""
    n, k = checks.integer("N", n, at_least=1, numpy=True), checks.integer("K", k, at_least=1, numpy=True)
    return float(1 / n + 1 / k**2)


# ------------------------------------------------------------- counting ----


def macs_by_layer(model: keras.Model) -> dict[str, int]:
    """Multiply-accumulates per image of every layer that has any, counted from the built Keras layers."""
    from edgelab.models.graph import layer_costs

    return {c.name: c.macs for c in layer_costs(model) if c.macs}


def counted_macs(model: keras.Model) -> int:
    """Multiply-accumulates per image of the whole model (convolutions and dense layers; see ``layer_costs``)."""
    return sum(macs_by_layer(model).values())


# ------------------------------------------------------------- builders ----


def build_layer(kind: str, shape: ConvShape, *, batch: int | None = None, seed: int = 0) -> keras.Model:
    """A model of one ``kind`` of convolution on a W×W×M input (see ``LAYER_KINDS``).

    ``standard``: Conv2D(N, K, groups=G); ``separable``: DepthwiseConv2D(K) then
    Conv2D(N, 1), the survey's two steps; ``depthwise`` and ``pointwise``: each
    step alone (the pointwise one on the W×W×M maps the depthwise step leaves).
    """
    import keras

    if kind not in LAYER_KINDS:
        raise ConfigError("kind", kind, f"one of {', '.join(LAYER_KINDS)}")
    if kind != "standard" and shape.groups != 1:
        raise ConfigError("groups", shape.groups, f"1 for a {kind} layer (groups apply to the standard conv)")
    layers = keras.layers
    with seeded(seed):
        x = inputs = keras.Input((shape.w, shape.w, shape.m), batch_size=batch)
        if kind == "standard":
            x = layers.Conv2D(shape.n, shape.k, padding="same", groups=shape.groups, use_bias=False, name="conv")(x)
        if kind in ("separable", "depthwise"):
            x = layers.DepthwiseConv2D(shape.k, padding="same", use_bias=False, name="depthwise")(x)  # (W, W, M)
        if kind in ("separable", "pointwise"):
            x = layers.Conv2D(shape.n, 1, use_bias=False, name="pointwise")(x)  # (W, W, N)
        return keras.Model(inputs, x, name=f"{kind}_{shape.label().replace(' ', '_').replace('=', '')}")


def mobilenet(*, size: int = 224, alpha: float = 1.0, seed: int = 0) -> keras.Model:
    """``keras.applications.MobileNet`` (V1, with its top, no weights: nothing is downloaded)."""
    import keras

    with seeded(seed):
        return keras.applications.MobileNet(input_shape=(size, size, 3), alpha=alpha, weights=None)


def standard_twin(model: keras.Model, *, seed: int = 0) -> keras.Model:
    """MobileNet V1 with each separable pair replaced by one standard conv of the depthwise kernel and stride.

    MobileNet V1 is a chain, so its layers are re-applied in order: a
    DepthwiseConv2D, its BatchNormalization and ReLU are dropped, and the
    pointwise 1×1 Conv2D after them becomes Conv2D(N, K, strides, padding of
    the depthwise). Every other layer is a fresh copy of its config.
    """
    import keras

    pending: Any = None  # the depthwise layer whose pointwise partner is next
    with seeded(seed):
        x = inputs = keras.Input(model.input_shape[1:])
        for layer in model.layers[1:]:
            if isinstance(layer, keras.layers.DepthwiseConv2D):
                pending = layer
                continue
            if pending is not None and not isinstance(layer, keras.layers.Conv2D):
                continue  # the depthwise step's batch norm and activation
            if pending is not None:
                x = keras.layers.Conv2D(
                    layer.filters,
                    pending.kernel_size,
                    strides=pending.strides,
                    padding=pending.padding,
                    use_bias=False,
                    name=layer.name.replace("_pw_", "_std_"),
                )(x)
                pending = None
                continue
            x = type(layer).from_config(layer.get_config())(x)
        return keras.Model(inputs, x, name=f"{model.name}_standard_twin")


def _fire(x: Any, squeeze: int, expand: int, name: str) -> Any:
    """SqueezeNet's Fire module: a 1×1 squeeze, then 1×1 and 3×3 expands side by side."""
    import keras

    layers = keras.layers
    s = layers.Conv2D(squeeze, 1, activation="relu", name=f"{name}_squeeze1x1")(x)
    e1 = layers.Conv2D(expand, 1, activation="relu", name=f"{name}_expand1x1")(s)
    e3 = layers.Conv2D(expand, 3, padding="same", activation="relu", name=f"{name}_expand3x3")(s)
    return layers.Concatenate(name=f"{name}_concat")([e1, e3])


def squeezenet(*, size: int = 224, classes: int = 1000, seed: int = 0) -> keras.Model:
    """SqueezeNet 1.0 (Iandola et al. 2016, Table 1; torchvision's ``squeezenet1_0`` layout)."""
    import keras

    layers = keras.layers
    with seeded(seed):
        x = inputs = keras.Input((size, size, 3))
        x = layers.Conv2D(96, 7, strides=2, activation="relu", name="conv1")(x)
        x = layers.MaxPooling2D(3, 2, name="pool1")(x)
        fires = [(16, 64), (16, 64), (32, 128), "pool", (32, 128), (48, 192), (48, 192), (64, 256), "pool", (64, 256)]
        index = 2
        for fire in fires:
            if fire == "pool":
                x = layers.MaxPooling2D(3, 2, name=f"pool{index - 1}")(x)
                continue
            x = _fire(x, *fire, name=f"fire{index}")
            index += 1
        x = layers.Dropout(0.5)(x)
        x = layers.Conv2D(classes, 1, activation="relu", name="conv10")(x)
        x = layers.GlobalAveragePooling2D()(x)
        return keras.Model(inputs, layers.Softmax()(x), name="squeezenet1_0")


def alexnet(*, two_group: bool = True, size: int = 227, classes: int = 1000, seed: int = 0) -> keras.Model:
    """AlexNet: the original two-tower network (conv2, conv4, conv5 in 2 groups) or torchvision's single tower."""
    import keras

    layers = keras.layers
    # (filters, kernel, stride, groups, pool after): the 2012 paper's towers, or torchvision's alexnet
    convs = (
        [(96, 11, 4, 1, True), (256, 5, 1, 2, True), (384, 3, 1, 1, False), (384, 3, 1, 2, False), (256, 3, 1, 2, True)]
        if two_group
        else [
            (64, 11, 4, 1, True),
            (192, 5, 1, 1, True),
            (384, 3, 1, 1, False),
            (256, 3, 1, 1, False),
            (256, 3, 1, 1, True),
        ]
    )
    with seeded(seed):
        x = inputs = keras.Input((size, size, 3))
        for i, (filters, kernel, stride, groups, pool) in enumerate(convs, start=1):
            pad = "valid" if i == 1 else "same"
            x = layers.Conv2D(
                filters, kernel, strides=stride, padding=pad, groups=groups, activation="relu", name=f"conv{i}"
            )(x)
            if pool:
                x = layers.MaxPooling2D(3, 2, name=f"pool{i}")(x)
        x = layers.Flatten()(x)  # 6 x 6 x 256 = 9216
        for i, units in enumerate((4096, 4096), start=6):
            x = layers.Dropout(0.5)(layers.Dense(units, activation="relu", name=f"fc{i}")(x))
        outputs = layers.Dense(classes, activation="softmax", name="fc8")(x)
        return keras.Model(inputs, outputs, name="alexnet_two_group" if two_group else "alexnet_single_tower")


def build_network(name: str, *, seed: int = 0) -> keras.Model:
    """One of ``NETWORKS`` at 224×224 (AlexNet 227×227), 1000 classes, untrained."""
    if name not in NETWORKS:
        raise ConfigError("network", name, f"one of {', '.join(NETWORKS)}")
    if name.startswith("mobilenet"):
        model = mobilenet(seed=seed)
        return standard_twin(model, seed=seed) if name == "mobilenet_twin" else model
    if name == "squeezenet":
        return squeezenet(seed=seed)
    return alexnet(two_group=name == "alexnet", seed=seed)


# ---------------------------------------------------------- connectivity ----


def channel_shuffle(x: Any, groups: int) -> Any:
    """ShuffleNet's channel shuffle: channels viewed as (G, C/G), transposed, flattened."""
    import keras

    ops = keras.ops
    spatial, channels = tuple(x.shape[1:-1]), x.shape[-1]
    y = ops.reshape(x, (-1, *spatial, groups, channels // groups))  # (B, ..., G, C/G)
    y = ops.swapaxes(y, -1, -2)  # (B, ..., C/G, G)
    return ops.reshape(y, (-1, *spatial, channels))


def group_mask(layer: Any) -> np.ndarray:
    """Which input channels each output channel's filter sees in a built Conv2D: (in, out) booleans, from ``groups``."""
    groups, c_out = layer.groups, layer.filters
    c_in = layer.kernel.shape[-2] * groups  # the kernel holds M/G input channels per filter
    return (np.arange(c_in)[:, None] // (c_in // groups)) == (np.arange(c_out)[None, :] // (c_out // groups))


def connectivity(*, channels: int, groups: int, shuffle: bool) -> np.ndarray:
    """Which input channels reach which output channel through two stacked 1×1 group convs (qiao/C16).

    Computed from the layer structure: each built Conv2D's group mask, and
    (with ``shuffle``) the permutation ``channel_shuffle`` applies to the
    channel indices between them, as in ShuffleNet.

    Returns
    -------
    numpy.ndarray
        Boolean (input channel, output channel) matrix.
    """
    import keras

    ConvShape(k=1, m=channels, n=channels, w=1, groups=groups)  # checks that G divides the channels
    first, second = (keras.layers.Conv2D(channels, 1, groups=groups, use_bias=False) for _ in range(2))
    for layer in (first, second):
        layer.build((None, 1, 1, channels))
    moved = np.eye(channels, dtype=int)
    if shuffle:
        order = np.asarray(channel_shuffle(np.arange(channels, dtype="float32").reshape(1, 1, 1, channels), groups))
        moved = moved[:, order.ravel().astype(int)]  # position j receives channel order[j]
    return (group_mask(first).astype(int) @ moved @ group_mask(second).astype(int)) > 0
