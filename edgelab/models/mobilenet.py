"""Jeon et al.'s MobileNetV2 as one flat functional model of 157 layers, and the layer counts it could be."""

from __future__ import annotations

import numbers
import os
from pathlib import Path
from typing import TYPE_CHECKING

from edgelab.common.checks import is_integer
from edgelab.common.errors import ConfigError

if TYPE_CHECKING:
    import keras


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

    if not is_integer(num_classes) or num_classes < 1:
        raise ConfigError("num_classes", num_classes, "an integer >= 1")
    if not is_integer(image_size) or image_size < 32:
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
