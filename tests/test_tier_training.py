"""Training a tier's network and scoring it at CIFAR-100's two label levels."""

from __future__ import annotations

import numpy as np
import pytest

from edgelab.common.errors import ConfigError
from edgelab.hierarchy.tier_training import RECIPES, Recipe, level_of, score, train_and_score

# Four fine classes in two superclasses: {0, 1} -> 0, {2, 3} -> 1.
FINE_TO_COARSE = np.array([0, 0, 1, 1])


def test_a_fine_networks_coarse_answer_is_its_fine_answers_superclass() -> None:
    probabilities = np.array([[0.9, 0.1, 0, 0], [0.1, 0.8, 0.1, 0], [0, 0, 0.2, 0.8], [0.6, 0, 0.4, 0]])
    y_fine = np.array([0, 0, 3, 2])
    # answers 0, 1, 3, 0: fine right twice; coarse right three times (1 is 0's sibling)
    assert score(probabilities, y_fine, FINE_TO_COARSE, "fine") == {"coarse_accuracy": 0.75, "fine_accuracy": 0.5}


def test_a_coarse_network_is_scored_against_the_superclasses_and_has_no_fine_accuracy() -> None:
    probabilities = np.array([[0.9, 0.1], [0.2, 0.8], [0.7, 0.3]])
    y_fine = np.array([1, 2, 3])  # superclasses 0, 1, 1
    assert score(probabilities, y_fine, FINE_TO_COARSE, "coarse") == {"coarse_accuracy": 2 / 3, "fine_accuracy": None}


def test_levels_come_from_the_report_or_must_be_given() -> None:
    assert [level_of(n) for n in ("mobilenet", "resnet34", "wrn-28-10")] == ["coarse", "fine", "fine"]
    with pytest.raises(ConfigError, match=r"level=None is not allowed: 'coarse' or 'fine'"):
        level_of(lambda: None)
    with pytest.raises(ConfigError, match=r"level='medium' is not allowed"):
        level_of("mobilenet", "medium")
    with pytest.raises(ConfigError, match=r"network='vgg' is not allowed"):
        level_of("vgg")


def test_the_reports_recipes_are_transcribed() -> None:
    assert (RECIPES["mobilenet"].optimizer, RECIPES["mobilenet"].learning_rate, RECIPES["mobilenet"].batch_size) == (
        "adam",
        0.01,
        32,
    )
    wrn = RECIPES["wrn-28-10"]
    assert (wrn.optimizer, wrn.learning_rate, wrn.batch_size, wrn.drop_epochs, wrn.drop_factor) == (
        "sgd_nesterov",
        0.1,
        128,
        (60, 120, 160),
        0.2,
    )


def _brightness_data(n: int, seed: int) -> dict[str, np.ndarray]:
    """Images whose fine class is their brightness: learnable in a few epochs by a small network."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 4, n)
    x = (y[:, None, None, None] * 60 + rng.integers(0, 20, (n, 32, 32, 3))).astype(np.uint8)
    return {
        "x_train": x,
        "y_train_fine": y,
        "x_test": x[: n // 2],
        "y_test_fine": y[: n // 2],
        "fine_to_coarse": FINE_TO_COARSE,
    }


def _small(classes: int):  # type: ignore[no-untyped-def]
    import keras

    def build() -> keras.Model:
        inputs = keras.Input((32, 32, 3))
        x = keras.layers.GlobalAveragePooling2D()(inputs)
        outputs = keras.layers.Dense(classes, activation="softmax")(keras.layers.Dense(16, activation="relu")(x))
        return keras.Model(inputs, outputs, name=f"small{classes}")

    return build


FAST = Recipe("adam", 0.05, 16, "n/a")


@pytest.mark.parametrize("eager", [True, False])
def test_a_users_network_learns_and_scores_at_its_level(eager: bool) -> None:
    data = _brightness_data(256, seed=1)
    fine = train_and_score(_small(4), data, level="fine", epochs=20, recipe=FAST, run_eagerly=eager)
    assert fine["fine_accuracy"] >= 0.9 and fine["coarse_accuracy"] >= fine["fine_accuracy"]
    assert (fine["classes"], fine["train_images"], fine["test_images"], fine["epochs"]) == (4, 256, 128, 20)
    assert fine["loss"][-1] < fine["loss"][0] / 2
    coarse = train_and_score(_small(2), data, level="coarse", epochs=20, recipe=FAST, run_eagerly=eager)
    assert coarse["classes"] == 2 and coarse["fine_accuracy"] is None and coarse["coarse_accuracy"] >= 0.9


def test_training_is_seeded() -> None:
    data = _brightness_data(64, seed=2)
    runs = [train_and_score(_small(4), data, level="fine", epochs=2, recipe=FAST, seed=5) for _ in range(2)]
    assert runs[0]["loss"] == runs[1]["loss"] and runs[0]["fine_accuracy"] == runs[1]["fine_accuracy"]


def test_a_network_with_the_wrong_number_of_outputs_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"network='small3' is not allowed: a model with 4 outputs \(it has 3\)"):
        train_and_score(_small(3), _brightness_data(8, seed=0), level="fine")
    with pytest.raises(ConfigError, match=r"epochs=0 is not allowed"):
        train_and_score("mobilenet", _brightness_data(8, seed=0), epochs=0)
