"""The models Park et al. 2020 train: LeNet on MNIST (an MLP and a CNN), and the CIFAR ResNet on CIFAR-10.

Paper: Park, Lee, Kim, "Hardware Resource Analysis in Distributed Training with
Edge Devices", Electronics 9(1):28, 2020 (doi 10.3390/electronics9010028).

The paper gives no layer widths. We follow the MXNet ``image-classification``
example the paper's setup matches (MXNet 0.9.5, batch 64):

* ``mlp``: 784 -> 128 -> 64 -> 10, ReLU (MXNet ``symbols/mlp.py``); 109,386 parameters.
* ``cnn``: LeNet-5 as in MXNet ``symbols/lenet.py``: conv 20@5x5 -> max-pool 2 ->
  conv 50@5x5 -> max-pool 2 -> fc 500 -> fc 10, tanh; 431,080 parameters.
* ``resnet<6n+2>`` (``resnet32``, ``resnet80``, ``resnet110``): the CIFAR ResNet v1
  of He et al. 2016 (section 4.2) on 28x28 crops of CIFAR's images, as MXNet's
  ``train_cifar10.py`` trains it (``image_shape='3,28,28'``; its ``symbols/resnet.py``
  has the paper's depths only for images of height <= 28): ``crop`` takes the
  centre of each image, MXNet's evaluation crop (its training crop is random, from
  the image padded by 4; no augmentation here). A 3x3 conv of 16 filters, three stages of n
  basic blocks (16, 32, 64 filters, stride 2 entering stages 2 and 3), global
  average pooling, fc 10. Where a block changes shape its shortcut is a 1x1
  projection (He et al.'s option B, as MXNet's and Keras' CIFAR examples do);
  He et al. report option A (zero-padded identity), hence slightly fewer
  parameters (``edgelab.models.costs.HE2016_PARAMETERS``): ResNet-32 466,906
  trainable against their 0.46 M, ResNet-110 1,730,714 against 1.7 M.

Parameter counts, FLOPs and activation sizes come from ``edgelab.models.costs``
(layer shapes, no TensorFlow); the tests check them against these Keras models.

Keras is imported inside the functions: importing TensorFlow costs ~620 MB of RSS,
and only device workers should pay it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from edgelab.common.errors import ConfigError
from edgelab.common.seeding import seeded
from edgelab.models.costs import RESNET_SIDE, activation_floats_per_sample, is_resnet, parameter_count, resnet_blocks
from edgelab.models.user import UserModel, UserModelPayload, prepared_shape, user_model

if TYPE_CHECKING:
    import keras

#: The LeNet variants; any ``resnet<6n+2>`` is a model too (``check_model``).
MODELS = ("mlp", "cnn")
#: The ResNets of the paper.
RESNETS = ("resnet32", "resnet80", "resnet110")

__all__ = [
    "MODELS",
    "RESNETS",
    "ModelSpec",
    "activation_floats_per_sample",
    "build_model",
    "check_model",
    "crop",
    "parameter_count",
    "prepare_images",
]


def check_model(name: str | UserModel) -> str | UserModel:
    """Return ``name`` if it names a built-in model or is a user's (``edgelab.models.user``), else ``ConfigError``."""
    if isinstance(name, UserModel):
        return name
    if name in MODELS:
        return name
    if isinstance(name, str) and is_resnet(name):
        resnet_blocks(name)
        return name
    raise ConfigError(
        "model",
        name,
        "mlp, cnn or resnet<depth> with depth = 6n+2 >= 8 (e.g. resnet32, resnet110), "
        "a Keras model or a function that builds one",
    )


@dataclass(frozen=True)
class ModelSpec:
    """Everything a worker needs to build the same model as every other worker.

    Parameters
    ----------
    name
        ``"mlp"``, ``"cnn"`` or ``"resnet<6n+2>"``, or a user's model (``edgelab.models.user.UserModel``).
    learning_rate
        Step size of the local SGD optimizer on each device.
    weight_decay
        L2 decay the local SGD step applies to weights (not biases),
        ``w -= lr * wd * w`` (MXNet's ``wd``).
    seed
        Seed of the initial weights; every device and the parameter server share it.
    """

    name: str | UserModel
    learning_rate: float = 0.05
    seed: int = 0
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str | UserModel):
            # A Keras model or a builder (called under the spec's seed), as TrainConfig takes one.
            object.__setattr__(self, "name", user_model(self.name, seed=self.seed))
        check_model(self.name)
        if not self.learning_rate > 0:
            raise ConfigError("learning_rate", self.learning_rate, "a number > 0")
        if not self.weight_decay >= 0:
            raise ConfigError("weight_decay", self.weight_decay, "a number >= 0")


def build_model(spec: ModelSpec, payload: UserModelPayload | None = None) -> keras.Model:
    """Build and compile the Keras model a spec names (a user's from its ``payload``).

    The model is compiled with plain SGD (no momentum) and sparse categorical
    cross-entropy (a user's model: its own loss), so that averaging one step's
    weight deltas across devices is exactly synchronous SGD on the combined batch.
    """
    import keras

    loss: Any = "sparse_categorical_crossentropy"
    if isinstance(spec.name, UserModel):
        if payload is None or payload.digest != spec.name.digest:
            raise RuntimeError(f"model {spec.name.key} was not handed to this device (runtime.load_shard does)")
        model, loss = payload.build(), payload.keras_loss()
    else:
        with seeded(spec.seed):
            model = _network(keras, spec.name)
    # For plain SGD Keras' decoupled decay equals MXNet's coupled wd, which
    # MXNet applies to weights only, never to biases.
    optimizer = keras.optimizers.SGD(learning_rate=spec.learning_rate, weight_decay=spec.weight_decay or None)
    optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    model.compile(
        optimizer=optimizer,
        loss=loss,
        metrics=["accuracy"],
    )
    return model


def _network(keras: Any, name: str) -> keras.Model:
    """The uncompiled network ``name``; Keras draws each initializer's seed as the layer is made."""
    if is_resnet(name):
        return _resnet(keras, resnet_blocks(name), name=name)
    if name == "mlp":
        layers = [
            keras.Input((28, 28)),
            keras.layers.Flatten(),
            keras.layers.Dense(128, activation="relu"),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10, activation="softmax"),
        ]
        return keras.Sequential(layers, name=f"lenet_{name}")
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
    return keras.Sequential(layers, name=f"lenet_{name}")


def prepare_images(name: str | UserModel, images_uint8: object) -> object:
    """uint8 images scaled to float32 in [0, 1] (a user's float features as they are), shaped for the model."""
    import numpy as np

    raw = crop(name, np.asarray(images_uint8))
    x = raw.astype(np.float32) / np.float32(255.0) if raw.dtype == np.uint8 else raw.astype(np.float32)
    if isinstance(name, UserModel):
        return x.reshape((len(x), *prepared_shape(name, x.shape[1:])))
    return x[..., None] if name == "cnn" else x


def crop(name: str | UserModel, images: Any) -> Any:
    """Images as ``name`` takes them: a built-in ResNet the centre ``RESNET_SIDE`` square of larger ones.

    Any other model, and images already that size, as they are (no copy).

    Examples
    --------
    >>> import numpy as np
    >>> crop("resnet32", np.zeros((5, 32, 32, 3), np.uint8)).shape, crop("cnn", np.zeros((5, 28, 28))).shape
    ((5, 28, 28, 3), (5, 28, 28))
    """
    if not (isinstance(name, str) and is_resnet(name)) or images.shape[1] <= RESNET_SIDE:
        return images
    top, left = (images.shape[1] - RESNET_SIDE) // 2, (images.shape[2] - RESNET_SIDE) // 2
    return images[:, top : top + RESNET_SIDE, left : left + RESNET_SIDE]


def _resnet(keras: Any, n: int, *, name: str) -> keras.Model:
    """CIFAR ResNet v1 with ``n`` basic blocks per stage (layer names match ``edgelab.models.costs``)."""
    layers = keras.layers

    def conv_bn(x: Any, prefix: str, filters: int, kernel: int, strides: int) -> Any:
        x = layers.Conv2D(
            filters,
            kernel,
            strides=strides,
            padding="same",
            use_bias=False,
            kernel_initializer="he_normal",
            name=f"{prefix}_conv",
        )(x)
        return layers.BatchNormalization(name=f"{prefix}_bn")(x)

    inputs = keras.Input((RESNET_SIDE, RESNET_SIDE, 3))
    x = layers.Activation("relu", name="stem_relu")(conv_bn(inputs, "stem", 16, 3, 1))
    c_in = 16
    for stage, c_out in enumerate((16, 32, 64)):
        for block in range(n):
            prefix = f"s{stage + 1}b{block + 1}"
            strides = 2 if block == 0 and stage > 0 else 1
            y = layers.Activation("relu", name=f"{prefix}_a_relu")(conv_bn(x, f"{prefix}_a", c_out, 3, strides))
            y = conv_bn(y, f"{prefix}_b", c_out, 3, 1)
            shortcut = conv_bn(x, f"{prefix}_proj", c_out, 1, strides) if c_in != c_out else x
            x = layers.Activation("relu", name=f"{prefix}_relu")(layers.Add(name=f"{prefix}_add")([y, shortcut]))
            c_in = c_out
    x = layers.GlobalAveragePooling2D(name="pool")(x)
    outputs = layers.Dense(10, activation="softmax", name="dense")(x)
    return keras.Model(inputs, outputs, name=name)
