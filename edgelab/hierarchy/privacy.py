"""Zhang 2018's privacy module: the upper tier's first convolution run below it, and how much it hides.

The report's "encryption module" (its section 3.5) is the first convolution of
the edge's or the cloud's network, downloaded to the end (or edge) device: the
device sends that layer's output instead of the raw image, and the upper
device runs the rest of its network on it. ``stem`` cuts a network there.

What it costs (eq7, eq8): the layer's compute moves to the weaker device
(``Delta t_encrypt``) and the payload changes from uint8 pixels to float32
features (``Delta t_comm``); ``overhead`` composes both on the hierarchy's
clock.

What it hides: the layer is linear in the image until its bias, and it has
more outputs than inputs (ResNet-34's 7x7/2 stem: 16,384 from 3,072; WRN's
3x3 stem: 16,384 from 3,072), so whoever holds its weights (the upper tier
made them) can solve for the image. ``invert`` does that by least squares
(LSQR, the convolution and its transpose as the operator) and ``attack``
scores the reconstruction with PSNR and SSIM (TensorFlow's). Beyond the
report, which calls the module encryption without testing it.

Paper: Zongpu Zhang, "Optimization of Deep Learning Applications in Highly
Heterogeneous Distributed System", SJTU EE447 report, 2018 (sections 3.5, 4.8).
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgelab.common.errors import ConfigError

if TYPE_CHECKING:
    import keras


@dataclass(frozen=True)
class Stem:
    """A network's first convolution as a model of its own, and what it sends per image."""

    network: str
    layer: Any  # the keras Conv2D, with the network's weights
    model: Any  # 32x32x3 image -> the layer's output

    @property
    def output_shape(self) -> tuple[int, ...]:
        """Height, width and channels of the layer's output."""
        return tuple(int(d) for d in self.model.output.shape[1:])

    @property
    def parameters(self) -> int:
        """The layer's weights and biases."""
        return int(self.layer.count_params())

    def payload_bytes(self, images: int) -> int:
        """Bytes sent for ``images`` images as float32 features."""
        return 4 * images * math.prod(self.output_shape)

    def file_bytes(self) -> int:
        """Bytes of the weights file Keras writes for the layer alone."""
        with tempfile.TemporaryDirectory(prefix="edgelab-stem-") as folder:
            path = Path(folder) / f"{self.network}-stem.weights.h5"
            self.model.save_weights(path)
            return os.path.getsize(path)


def stem(network: keras.Model, name: str = "") -> Stem:
    """The first layer with weights of ``network`` (a convolution), as a model from the network's input."""
    import keras

    layer = next((layer for layer in network.layers if layer.weights), None)
    if layer is None or not isinstance(layer, keras.layers.Conv2D):
        raise ConfigError("network", name or network.name, "a network whose first layer with weights is a Conv2D")
    inputs = keras.Input(tuple(network.input_shape[1:]))
    return Stem(name or network.name, layer, keras.Model(inputs, layer(inputs)))


def invert(module: Stem, features: np.ndarray, *, iterations: int = 200) -> np.ndarray:
    """Images whose features through ``module`` are closest to ``features`` (least squares, pixels in [0, 1]).

    The attacker knows the layer (weights, bias, stride, padding) and nothing
    else: no training data, no prior on images.
    """
    import tensorflow as tf
    from scipy.sparse.linalg import LinearOperator, lsqr

    layer = module.layer
    if layer.activation is not None and layer.activation.__name__ != "linear":
        raise ConfigError("module", module.network, "a convolution without activation (linear up to its bias)")
    kernel = tf.constant(layer.kernel.numpy())
    bias = layer.bias.numpy() if layer.use_bias else 0.0
    in_shape = (1, *module.model.input.shape[1:])
    out_shape = (1, *module.output_shape)
    strides, padding = layer.strides, layer.padding.upper()

    def forward(x: np.ndarray) -> np.ndarray:
        y = tf.nn.conv2d(tf.constant(x.reshape(in_shape), tf.float32), kernel, strides, padding)
        return y.numpy().ravel().astype(np.float64)

    def adjoint(y: np.ndarray) -> np.ndarray:
        x = tf.nn.conv2d_transpose(tf.constant(y.reshape(out_shape), tf.float32), kernel, in_shape, strides, padding)
        return x.numpy().ravel().astype(np.float64)

    n_in, n_out = math.prod(in_shape), math.prod(out_shape)
    operator = LinearOperator((n_out, n_in), matvec=forward, rmatvec=adjoint, dtype=np.float64)
    images = []
    for f in np.asarray(features, np.float64).reshape(-1, n_out):
        solution = lsqr(operator, f - np.broadcast_to(bias, out_shape).ravel(), iter_lim=iterations)[0]
        images.append(solution.reshape(in_shape[1:]))
    return np.clip(np.asarray(images, np.float32), 0.0, 1.0)


def attack(module: Stem, images: np.ndarray, *, iterations: int = 200) -> dict[str, float]:
    """Send ``images`` (uint8) through the module, invert the features, and score the reconstruction.

    PSNR (dB, peak 1) and SSIM of each reconstruction against its image,
    averaged, and the worst of them.
    """
    import tensorflow as tf

    x = np.asarray(images, np.float32) / np.float32(255.0)
    features = np.asarray(module.model.predict_on_batch(x))
    recovered = invert(module, features, iterations=iterations)
    psnr = tf.image.psnr(tf.constant(x), tf.constant(recovered), max_val=1.0).numpy()
    psnr = np.where(np.isfinite(psnr), psnr, 100.0)  # an exact reconstruction: infinite, shown as 100 dB
    ssim = tf.image.ssim(tf.constant(x), tf.constant(recovered), max_val=1.0).numpy()
    return {
        "images": len(x),
        "psnr_db": float(np.mean(psnr)),
        "psnr_min_db": float(np.min(psnr)),
        "ssim": float(np.mean(ssim)),
        "ssim_min": float(np.min(ssim)),
        "max_abs_error": float(np.max(np.abs(recovered - x))),
    }


def stem_share(network: keras.Model) -> float:
    """The first convolution's share of the network's multiply-accumulates per image."""
    from edgelab.models.graph import layer_costs

    costs = layer_costs(network)
    first = next(c for c in costs if c.macs)
    return first.macs / sum(c.macs for c in costs)


def overhead(
    spec: Any,
    calibration: Any,
    network: str,
    share: float,
    feature_bytes: int,
    *,
    latency_s: float,
    at: str,
    task_size: int = 50,
) -> dict[str, float]:
    """Eq7 and eq8 on the hierarchy's clock: one task to the cloud with and without the module run at ``at``.

    Without it, the task's uint8 images cross to the cloud (after a hop to an
    edge device when ``at="edge"``, whose link adds its transfer and no added
    latency) and the cloud runs ``network`` whole. With it, the device at
    ``at`` runs the first convolution (``share`` of the network's work, at that
    tier's time for the network) and float32 features of ``feature_bytes`` per
    task cross instead; the cloud skips the layer.
    """
    if at not in ("end", "edge"):
        raise ConfigError("at", at, "'end' or 'edge': where the module runs")
    if not latency_s >= 0:
        raise ConfigError("latency_s", latency_s, "a number of seconds >= 0")
    cloud = spec.tier("cloud")
    raw = task_size * 32 * 32 * 3
    full = calibration.stage_s("cloud", network, task_size)
    hop = spec.tier("edge").transfer_s(raw) if at == "edge" else 0.0
    without = hop + latency_s + cloud.transfer_s(raw) + full
    encrypt = share * (calibration.stage_s(at, network, task_size) - full)
    comm = cloud.transfer_s(feature_bytes) - cloud.transfer_s(raw)
    return {
        "t_wo_s": without,
        "t_w_s": without + encrypt + comm,
        "delta_encrypt_s": encrypt,
        "delta_comm_s": comm,
        "overhead_pct": 100 * (encrypt + comm) / without,
    }
