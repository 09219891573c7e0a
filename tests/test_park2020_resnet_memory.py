"""What Park's boards hold besides the model: MXNet 0.9.5's image-record iterators, and the framework read off LeNet."""

from __future__ import annotations

import io
import itertools
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
from edgelab.papers.park2020.resnet import board_need_mb
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
    assert note.startswith("out of memory: the step needed 756 MB above the framework on this host at the run, over")
    assert "over the 743 MB training budget" in note
    # a need beyond the board's whole memory, the one this host's own probe is held to, says so
    beyond = oom_note(pd.concat([row, pd.Series({"host_limit_mb": 1024.0})]))
    assert "over the 1,024 MB of the board's whole memory" in beyond
    assert "3 probes 739-756 MB, median 741" in note and "estimated 719 MB" in note


def test_an_out_of_memory_note_the_board_decided_gives_its_need_and_this_hosts_beside() -> None:
    # Prepare: the board's need over the budget; this host's three probes
    row = pd.Series(
        {"deciding_mb": 941.6, "decided_by": "board", "measured_mb": 1210.0, "memory_min_mb": 1204.0}
        | {"memory_max_mb": 1215.0, "memory_runs": 3, "budget_mb": 743.0, "estimated_mb": 1456.9}
    )

    # Execute
    note = oom_note(row)

    # Assert
    assert note.startswith("out of memory: the board's memory model needs 942 MB above the framework, over the 743")
    assert "this host's TensorFlow: 3 probes 1,204-1,215 MB, median 1,210" in note


def test_the_boards_memory_model_stops_only_the_configuration_the_paper_could_not_train() -> None:
    # Prepare: the paper's grid (P14: of {32, 80, 110} x {32, 64, 128} only 110x128 did not fit the Pi 3B)
    profile = get_profile("pi3b")

    # Execute
    over = {
        (depth, batch, n)
        for depth, batch, n in itertools.product((32, 80, 110), (32, 64, 128), range(1, 11))
        if board_need_mb(profile, depth, batch, n) > profile.training_budget_mb
    }

    # Assert: 110x128 at every device count, nothing else; 80x128, the nearest, fits by under 3% at one device
    assert over == {(110, 128, n) for n in range(1, 11)}
    assert board_need_mb(profile, 80, 128, 1) == pytest.approx(721.6, abs=0.1)
    assert board_need_mb(profile, 80, 128, 1) == pytest.approx(
        board_memory_mb(profile, 80, 128, 1) - profile.framework_mb
    )
