"""LeNet in the two forms Park et al. 2020 train on MNIST: an MLP and a CNN.

Paper: Park, Lee, Kim, "Hardware Resource Analysis in Distributed Training with
Edge Devices", Electronics 9(1):28, 2020 (doi 10.3390/electronics9010028).

The paper gives no layer widths. We follow the MXNet ``image-classification``
example the paper's setup matches (MXNet 0.9.5, batch 64):

* ``mlp``: 784 -> 128 -> 64 -> 10, ReLU (MXNet ``symbols/mlp.py``); 109,386 parameters.
* ``cnn``: LeNet-5 as in MXNet ``symbols/lenet.py``: conv 20@5x5 -> max-pool 2 ->
  conv 50@5x5 -> max-pool 2 -> fc 500 -> fc 10, tanh; 431,080 parameters.

Keras is imported inside the functions: importing TensorFlow costs ~620 MB of RSS,
and only device workers should pay it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from edgelab.errors import ConfigError

if TYPE_CHECKING:
    import keras

MODELS = ("mlp", "cnn")


@dataclass(frozen=True)
class ModelSpec:
    """Everything a worker needs to build the same model as every other worker.

    Parameters
    ----------
    name
        ``"mlp"`` or ``"cnn"``.
    learning_rate
        Step size of the local SGD optimizer on each device.
    weight_decay
        L2 decay the local SGD step applies to weights (not biases),
        ``w -= lr * wd * w`` (MXNet's ``wd``).
    seed
        Seed of the initial weights; every device and the parameter server share it.
    """

    name: str
    learning_rate: float = 0.05
    seed: int = 0
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        if self.name not in MODELS:
            raise ConfigError("model", self.name, f"one of {', '.join(MODELS)}")
        if not self.learning_rate > 0:
            raise ConfigError("learning_rate", self.learning_rate, "a number > 0")
        if not self.weight_decay >= 0:
            raise ConfigError("weight_decay", self.weight_decay, "a number >= 0")


# Layer shapes, kept as data so parameter counts and activation sizes are known
# without importing TensorFlow (the memory pre-check runs before any cluster work).
_DENSE_WIDTHS = {"mlp": (784, 128, 64, 10)}
_CNN_CONV = ((1, 20, 5), (20, 50, 5))  # (in_channels, filters, kernel)
_CNN_FC = (800, 500, 10)  # 4*4*50 -> 500 -> 10


def parameter_count(name: str) -> int:
    """Number of trainable parameters of a model, computed from its layer shapes.

    Examples
    --------
    >>> parameter_count("mlp"), parameter_count("cnn")
    (109386, 431080)
    """
    if name == "mlp":
        widths = _DENSE_WIDTHS["mlp"]
        return sum(a * b + b for a, b in zip(widths, widths[1:], strict=False))
    if name == "cnn":
        conv = sum(k * k * cin * f + f for cin, f, k in _CNN_CONV)
        fc = sum(a * b + b for a, b in zip(_CNN_FC, _CNN_FC[1:], strict=False))
        return conv + fc
    raise ConfigError("model", name, f"one of {', '.join(MODELS)}")


def activation_floats_per_sample(name: str) -> int:
    """Floats of forward activations one sample keeps for the backward pass."""
    if name == "mlp":
        return 784 + sum(_DENSE_WIDTHS["mlp"][1:])
    if name == "cnn":
        # input, conv1 (24x24x20), pool1 (12x12x20), conv2 (8x8x50), pool2 (4x4x50), fc
        return 28 * 28 + 24 * 24 * 20 + 12 * 12 * 20 + 8 * 8 * 50 + 4 * 4 * 50 + 500 + 10
    raise ConfigError("model", name, f"one of {', '.join(MODELS)}")


def build_model(spec: ModelSpec) -> keras.Model:
    """Build and compile the Keras model a spec names.

    The model is compiled with plain SGD (no momentum) and sparse categorical
    cross-entropy, so that averaging one step's weight deltas across devices is
    exactly synchronous SGD on the combined batch.
    """
    import keras

    keras.utils.set_random_seed(spec.seed)
    if spec.name == "mlp":
        layers = [
            keras.Input((28, 28)),
            keras.layers.Flatten(),
            keras.layers.Dense(128, activation="relu"),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10, activation="softmax"),
        ]
    else:
        layers = [
            keras.Input((28, 28, 1)),
            keras.layers.Conv2D(20, 5, activation="tanh"),  # (B, 24, 24, 20)
            keras.layers.MaxPooling2D(2),  # (B, 12, 12, 20)
            keras.layers.Conv2D(50, 5, activation="tanh"),  # (B, 8, 8, 50)
            keras.layers.MaxPooling2D(2),  # (B, 4, 4, 50)
            keras.layers.Flatten(),
            keras.layers.Dense(500, activation="tanh"),
            keras.layers.Dense(10, activation="softmax"),
        ]
    model = keras.Sequential(layers, name=f"lenet_{spec.name}")
    # For plain SGD Keras' decoupled decay equals MXNet's coupled wd, which
    # MXNet applies to weights only, never to biases.
    optimizer = keras.optimizers.SGD(learning_rate=spec.learning_rate, weight_decay=spec.weight_decay or None)
    optimizer.exclude_from_weight_decay(var_names=["bias"])
    model.compile(
        optimizer=optimizer,
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


def prepare_images(name: str, images_uint8: object) -> object:
    """Scale uint8 images to float32 in [0, 1] with the input shape the model expects."""
    import numpy as np

    x = np.asarray(images_uint8, dtype=np.float32) / 255.0
    return x[..., None] if name == "cnn" else x
