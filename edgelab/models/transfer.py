"""Transfer learning in two phases, as Jeon et al. train their MobileNetV2.

Phase 1 freezes the base and trains the head (global average pooling,
dropout, the output layer) with Adam; phase 2 unfreezes the whole base and
fine-tunes everything with Adam at a small learning rate. Inputs go through
MobileNetV2's ``preprocess_input``; the training data is shuffled with a
buffer of 100 and batched by 32, cached and prefetched (all as the paper says).

Phase 1 computes the frozen base's features once and trains the head on them:
with the base frozen (its batch normalisation in inference mode) and a fixed,
already augmented training set, that is the same computation as running the
base every epoch, only faster; without phase 2 the validation scores come
from the head on those features too. Training runs in the notebook's own process
(the paper trains in its Jupyter service), not on an emulated device.

Paper: Jeon, Lee, Lee, Kim and Kim, "Implementation of AIoT Edge Cluster
System via Distributed Deep Learning Pipeline" (Pusan National University).
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from edgelab.common import checks
from edgelab.common.errors import ConfigError
from edgelab.common.seeding import seeded

# Not stated in the paper: Keras' default Adam rate for the frozen phase, a common dropout.
PHASE1_LEARNING_RATE = 1e-3
DROPOUT = 0.2
#: Input sizes Keras publishes MobileNetV2 ImageNet weights for.
IMAGENET_SIZES = (96, 128, 160, 192, 224)
WEIGHTS_HOST = "storage.googleapis.com"
# What training without ImageNet weights is: not the whole network from scratch unless phase 2 runs.
RANDOM_BASE = "random base: phase 1 trains only the head on its frozen features, phase 2 the whole network"
# Pooled features of the frozen base, by (image size, weights, seed, data digests): see _features.
_FEATURES: dict[tuple[Any, ...], tuple[np.ndarray, np.ndarray]] = {}


@dataclass(frozen=True)
class TransferConfig:
    """How one model is trained; ``classes`` are the labels it answers (all ten, or a member's pair)."""

    classes: tuple[int, ...]
    image_size: int
    weights: str | None = None  # "imagenet", a weights file, or None (a random base: see RANDOM_BASE)
    output: str = "softmax"  # softmax over ``classes``; "sigmoid": one Bernoulli unit per class (ensemble)
    dropout: float = DROPOUT
    batch_size: int = 32
    phase1_epochs: int = 5
    phase1_learning_rate: float = PHASE1_LEARNING_RATE
    phase2_epochs: int = 1
    phase2_learning_rate: float = 1e-5
    shuffle_buffer: int = 100
    seed: int = 0

    def __post_init__(self) -> None:
        if self.output not in ("softmax", "sigmoid"):
            raise ConfigError("output", self.output, "'softmax' or 'sigmoid'")
        for name in ("phase1_epochs", "phase2_epochs"):
            checks.integer(name, getattr(self, name))
        checks.integer("batch_size", self.batch_size, at_least=1)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (a results-store key part)."""
        return asdict(self)


@dataclass
class Trained:
    """A trained model's weights, its per-epoch history and its validation scores."""

    weights: list[np.ndarray]
    history: pd.DataFrame  # epoch (global), phase, loss, accuracy, val_loss, val_accuracy
    scores: np.ndarray  # (n_val, len(classes)) outputs on the validation images
    train_s: float


def preprocess(x: np.ndarray) -> np.ndarray:
    """MobileNetV2's ``preprocess_input``: uint8 RGB -> float32 in [-1, 1]."""
    from keras.applications.mobilenet_v2 import preprocess_input

    return np.asarray(preprocess_input(np.asarray(x, np.float32)), np.float32)


def targets(labels: np.ndarray, cfg: TransferConfig) -> np.ndarray:
    """One-hot rows over ``cfg.classes``; a label outside them (an ensemble member's) is all zeros."""
    out = np.zeros((len(labels), len(cfg.classes)), np.float32)
    for j, c in enumerate(cfg.classes):
        out[np.asarray(labels) == c, j] = 1.0
    return out


def build(cfg: TransferConfig) -> Any:
    """The flat 157-layer model of ``cfg``, seeded."""
    from edgelab.models.mobilenet import flat_mobilenet_v2

    with seeded(cfg.seed):
        return flat_mobilenet_v2(
            len(cfg.classes), image_size=cfg.image_size, weights=cfg.weights, dropout=cfg.dropout, activation=cfg.output
        )


def train(
    cfg: TransferConfig, x_train: np.ndarray, y_train: np.ndarray, x_val: np.ndarray, y_val: np.ndarray
) -> Trained:
    """Train ``cfg``'s model in the paper's two phases and score the validation images.

    Parameters
    ----------
    cfg
        What to train and how.
    x_train, y_train
        Training images (uint8, already augmented) and their labels (0..9).
    x_val, y_val
        Validation images (never augmented) and labels.

    Returns
    -------
    Trained
        Final weights, the history of both phases and the validation outputs.
    """
    import keras

    start = time.perf_counter()
    model = build(cfg)
    loss = "categorical_crossentropy" if cfg.output == "softmax" else "binary_crossentropy"
    metric = "categorical_accuracy" if cfg.output == "softmax" else "binary_accuracy"
    xt, xv = preprocess(x_train), preprocess(x_val)
    tt, tv = targets(y_train, cfg), targets(y_val, cfg)
    history = []

    # Phase 1: the head on the frozen base's features (computed once; see the module docstring).
    ft, fv = _features(model, cfg, xt, xv)
    head_in = keras.Input(ft.shape[1:])
    head = keras.Model(head_in, model.layers[-1](model.layers[-2](head_in)))
    head.compile(optimizer=keras.optimizers.Adam(cfg.phase1_learning_rate), loss=loss, metrics=[metric])
    if cfg.phase1_epochs:
        fit = head.fit(
            _batches(ft, tt, cfg),
            validation_data=(fv, tv),
            epochs=cfg.phase1_epochs,
            shuffle=False,  # the dataset shuffles itself (buffer 100)
            verbose=0,
        )
        history += _rows(fit.history, phase=1, first_epoch=1, metric=metric)

    # Phase 2: the whole model unfrozen, fine-tuned at a small rate.
    if cfg.phase2_epochs:
        model.trainable = True
        model.compile(optimizer=keras.optimizers.Adam(cfg.phase2_learning_rate), loss=loss, metrics=[metric])
        fit = model.fit(
            _batches(xt, tt, cfg),
            validation_data=(xv, tv),
            epochs=cfg.phase2_epochs,
            shuffle=False,  # the dataset shuffles itself (buffer 100)
            verbose=0,
        )
        history += _rows(fit.history, phase=2, first_epoch=cfg.phase1_epochs + 1, metric=metric)
        scores = model.predict(xv, batch_size=64, verbose=0)
    else:  # the base never trained: the head on its features is the whole model, bit for bit (tested)
        scores = head.predict(fv, batch_size=64, verbose=0)
    return Trained(model.get_weights(), pd.DataFrame(history), scores, time.perf_counter() - start)


def _features(model: Any, cfg: TransferConfig, xt: np.ndarray, xv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The frozen base's pooled features of both sets, computed once per base and data.

    Every model of a run is built with the same seed (and the same ImageNet weights, when
    present), so its untrained base is the same: the ensemble's members and the ten-class
    model share these features.
    """
    import keras

    key = (cfg.image_size, cfg.weights, cfg.seed, _digest(xt), _digest(xv))
    if key not in _FEATURES:
        pool = next(layer for layer in model.layers if isinstance(layer, keras.layers.GlobalAveragePooling2D))
        features = keras.Model(model.inputs, pool.output)
        _FEATURES.clear()  # one set at a time: they are large
        _FEATURES[key] = (
            features.predict(xt, batch_size=64, verbose=0),
            features.predict(xv, batch_size=64, verbose=0),
        )
    return _FEATURES[key]


def _digest(x: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(x).view(np.uint8)).hexdigest()


def _batches(x: np.ndarray, t: np.ndarray, cfg: TransferConfig) -> Any:
    import tensorflow as tf

    # Cache before the shuffle, so every epoch is shuffled afresh (the paper: cache, shuffle(100), prefetch).
    data = tf.data.Dataset.from_tensor_slices((x, t)).cache()
    data = data.shuffle(cfg.shuffle_buffer, seed=cfg.seed, reshuffle_each_iteration=True).batch(cfg.batch_size)
    return data.prefetch(tf.data.AUTOTUNE)


def _rows(history: dict[str, list[float]], *, phase: int, first_epoch: int, metric: str) -> list[dict[str, Any]]:
    n = len(history["loss"])
    return [
        {
            "epoch": first_epoch + i,
            "phase": phase,
            "loss": history["loss"][i],
            "accuracy": history[metric][i],
            "val_loss": history["val_loss"][i],
            "val_accuracy": history[f"val_{metric}"][i],
        }
        for i in range(n)
    ]


def imagenet_weights(image_size: int, *, data_dir: str | os.PathLike[str] | None = None) -> tuple[str | None, str]:
    """Where MobileNetV2's ImageNet weights come from: a file, Keras' download, or nowhere.

    Looks for Keras' own file name (``mobilenet_v2_weights_tf_dim_ordering_tf_kernels_1.0_<size>_no_top.h5``)
    in the data directory, its ``mobilenet_v2/`` folder and ``$KERAS_HOME/models``; then Keras' download
    when the network may be used (``EDGELAB_OFFLINE`` unset); else ``None``: a random base (``RANDOM_BASE``).

    Returns
    -------
    weights, source
        The ``weights`` argument for Keras and a line saying where they come from.
    """
    from edgelab.data.sources import default_data_dir

    name = f"mobilenet_v2_weights_tf_dim_ordering_tf_kernels_1.0_{image_size}_no_top.h5"
    root = Path(data_dir) if data_dir else default_data_dir()
    keras_home = Path(os.environ.get("KERAS_HOME", Path.home() / ".keras"))
    for candidate in (root / name, root / "mobilenet_v2" / name, keras_home / "models" / name):
        if candidate.is_file():
            return str(candidate), f"ImageNet weights from {candidate}"
    if image_size not in IMAGENET_SIZES:
        return None, f"none: Keras publishes ImageNet weights for {IMAGENET_SIZES} px only; {RANDOM_BASE}"
    if os.environ.get("EDGELAB_OFFLINE") == "1":
        return None, f"none: {name} not in the data directory and downloads are off; {RANDOM_BASE}"
    try:
        # Keras downloads from here; a machine without network answers in seconds, not a download timeout.
        socket.create_connection((WEIGHTS_HOST, 443), timeout=3.0).close()
    except OSError as exc:
        return None, f"none: {name} not in the data directory and {WEIGHTS_HOST} unreachable ({exc}); {RANDOM_BASE}"
    return "imagenet", "ImageNet weights from Keras' download"
