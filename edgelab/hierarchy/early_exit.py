"""Early exits over distributed devices (DDNN): normalized entropy, the exit rule and the network.

A DDNN (Teerapittayanon, McDanel and Kung, "Distributed Deep Neural Networks
over the Cloud, the Edge and End Devices", ICDCS 2017; surveyed by Qiao et
al., figure 3-7) spreads one network over a hierarchy: each of D end devices
runs a small conv block on its own view of a sample; a local aggregator
combines the D outputs (element-wise max, average, or concatenation along the
channels) and classifies the result at a *local exit*; the same combined
tensor goes up to a deeper *cloud* part with the final exit, but only for the
samples the local exit is not sure of. Confidence is the normalized entropy
of the local exit's softmax,

    eta(x) = -sum_i x_i log x_i / log |C|,   eta in [0, 1],

and a sample exits locally when eta <= T (low entropy is high confidence;
the survey's "confidence above a threshold" says the same, qiao/P4). T = 0 is
the all-cloud end point: no sample exits there, even one whose eta is exactly
0 (a saturated float32 softmax); T = 1 keeps every sample local.

The parts are Keras models, so each can be shipped to its own device
(``edgelab.hierarchy.early_exit_routing``); the joint model over them trains on the sum
of the two exits' losses, in the process that calls ``train_ddnn`` (the
notebook's, i.e. the Dask client's).
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from edgelab.common import checks
from edgelab.common.errors import ConfigError
from edgelab.common.seeding import seeded

if TYPE_CHECKING:
    import keras

AGGREGATIONS = ("max", "average", "concat")
#: A part given by the user: a Keras model, or a function that builds one (see ``build_ddnn``).
Part = Any


def check_threshold(threshold: float, name: str = "threshold") -> float:
    """``threshold`` as a float, refused unless it is a number in [0, 1]."""
    bad = isinstance(threshold, bool) or not isinstance(threshold, numbers.Real) or not 0.0 <= threshold <= 1.0
    if bad:
        raise ConfigError(name, threshold, "a number from 0 to 1 (a normalized entropy)")
    return float(threshold)


def check_aggregation(aggregation: str) -> str:
    """``aggregation``, refused unless it is one of ``AGGREGATIONS``."""
    if aggregation not in AGGREGATIONS:
        raise ConfigError("aggregation", aggregation, f"one of {', '.join(AGGREGATIONS)}")
    return aggregation


def check_devices(devices: int) -> int:
    """``devices``, refused unless it is an integer >= 1."""
    checks.integer("devices", devices, at_least=1)
    return devices


def normalized_entropy(probs: Any) -> np.ndarray:
    """Eta of each row of ``probs`` (softmax vectors over the last axis), in [0, 1].

    ``0 log 0`` counts as 0, so a one-hot row gives exactly 0; a uniform row
    gives 1 (to rounding; the result is clipped to [0, 1]).

    Examples
    --------
    >>> normalized_entropy([[0.25, 0.25, 0.25, 0.25], [1.0, 0.0, 0.0, 0.0]]).tolist()
    [1.0, 0.0]
    """
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim < 1 or p.shape[-1] < 2:
        raise ConfigError("probs", f"shape {p.shape}", "softmax vectors over at least 2 classes (last axis)")
    if np.any(p < 0) or not np.all(np.isfinite(p)):
        raise ConfigError("probs", "negative or non-finite entries", "probabilities (>= 0, finite)")
    terms = np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)
    return np.clip(-terms.sum(axis=-1) / math.log(p.shape[-1]), 0.0, 1.0) + 0.0  # + 0.0: no -0.0


def exits_locally(eta: Any, threshold: float) -> np.ndarray:
    """Which samples exit at the local exit: eta <= T, and none at all at T = 0 (the all-cloud end point)."""
    t = check_threshold(threshold)
    eta = np.asarray(eta, dtype=np.float64)
    return (eta <= t) & (t > 0.0)


def make_views(images: np.ndarray, devices: int, *, noise: float, seed: int) -> list[np.ndarray]:
    """Each device's view of the images: the same picture, in [0, 1], with its own seeded Gaussian noise.

    ``images`` are uint8 ``(N, H, W)`` or ``(N, H, W, C)``; each view is
    float32 ``(N, H, W, C)``, clipped to [0, 1]. Device i's noise is drawn from
    ``default_rng([seed, i])``: the same views for the same seed, whatever D.
    """
    check_devices(devices)
    if isinstance(noise, bool) or not isinstance(noise, int | float) or not noise >= 0:
        raise ConfigError("noise", noise, "a standard deviation >= 0 (pixels scaled to [0, 1])")
    x = np.asarray(images, np.float32) / 255.0
    if x.ndim == 3:
        x = x[..., None]  # (N, H, W, 1)
    views = []
    for i in range(devices):
        rng = np.random.default_rng([seed, i])
        views.append(np.clip(x + rng.normal(0.0, noise, x.shape).astype(np.float32), 0.0, 1.0))
    return views


@dataclass
class DDNN:
    """The parts of a DDNN and the joint model that trains them.

    ``devices[i]`` maps view i to its features; ``aggregator`` maps the D
    feature tensors to ``[combined, local softmax]``, where ``combined`` is the
    very tensor its local exit classifies and the one sent upward; ``cloud``
    maps ``combined`` to the final softmax. ``joint`` maps the D views to
    ``[local softmax, cloud softmax]``.
    """

    devices: list[keras.Model]
    aggregator: keras.Model
    cloud: keras.Model
    joint: keras.Model
    aggregation: str

    @property
    def upward_shape(self) -> tuple[int, ...]:
        """Shape of one sample's combined tensor (what goes to the cloud)."""
        return tuple(int(d) for d in self.aggregator.outputs[0].shape[1:])

    def predict(self, views: list[np.ndarray], *, batch_size: int = 256) -> tuple[np.ndarray, np.ndarray]:
        """Local and cloud softmax of every sample, computed here in one process (the reference for routing)."""
        outs = [
            self.joint([v[s : s + batch_size] for v in views], training=False)
            for s in range(0, len(views[0]), batch_size)
        ]
        return np.concatenate([np.asarray(o[0]) for o in outs]), np.concatenate([np.asarray(o[1]) for o in outs])


def _default_device_block(index: int, input_shape: tuple[int, ...], filters: int) -> keras.Model:
    import keras

    inputs = keras.Input(input_shape, name=f"view_{index}")
    x = keras.layers.Conv2D(filters, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.MaxPooling2D(2)(x)  # (B, H/2, W/2, filters)
    return keras.Model(inputs, x, name=f"device_{index}")


def _default_cloud(input_shape: tuple[int, ...], num_classes: int, filters: int) -> keras.Model:
    import keras

    inputs = keras.Input(input_shape, name="combined")
    x = keras.layers.Conv2D(2 * filters, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.MaxPooling2D(2)(x)  # (B, H/4, W/4, 2 filters)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(64, activation="relu")(x)
    return keras.Model(inputs, keras.layers.Dense(num_classes, activation="softmax")(x), name="cloud")


def _part(
    part: Part, parameter: str, name: str, default: Callable[..., keras.Model], args: dict[str, Any]
) -> keras.Model:
    """A user's Keras model (cloned: fresh weights, one per use), a user's builder, or ours.

    A builder is called with ``args`` (by position) if it takes them, else with
    nothing. Renamed ``name``: the joint model needs every part's name to be its own.
    """
    import keras

    if part is None:
        built = default(*args.values())
    elif isinstance(part, keras.Model):
        built = keras.models.clone_model(part)
    elif callable(part):
        built = part(*_arguments(part, parameter, args))
        if not isinstance(built, keras.Model):
            raise ConfigError(parameter, type(built).__name__, "a function returning a keras.Model")
    else:
        raise ConfigError(parameter, type(part).__name__, "None, a keras.Model, or a function that builds one")
    built.name = name
    return built


def _arguments(builder: Callable[..., Any], parameter: str, args: dict[str, Any]) -> tuple[Any, ...]:
    """``args``' values if ``builder`` takes them, none if it takes nothing; ``ConfigError`` otherwise."""
    try:
        signature = inspect.signature(builder)
    except (TypeError, ValueError):  # a callable Python cannot introspect: hand it the arguments
        return tuple(args.values())
    for candidate in (tuple(args.values()), ()):
        try:
            signature.bind(*candidate)
        except TypeError:
            continue
        return candidate
    wanted = f"a function ({', '.join(args)}) -> keras.Model, or one taking no arguments"
    raise ConfigError(parameter, f"a function {signature}", wanted)


def build_ddnn(
    *,
    devices: int,
    aggregation: str,
    input_shape: tuple[int, ...] = (28, 28, 1),
    num_classes: int = 10,
    filters: int = 4,
    device_block: Part = None,
    cloud_block: Part = None,
    seed: int = 0,
) -> DDNN:
    """A DDNN of ``devices`` end devices, a local aggregator with its exit, and a cloud part.

    Parameters
    ----------
    devices
        End devices D, one view each.
    aggregation
        How the aggregator combines the D feature tensors: ``"max"``,
        ``"average"`` (element-wise) or ``"concat"`` (along the channels).
    input_shape, num_classes
        One view's shape and the number of classes.
    filters
        Width of the built-in blocks (device conv: ``filters``; cloud: a conv of 2x, then a dense layer of 64).
    device_block
        A device's block: None (a 3x3 conv and 2x2 max pooling), a Keras model
        (cloned per device, fresh weights) or a function
        ``(index, input_shape) -> keras.Model`` (or of no arguments). Every
        device's output must have the same shape for ``"max"`` and ``"average"``.
    cloud_block
        The cloud part: None (a conv, pooling, two dense layers), a Keras
        model (cloned) or a function ``(combined_shape, num_classes) -> keras.Model``
        (or of no arguments) ending in a softmax.
    seed
        Seeds every weight (``edgelab.common.seeding.seeded``).
    """
    import keras

    check_devices(devices)
    check_aggregation(aggregation)
    with seeded(seed):
        device_models = [
            _part(
                device_block,
                "device_block",
                f"device_{i}",
                lambda i, s: _default_device_block(i, s, filters),
                {"index": i, "input_shape": tuple(input_shape)},
            )
            for i in range(devices)
        ]
        feature_inputs = [
            keras.Input(tuple(m.outputs[0].shape[1:]), name=f"features_{i}") for i, m in enumerate(device_models)
        ]
        if devices == 1:
            combined = feature_inputs[0]
        else:
            merge = {"max": keras.layers.Maximum, "average": keras.layers.Average, "concat": keras.layers.Concatenate}
            combined = merge[aggregation](name=f"aggregate_{aggregation}")(feature_inputs)
        # The local exit classifies the same tensor that goes upward (qiao/C22).
        flat = keras.layers.Flatten(name="local_flatten")(combined)
        local = keras.layers.Dense(num_classes, activation="softmax", name="local_exit")(flat)
        aggregator = keras.Model(feature_inputs, [combined, local], name="aggregator")
        shape = tuple(int(d) for d in combined.shape[1:])
        cloud = _part(
            cloud_block,
            "cloud_block",
            "cloud",
            lambda s, c: _default_cloud(s, c, filters),
            {"combined_shape": shape, "num_classes": num_classes},
        )
        views = [keras.Input(tuple(input_shape), name=f"view_{i}") for i in range(devices)]
        upward, local_out = aggregator([m(v) for m, v in zip(device_models, views, strict=True)])
        local_out = keras.layers.Identity(name="local")(local_out)
        cloud_out = keras.layers.Identity(name="final")(cloud(upward))
        joint = keras.Model(views, [local_out, cloud_out], name=f"ddnn_{aggregation}_{devices}")
    return DDNN(device_models, aggregator, cloud, joint, aggregation)


def train_ddnn(
    ddnn: DDNN,
    views: list[np.ndarray],
    labels: np.ndarray,
    *,
    epochs: int,
    batch_size: int = 64,
    learning_rate: float = 0.005,
    seed: int = 0,
) -> list[float]:
    """Train every part at once on the sum of the local and the final exit's cross-entropy (Adam), in this process.

    Each epoch takes the samples in a seeded random order, in full batches
    only (the few left over go to another epoch's batches): one traced step
    serves every batch. Keras' ``fit`` traced for 3 s here before its first
    step, a plain traced step for 1 s; training a DDNN is a few seconds in
    all, so that is most of it. Returns the mean summed loss of each epoch.
    """
    import keras
    import tensorflow as tf

    for name, value in (("epochs", epochs), ("batch_size", batch_size)):
        checks.integer(name, value, at_least=1)
    if batch_size > len(labels):
        raise ConfigError("batch_size", batch_size, f"at most the {len(labels)} training samples")
    model = ddnn.joint
    optimizer = keras.optimizers.Adam(learning_rate)
    cross_entropy = keras.losses.SparseCategoricalCrossentropy()
    weights = model.trainable_variables
    optimizer.build(weights)

    @tf.function(jit_compile=False)
    def step(views: list[tf.Tensor], y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            local, final = model(views, training=True)
            loss = cross_entropy(y, local) + cross_entropy(y, final)  # the sum of the exits' losses
        optimizer.apply_gradients(zip(tape.gradient(loss, weights), weights, strict=True))
        return loss

    rng = np.random.default_rng(seed)
    y = np.asarray(labels, np.int32)
    losses = []
    for _ in range(epochs):
        order = rng.permutation(len(y))
        batches = [order[s : s + batch_size] for s in range(0, len(y) - batch_size + 1, batch_size)]
        losses.append(float(np.mean([float(step([v[b] for v in views], y[b])) for b in batches])))
    return losses
