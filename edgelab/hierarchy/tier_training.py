"""Train a tier's network and score it on CIFAR-100's two label levels (Zhang 2018, Table 1's accuracy rows).

The end devices' MobileNet answers the 20 coarse labels; the edge's ResNet-34
and the cloud's WRN-28-10 answer the 100 fine ones, and their coarse accuracy
is that of the fine answer's superclass (the report does not say how it got
one; the catalog's reading). ``train_and_score`` runs wherever it is called:
the experiment submits it to a device of the hierarchy's cloud tier, where a
deployment would train before pushing the networks down.

Each built-in network trains with the report's recipe (its section 4.1):
optimizer, learning rate and batch size, WRN's step schedule. The report's
augmentations (MobileNet's, ResNet's flips and "squeezing", WRN's ZCA) and
its 100-500 epochs are not reproduced: the number of epochs and training
images are the caller's, and the result records both, so a brief run is
never mistaken for the report's.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from edgelab.common import checks
from edgelab.common.errors import ConfigError
from edgelab.common.seeding import seeded
from edgelab.models.tiers import TIER_NETWORK_NAMES, build_tier_network

if TYPE_CHECKING:
    import keras

LEVELS = ("coarse", "fine")
#: The label level each built-in network answers (Table 1: MobileNet has only the 20-label head).
NETWORK_LEVELS = {"mobilenet": "coarse", "resnet34": "fine", "wrn-28-10": "fine", "wrn-28-10-flatten": "fine"}


@dataclass(frozen=True)
class Recipe:
    """How a network is trained: optimizer, learning rate (and its drops), batch size, the report's epochs."""

    optimizer: str  # "adam" or "sgd_nesterov" (momentum 0.9)
    learning_rate: float
    batch_size: int
    report_epochs: str
    drop_epochs: tuple[int, ...] = ()  # the learning rate is multiplied by ``drop_factor`` at each
    drop_factor: float = 1.0
    note: str = ""


#: The report's recipes (section 4.1; the catalog's S-models).
RECIPES = {
    "mobilenet": Recipe("adam", 0.01, 32, "100"),
    # The report names Adam but not its learning rate: Keras' default.
    "resnet34": Recipe("adam", 0.001, 32, "up to 500", note="learning rate not stated: Adam's default 0.001"),
    "wrn-28-10": Recipe("sgd_nesterov", 0.1, 128, "200", drop_epochs=(60, 120, 160), drop_factor=0.2),
    "wrn-28-10-flatten": Recipe("sgd_nesterov", 0.1, 128, "200", drop_epochs=(60, 120, 160), drop_factor=0.2),
}
#: For a user's own network: Adam at Keras' default rate, batch 32.
DEFAULT_RECIPE = Recipe("adam", 0.001, 32, "n/a", note="a user's network: Adam 0.001, batch 32")


def level_of(network: Any, level: str | None = None) -> str:
    """The label level ``network`` is trained on: ``level`` if given, else the built-in network's."""
    if level is not None:
        if level not in LEVELS:
            raise ConfigError("level", level, f"one of {', '.join(LEVELS)}")
        return level
    if isinstance(network, str):
        if network not in NETWORK_LEVELS:
            raise ConfigError("network", network, f"one of {', '.join(TIER_NETWORK_NAMES)}")
        return NETWORK_LEVELS[network]
    raise ConfigError("level", level, "'coarse' or 'fine': required for a network that is not built in")


def score(probabilities: np.ndarray, y_fine: np.ndarray, fine_to_coarse: np.ndarray, level: str) -> dict[str, Any]:
    """Coarse and fine accuracy of a network's answers; a coarse network has no fine accuracy (None).

    A fine network's coarse answer is the superclass of its fine answer.
    """
    level_of(None, level)
    mapping = np.asarray(fine_to_coarse)
    answers = np.argmax(np.asarray(probabilities), axis=1)
    y_fine = np.asarray(y_fine)
    y_coarse = mapping[y_fine]
    if level == "coarse":
        return {"coarse_accuracy": float(np.mean(answers == y_coarse)), "fine_accuracy": None}
    return {
        "coarse_accuracy": float(np.mean(mapping[answers] == y_coarse)),
        "fine_accuracy": float(np.mean(answers == y_fine)),
    }


def build(network: Any, classes: int, seed: int) -> keras.Model:
    """The network to train: a built-in name with ``classes`` outputs, a user's Keras model, or its builder."""
    import keras

    if isinstance(network, str):
        return build_tier_network(network, classes=classes, seed=seed)
    if isinstance(network, keras.Model):
        model = network
    elif callable(network):
        with seeded(seed):
            model = network()
    else:
        raise ConfigError("network", network, f"one of {', '.join(TIER_NETWORK_NAMES)}, a Keras model or a builder")
    outputs = model.output_shape[-1]
    if outputs != classes:
        raise ConfigError("network", model.name, f"a model with {classes} outputs (it has {outputs})")
    return model


def train_and_score(
    network: Any,
    data: dict[str, np.ndarray],
    *,
    level: str | None = None,
    epochs: int = 1,
    seed: int = 0,
    run_eagerly: bool = False,
    recipe: Recipe | None = None,
) -> dict[str, Any]:
    """Train ``network`` on ``data``'s training images at its label level and score it on the test images.

    ``data`` holds ``x_train`` and ``x_test`` (uint8 images), ``y_train_fine``,
    ``y_test_fine`` and ``fine_to_coarse``. ``run_eagerly`` skips Keras'
    graph tracing (10-30 s per network on two cores): faster for a handful of
    steps, slower for many; the arithmetic is the same. Returns the accuracies,
    the per-epoch loss, what was trained and what it cost (wall and CPU seconds
    of the process).
    """
    import keras

    level = level_of(network, level)
    checks.integer("epochs", epochs, at_least=1)
    recipe = recipe or (RECIPES.get(network, DEFAULT_RECIPE) if isinstance(network, str) else DEFAULT_RECIPE)
    mapping = np.asarray(data["fine_to_coarse"])
    classes = int(mapping.max()) + 1 if level == "coarse" else len(mapping)
    y_train = data["y_train_fine"] if level == "fine" else mapping[data["y_train_fine"]]
    model = build(network, classes, seed)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    model.compile(
        optimizer=_optimizer(recipe, steps_per_epoch=-(-len(y_train) // recipe.batch_size)),
        loss="sparse_categorical_crossentropy",
        run_eagerly=run_eagerly,
    )
    keras.utils.set_random_seed(seed)  # the order fit shuffles the images in
    history = model.fit(
        _pixels(data["x_train"]), np.asarray(y_train), batch_size=recipe.batch_size, epochs=epochs, verbose=0
    )
    train_wall, train_cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    probabilities = model.predict(_pixels(data["x_test"]), batch_size=256, verbose=0)
    scored = score(probabilities, data["y_test_fine"], mapping, level)
    return {
        **scored,
        "network": network if isinstance(network, str) else str(model.name),
        "level": level,
        "classes": classes,
        "train_images": len(y_train),
        "test_images": len(data["y_test_fine"]),
        "epochs": epochs,
        "recipe": asdict(recipe),
        "loss": [float(v) for v in history.history["loss"]],
        "train_wall_s": train_wall,
        "train_cpu_s": train_cpu,
        "pid": os.getpid(),
    }


def _pixels(images: np.ndarray) -> np.ndarray:
    # Pixels scaled to [0, 1], as the hierarchy feeds them (edgelab.hierarchy.tiered).
    return np.asarray(images, np.float32) / np.float32(255.0)


def _optimizer(recipe: Recipe, *, steps_per_epoch: int) -> keras.optimizers.Optimizer:
    import keras

    rate: Any = recipe.learning_rate
    if recipe.drop_epochs:
        rates = [recipe.learning_rate * recipe.drop_factor**i for i in range(len(recipe.drop_epochs) + 1)]
        rate = keras.optimizers.schedules.PiecewiseConstantDecay(
            [e * steps_per_epoch for e in recipe.drop_epochs], rates
        )
    if recipe.optimizer == "adam":
        return keras.optimizers.Adam(rate)
    if recipe.optimizer == "sgd_nesterov":
        return keras.optimizers.SGD(rate, momentum=0.9, nesterov=True)
    raise ConfigError("optimizer", recipe.optimizer, "'adam' or 'sgd_nesterov'")
