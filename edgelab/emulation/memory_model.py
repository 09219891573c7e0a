"""Memory a board holds while it trains, from the model's layers: the board's prediction, no host measurement.

    device MB = framework + weights x 3 + kept activations x batch + resident data

* **framework**: the profile's ``framework_mb``, what the interpreter and the
  training framework hold before any model (the Pi 3B's is assumed, from the
  paper's LeNet-CNN on one device: see its ``framework_note``);
* **weights**: every trainable weight, its gradient and the optimizer's
  momentum, float32 (``edgelab.models.costs.parameter_count``);
* **activations**: per sample, the forward tensors the backward pass needs,
  each once (``edgelab.models.costs.kept_floats_per_sample``), times the batch;
* **data**: the training samples the device's input pipeline holds in memory,
  at ``data_bytes_per_sample`` each (MXNet's MNIST iterator loads the whole
  file as float32; its image-record iterator streams CIFAR from disk: 0).

The host's own TensorFlow holds more (it keeps every layer's output; 620 MB
just to import it), so the host measurement stays beside this as a labelled
reading, and it, not this, decides whether a run fits this host's emulated
device (``edgelab.emulation.memory_probe``).
"""

from __future__ import annotations

from dataclasses import dataclass

from edgelab.common import checks
from edgelab.emulation.profiles import DeviceProfile
from edgelab.models.costs import kept_floats_per_sample, parameter_count

MB = 2**20
#: Copies of each weight a training device holds: the weight, its gradient, the momentum.
WEIGHT_COPIES = 3


@dataclass(frozen=True)
class MemoryNeed:
    """A board's memory while training, in MB, by part."""

    framework_mb: float
    weights_mb: float
    activations_mb: float
    data_mb: float

    @property
    def total_mb(self) -> float:
        """All of it."""
        return self.framework_mb + self.weights_mb + self.activations_mb + self.data_mb


def device_memory(
    profile: DeviceProfile, model: str, batch_size: int, *, resident_samples: int = 0, data_bytes_per_sample: int = 0
) -> MemoryNeed:
    """What a device of ``profile`` holds training ``model`` at ``batch_size``.

    Examples
    --------
    >>> from edgelab.emulation.profiles import get_profile
    >>> need = device_memory(get_profile("pi3b"), "cnn", 64, resident_samples=60_000, data_bytes_per_sample=784 * 4)
    >>> round(need.total_mb)
    289
    """
    checks.integer("batch_size", batch_size, at_least=1)
    checks.integer("resident_samples", resident_samples, at_least=0)
    checks.integer("data_bytes_per_sample", data_bytes_per_sample, at_least=0)
    return MemoryNeed(
        framework_mb=float(profile.framework_mb),
        weights_mb=WEIGHT_COPIES * 4 * parameter_count(model) / MB,
        activations_mb=batch_size * kept_floats_per_sample(model) * 4 / MB,
        data_mb=resident_samples * data_bytes_per_sample / MB,
    )
