"""Memory a board holds while it trains, from the model's layers: the board's prediction, no host measurement.

    device MB = framework + weights x 3 + kept activations x batch + resident data + iterator buffers

* **framework**: the profile's ``framework_mb``, what the interpreter and the
  training framework hold before any model (the Pi 3B's is read off the
  paper's LeNet-CNN on one device: see its ``framework_note``);
* **weights**: every trainable weight, its gradient and the optimizer's
  momentum, float32 (``edgelab.models.costs.parameter_count``);
* **activations**: per sample, the forward tensors the backward pass needs,
  each once (``edgelab.models.costs.kept_floats_per_sample``), times the batch;
* **data**: the samples the device's input pipeline holds in memory, at
  ``data_bytes_per_sample`` each (the MNIST example of MXNet 0.9.5 holds its
  training and validation sets whole as float32; its image-record iterator
  streams CIFAR from the card: 0);
* **buffers**: what a streaming iterator holds besides (``record_iterator_mb``:
  MXNet 0.9.5's image-record iterator, one raw chunk of the record file, that
  chunk decoded, and its prefetched batches).

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

# MXNet 0.9.5's ImageRecordIter (src/io/iter_image_recordio_2.cc at tag v0.9.5, with dmlc-core at fcf831a):
#: Raw bytes of the record file one chunk holds: ``HintChunkSize(8 << 20)`` over ``sizeof(size_t)`` words,
#: never fewer than ``kBufferSize`` (2 << 20) words; a word is 4 bytes on the 32-bit Raspbian of the papers'
#: boards. The chunk's vector is allocated and zeroed whole, whatever the part of the file it reads.
RECORD_CHUNK_BYTES = (2 << 20) * 4
#: Batches an iterator holds at once: its reader thread's queue (``kMaxPrefetchBuffer``, 16) and the
#: batches handed out and not yet recycled (``prefetch_buffer``, 4 by default).
RECORD_BATCHES_HELD = 16 + 4


@dataclass(frozen=True)
class MemoryNeed:
    """A board's memory while training, in MB, by part."""

    framework_mb: float
    weights_mb: float
    activations_mb: float
    data_mb: float
    buffers_mb: float = 0.0

    @property
    def total_mb(self) -> float:
        """All of it."""
        return self.framework_mb + self.weights_mb + self.activations_mb + self.data_mb + self.buffers_mb


def device_memory(
    profile: DeviceProfile,
    model: str,
    batch_size: int,
    *,
    resident_samples: int = 0,
    data_bytes_per_sample: int = 0,
    buffers_mb: float = 0.0,
) -> MemoryNeed:
    """What a device of ``profile`` holds training ``model`` at ``batch_size`` (``buffers_mb``: its iterators').

    Examples
    --------
    >>> from edgelab.emulation.profiles import get_profile
    >>> need = device_memory(get_profile("pi3b"), "cnn", 64, resident_samples=70_000, data_bytes_per_sample=784 * 4)
    >>> round(need.total_mb)
    300
    """
    checks.integer("batch_size", batch_size, at_least=1)
    checks.integer("resident_samples", resident_samples, at_least=0)
    checks.integer("data_bytes_per_sample", data_bytes_per_sample, at_least=0)
    checks.number("buffers_mb", buffers_mb, at_least=0.0, unit="MB")
    return MemoryNeed(
        framework_mb=float(profile.framework_mb),
        weights_mb=WEIGHT_COPIES * 4 * parameter_count(model) / MB,
        activations_mb=batch_size * kept_floats_per_sample(model) * 4 / MB,
        data_mb=resident_samples * data_bytes_per_sample / MB,
        buffers_mb=float(buffers_mb),
    )


def record_iterator_mb(part_images: int, batch_size: int, *, image_floats: int, record_bytes: int) -> float:
    """MB MXNet 0.9.5's ``ImageRecordIter`` holds, reading its part of a record file on a 32-bit board.

    Its reader holds one raw chunk of the file (``RECORD_CHUNK_BYTES``, zeroed
    whole when made), its parser that chunk decoded to float32 images at the
    iterator's data shape (as many as the chunk holds records of
    ``record_bytes``, at most the part's ``part_images``), and its queues
    ``RECORD_BATCHES_HELD`` batches of images and labels. Each iterator of a
    run holds its own: the example scripts open one on the training records
    and one on the validation records.

    Examples
    --------
    >>> round(record_iterator_mb(5_000, 32, image_floats=3 * 28 * 28, record_bytes=2_300), 1)
    46.5
    """
    checks.integer("part_images", part_images, at_least=1)
    checks.integer("batch_size", batch_size, at_least=1)
    checks.integer("image_floats", image_floats, at_least=1)
    checks.integer("record_bytes", record_bytes, at_least=1)
    decoded = min(part_images, RECORD_CHUNK_BYTES // record_bytes) * image_floats * 4
    batches = RECORD_BATCHES_HELD * batch_size * (image_floats + 1) * 4  # each image with its label
    return (RECORD_CHUNK_BYTES + decoded + batches) / MB
