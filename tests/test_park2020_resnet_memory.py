"""What Park's boards hold besides the model: MXNet 0.9.5's image-record iterators, and the framework read off LeNet."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from edgelab.common.errors import ConfigError
from edgelab.emulation.memory_model import (
    MB,
    RECORD_BATCHES_HELD,
    RECORD_CHUNK_BYTES,
    device_memory,
    record_iterator_mb,
)
from edgelab.emulation.profiles import get_profile
from edgelab.papers.park2020 import lenet
from edgelab.papers.park2020.resnet_common import CIFAR_RECORD_BYTES, PAPER_TEST_SIZE, board_memory_mb, oom_note

IMAGE = 3 * 28 * 28  # floats of one image at the iterator's data shape (MXNet's 28x28 crop)


def test_an_iterator_holds_a_raw_chunk_its_decoded_images_and_its_batches() -> None:
    # Prepare: 1,000-byte records, so a chunk holds 8,388 of them
    per_chunk = RECORD_CHUNK_BYTES // 1_000
    batches = RECORD_BATCHES_HELD * 32 * (IMAGE + 1) * 4

    # Execute
    small_part = record_iterator_mb(5_000, 32, image_floats=IMAGE, record_bytes=1_000)
    big_part = record_iterator_mb(50_000, 32, image_floats=IMAGE, record_bytes=1_000)

    # Assert: a part smaller than a chunk is decoded whole; a bigger one a chunk at a time
    assert small_part == pytest.approx((RECORD_CHUNK_BYTES + 5_000 * IMAGE * 4 + batches) / MB)
    assert big_part == pytest.approx((RECORD_CHUNK_BYTES + per_chunk * IMAGE * 4 + batches) / MB)


@pytest.mark.parametrize(
    ("name", "value"), [("part_images", 0), ("batch_size", 1.5), ("image_floats", -1), ("record_bytes", "2300")]
)
def test_bad_iterator_input_names_its_parameter(name: str, value: object) -> None:
    args = {"part_images": 100, "batch_size": 32, "image_floats": IMAGE, "record_bytes": 2_300} | {name: value}
    with pytest.raises(ConfigError, match=name):
        record_iterator_mb(args.pop("part_images"), args.pop("batch_size"), **args)


def test_negative_buffers_are_refused() -> None:
    with pytest.raises(ConfigError, match="buffers_mb"):
        device_memory(get_profile("pi3b"), "resnet32", 32, buffers_mb=-1.0)


def test_a_resnet_board_holds_a_training_and_a_validation_iterator_over_its_parts() -> None:
    # Prepare
    pi3b = get_profile("pi3b")
    bare = device_memory(pi3b, "resnet32", 32).total_mb

    def iterator(part: int) -> float:
        return record_iterator_mb(part, 32, image_floats=IMAGE, record_bytes=CIFAR_RECORD_BYTES)

    # Execute
    by_devices = {n: board_memory_mb(pi3b, 32, 32, n) for n in range(1, 11)}

    # Assert: 10 devices read 5,000 training and 1,000 validation images each
    assert by_devices[10] == pytest.approx(bare + iterator(5_000) + iterator(1_000))
    # The training part outgrows a chunk at every N, the validation part up to N = 2 (3,647 images a chunk):
    # then the board holds less as N grows, as the paper's Fig 6b (280 MB on 1 device, about 250 on 10) does
    assert RECORD_CHUNK_BYTES // CIFAR_RECORD_BYTES == 3_647
    assert by_devices[1] == by_devices[2] > by_devices[3] > by_devices[10]
    assert by_devices[1] - by_devices[10] == pytest.approx((3_647 - PAPER_TEST_SIZE // 10) * IMAGE * 4 / MB)


def test_the_pi3b_framework_is_what_lenet_s_one_device_cell_leaves() -> None:
    # Prepare: Fig 4b's one device, the LeNet-CNN at batch 64 holding MNIST whole (training and test images)
    pi3b = get_profile("pi3b")
    samples = lenet.PAPER_TRAIN_SIZE + lenet.PAPER_TEST_SIZE

    # Execute
    need = device_memory(pi3b, "cnn", 64, resident_samples=samples, data_bytes_per_sample=lenet.MNIST_BYTES_PER_SAMPLE)

    # Assert: the one fitted memory cell (300 MB), to the framework's whole MB
    assert need.total_mb == pytest.approx(300.0, abs=0.5)


def test_the_record_size_is_cifar_s_images_as_mxnet_packed_them(cifar10_dir: Path) -> None:
    # Prepare
    images = np.load(cifar10_dir / "cifar10" / "cifar10_lossless_subset.npz")["x_train"]

    # Execute: each image a PNG behind ImageRecordIO's 24-byte header, in a RecordIO record (8 bytes, padded to 4)
    sizes = []
    for image in images:
        png = io.BytesIO()
        Image.fromarray(image).save(png, format="PNG")
        sizes.append(8 + -(-(24 + png.tell()) // 4) * 4)

    # Assert
    assert np.mean(sizes) == pytest.approx(CIFAR_RECORD_BYTES, abs=1.0)


def test_an_out_of_memory_note_names_the_probe_that_stopped_the_run_and_every_probe() -> None:
    # Prepare: the probe at the run over the budget, the two taken before under it (a need close to the budget)
    row = pd.Series(
        {"deciding_mb": 756.3, "measured_mb": 741.4, "memory_min_mb": 738.7, "memory_max_mb": 756.3}
        | {"memory_runs": 3, "budget_mb": 743.0, "estimated_mb": 719.3}
    )

    # Execute
    note = oom_note(row)

    # Assert
    assert note.startswith("out of memory: the step needed 756 MB above the framework at the run, over the 743 MB")
    assert "3 probes 739-756 MB, median 741" in note and "estimated 719 MB" in note
