"""The three networks of Zhang 2018's end / edge / cloud hierarchy, for CIFAR-100 images (32x32x3).

* end devices: MobileNet v1, width multiplier 0.5, 20 outputs (CIFAR-100's coarse labels);
* edge devices: ResNet-34, 100 outputs (fine labels);
* the cloud: a wide residual network, WRN-28-10, 100 outputs.

The report names the networks and their sizes (its Table 1: 0.84 M, 21.4 M
and 40.6 M parameters) but no implementation. Where its numbers pin one down,
we follow them:

* MobileNet is Keras' own (``keras.applications.MobileNet``), whose total with
  batch normalisation's moving statistics is the 0.84 M printed.
* ResNet-34's stem is a biased 7x7 convolution of stride 2 with 64 filters:
  the report's Table 3 gives that layer 9,472 parameters (7*7*3*64 + 64) and
  a 16x16x64 output. Then He et al.'s basic blocks (3, 4, 6, 3 of them; 64 to
  512 filters), no max-pooling after the stem (the image is already 16x16),
  global average pooling and a dense layer.
* WRN-28-10 is Zagoruyko and Komodakis' pre-activation network (four blocks
  per group, widths 160, 320, 640, a 3x3 stem of 16 filters without bias:
  432 parameters, as Table 3 says). Its canonical head pools the 8x8x640 map
  to 640 values: 36.5 M parameters, not the 40.6 M printed. ``head="flatten"``
  is the head that reproduces 40.6 M (a stride-1 8x8 average pool that leaves
  the map 8x8, flattened into the dense layer; see the catalog's P-WRN): the
  report's likely implementation, offered beside the canonical one and
  recorded by name, never silently.

Every builder takes a seed and returns an uncompiled ``keras.Model``; any other
Keras model (or a function that builds one) can stand in for a tier's.
"""

from __future__ import annotations

import functools
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgelab.common import checks
from edgelab.common.errors import ConfigError
from edgelab.common.seeding import seeded

if TYPE_CHECKING:
    import keras

#: CIFAR-100's images.
INPUT_SHAPE = (32, 32, 3)
#: The WRN heads: ``"pooled"`` (canonical, 36.5 M) and ``"flatten"`` (the report's 40.6 M).
WRN_HEADS = ("pooled", "flatten")
#: The networks ``build_tier_network`` builds by name.
TIER_NETWORK_NAMES = ("mobilenet", "resnet34", "wrn-28-10", "wrn-28-10-flatten")
#: Each tier's network in the report, by tier.
TIER_NETWORKS = {"end": "mobilenet", "edge": "resnet34", "cloud": "wrn-28-10"}


def mobilenet(*, classes: int = 20, alpha: float = 0.5, seed: int = 0) -> keras.Model:
    """MobileNet v1 at width ``alpha`` (depth multiplier 1) for 32x32 images, ``classes`` outputs."""
    import keras

    checks.integer("classes", classes, at_least=2)
    if not 0 < alpha <= 1:
        raise ConfigError("alpha", alpha, "a width multiplier in (0, 1]")
    with seeded(seed):
        return keras.applications.MobileNet(
            input_shape=INPUT_SHAPE, alpha=alpha, depth_multiplier=1, weights=None, classes=classes, name="mobilenet"
        )


def resnet34(*, classes: int = 100, seed: int = 0) -> keras.Model:
    """ResNet-34 (basic blocks 3-4-6-3) with a biased 7x7/2 stem, for 32x32 images."""
    import keras

    checks.integer("classes", classes, at_least=2)
    with seeded(seed):
        layers = keras.layers
        inputs = keras.Input(INPUT_SHAPE)
        x = layers.Conv2D(64, 7, strides=2, padding="same", name="stem_conv")(inputs)  # 16x16x64, 9,472 parameters
        x = layers.ReLU()(layers.BatchNormalization(name="stem_bn")(x))
        for stage, (blocks, filters) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512), strict=True)):
            for block in range(blocks):
                strides = 2 if stage > 0 and block == 0 else 1
                name = f"stage{stage + 1}_block{block + 1}"
                shortcut = x
                y = layers.Conv2D(filters, 3, strides=strides, padding="same", use_bias=False, name=f"{name}_conv1")(x)
                y = layers.ReLU()(layers.BatchNormalization(name=f"{name}_bn1")(y))
                y = layers.Conv2D(filters, 3, padding="same", use_bias=False, name=f"{name}_conv2")(y)
                y = layers.BatchNormalization(name=f"{name}_bn2")(y)
                if strides != 1 or shortcut.shape[-1] != filters:
                    shortcut = layers.Conv2D(filters, 1, strides=strides, use_bias=False, name=f"{name}_proj")(shortcut)
                    shortcut = layers.BatchNormalization(name=f"{name}_proj_bn")(shortcut)
                x = layers.ReLU()(layers.Add()([shortcut, y]))
        x = layers.GlobalAveragePooling2D()(x)
        outputs = layers.Dense(classes, activation="softmax", name="fc")(x)
        return keras.Model(inputs, outputs, name="resnet34")


def wide_resnet(
    *, depth: int = 28, width: int = 10, classes: int = 100, head: str = "pooled", seed: int = 0
) -> keras.Model:
    """WRN-``depth``-``width``: pre-activation wide residual network for 32x32 images.

    ``head="pooled"`` averages the last 8x8 map to one value per channel
    (canonical); ``head="flatten"`` keeps the map (a stride-1 8x8 pool with
    'same' padding) and flattens it into the dense layer, without bias.
    """
    import keras

    checks.integer("classes", classes, at_least=2)
    if not (isinstance(depth, int) and depth >= 10 and (depth - 4) % 6 == 0):
        raise ConfigError("depth", depth, "an integer 6n+4 >= 10 (e.g. 16, 28, 40)")
    checks.integer("width", width, at_least=1)
    if head not in WRN_HEADS:
        raise ConfigError("head", head, f"one of {', '.join(WRN_HEADS)}")
    with seeded(seed):
        layers = keras.layers
        blocks = (depth - 4) // 6
        inputs = keras.Input(INPUT_SHAPE)
        x = layers.Conv2D(16, 3, padding="same", use_bias=False, name="stem_conv")(inputs)  # 432 parameters
        for group, filters in enumerate((16 * width, 32 * width, 64 * width)):
            for block in range(blocks):
                strides = 2 if group > 0 and block == 0 else 1
                name = f"group{group + 1}_block{block + 1}"
                pre = layers.ReLU()(layers.BatchNormalization(name=f"{name}_bn1")(x))
                y = layers.Conv2D(filters, 3, strides=strides, padding="same", use_bias=False, name=f"{name}_conv1")(
                    pre
                )
                y = layers.ReLU()(layers.BatchNormalization(name=f"{name}_bn2")(y))
                y = layers.Conv2D(filters, 3, padding="same", use_bias=False, name=f"{name}_conv2")(y)
                if strides != 1 or x.shape[-1] != filters:
                    x = layers.Conv2D(filters, 1, strides=strides, use_bias=False, name=f"{name}_proj")(pre)
                x = layers.Add()([x, y])
        x = layers.ReLU()(layers.BatchNormalization(name="final_bn")(x))
        if head == "pooled":
            x = layers.GlobalAveragePooling2D()(x)
            outputs = layers.Dense(classes, activation="softmax", name="fc")(x)
        else:
            x = layers.AveragePooling2D(pool_size=8, strides=1, padding="same")(x)
            x = layers.Flatten()(x)
            outputs = layers.Dense(classes, activation="softmax", use_bias=False, name="fc")(x)
        return keras.Model(inputs, outputs, name=f"wrn-{depth}-{width}" + ("" if head == "pooled" else "-flatten"))


def build_tier_network(name: str, *, seed: int = 0, **options: Any) -> keras.Model:
    """The network ``name`` (``"mobilenet"``, ``"resnet34"``, ``"wrn-28-10"``, ``"wrn-28-10-flatten"``)."""
    builders = {
        "mobilenet": lambda: mobilenet(seed=seed, **options),
        "resnet34": lambda: resnet34(seed=seed, **options),
        "wrn-28-10": lambda: wide_resnet(seed=seed, **options),
        "wrn-28-10-flatten": lambda: wide_resnet(head="flatten", seed=seed, **options),
    }
    if name not in builders:
        raise ConfigError("network", name, f"one of {', '.join(TIER_NETWORK_NAMES)}")
    return builders[name]()


def tier_network(parameter: str, network: Any, seed: int = 0) -> tuple[str, Any]:
    """A tier's network as an experiment plans with it: its name, and what each device of the tier builds.

    A built-in is named as it is. A user's (a Keras model, or a function of no
    arguments that builds one under ``seed``) is named by its name and digest
    (``edgelab.models.user``), and must take CIFAR's 32x32x3 images. ``ConfigError``
    names ``parameter`` for anything else.
    """
    if isinstance(network, str):
        if network not in TIER_NETWORK_NAMES:
            allowed = f"one of {', '.join(TIER_NETWORK_NAMES)}, a Keras model or a function that builds one"
            raise ConfigError(parameter, network, allowed)
        return network, network
    try:
        key, shape = _users_network(network, seed)
    except ConfigError as err:  # named as the experiment names it
        raise ConfigError(parameter, err.value, err.allowed) from err
    if shape != INPUT_SHAPE:
        raise ConfigError(parameter, key, f"a network taking {INPUT_SHAPE} images; it takes {shape}")
    return key, network


@functools.lru_cache(maxsize=8)
def _users_network(network: Any, seed: int) -> tuple[str, tuple[int, ...]]:
    # Built, serialized and digested once per network and seed, however often a plan asks for its name.
    from edgelab.models.user import user_model

    user = user_model(network, seed=seed)
    return user.key, user.input_shape


def sizes(model: keras.Model) -> dict[str, int]:
    """Parameter counts (total, trainable) of ``model``, and its float32 bytes with 0, 1 and 2 optimizer slots.

    The report's weights files differ in bytes per parameter (the catalog's
    P-size): weights alone, weights with SGD's momentum (one slot per trainable
    parameter), weights with Adam's two moments.
    """
    total = int(sum(math.prod(w.shape) for w in model.weights))
    trainable = int(sum(math.prod(w.shape) for w in model.trainable_weights))
    return {
        "parameters": total,
        "trainable_parameters": trainable,
        "weights_bytes": 4 * total,
        "with_momentum_bytes": 4 * (total + trainable),
        "with_adam_bytes": 4 * (total + 2 * trainable),
    }


#: The optimizer the report trains each network with (its section 4.1); a checkpoint holds its state.
REPORT_OPTIMIZERS = {
    "mobilenet": "adam",
    "resnet34": "adam",
    "wrn-28-10": "sgd_nesterov",
    "wrn-28-10-flatten": "sgd_nesterov",
}


def saved_bytes(model: keras.Model, optimizer: str, folder: str | os.PathLike[str]) -> dict[str, int]:
    """Bytes of the weights file Keras writes for ``model`` alone and once compiled with ``optimizer``.

    ``optimizer`` is ``"adam"``, ``"sgd_nesterov"`` (momentum 0.9) or
    ``"sgd"``. A compiled model's weights file holds the optimizer's slots
    too, which is what the report's file sizes show (the catalog's P-size).
    The model is compiled in place.
    """
    import keras

    makers = {
        "adam": lambda: keras.optimizers.Adam(0.01),
        "sgd_nesterov": lambda: keras.optimizers.SGD(0.1, momentum=0.9, nesterov=True),
        "sgd": lambda: keras.optimizers.SGD(0.1),
    }
    if optimizer not in makers:
        raise ConfigError("optimizer", optimizer, f"one of {', '.join(makers)}")
    folder = Path(folder)
    alone, compiled = folder / f"{model.name}.weights.h5", folder / f"{model.name}-{optimizer}.weights.h5"
    model.save_weights(alone)
    model.compile(optimizer=makers[optimizer](), loss="sparse_categorical_crossentropy")
    model.optimizer.build(model.trainable_variables)
    model.save_weights(compiled)
    return {"weights_file_bytes": alone.stat().st_size, "with_optimizer_file_bytes": compiled.stat().st_size}
