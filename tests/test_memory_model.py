"""The board's memory model: framework + weights x 3 + the tensors backward needs x batch + resident data."""

from __future__ import annotations

import pytest

from edgelab.common.errors import ConfigError
from edgelab.emulation.memory_model import device_memory
from edgelab.emulation.profiles import get_profile
from edgelab.models.costs import activation_floats_per_sample, kept_floats_per_sample

MB = 2**20


def test_lenet_keeps_every_tensor_it_makes() -> None:
    # No normalisation or addition: every forward tensor is some layer's input or an activation's output.
    assert kept_floats_per_sample("mlp") == 784 + 128 + 64 + 10
    assert kept_floats_per_sample("cnn") == activation_floats_per_sample("cnn")


def test_a_resnet_keeps_what_its_backward_pass_needs_once() -> None:
    # ResNet-8, one block a stage: the image, the stem's convolution and ReLU outputs; in stage 1 a block keeps
    # its two convolutions' outputs (normalisation inputs) and two ReLU outputs (in place over the normalised
    # tensors); a projecting block also its second normalisation's output (the projection's input in layer
    # order) and the projection's output; then the pooled features and the softmax.
    # The image is MXNet's 28x28 crop of CIFAR's 32x32 (edgelab.models.costs.RESNET_SIDE).
    stage1, stage2, stage3 = 28 * 28 * 16, 14 * 14 * 32, 7 * 7 * 64
    expected = 28 * 28 * 3 + 2 * stage1 + 4 * stage1 + 6 * stage2 + 6 * stage3 + 64 + 10
    assert kept_floats_per_sample("resnet8") == expected
    assert kept_floats_per_sample("resnet32") < activation_floats_per_sample("resnet32")


def test_the_memory_is_its_four_parts() -> None:
    pi3b = get_profile("pi3b")
    need = device_memory(pi3b, "mlp", 64, resident_samples=60_000, data_bytes_per_sample=784 * 4)
    assert need.framework_mb == pi3b.framework_mb
    assert need.weights_mb == pytest.approx(3 * 4 * 109_386 / MB)
    assert need.activations_mb == pytest.approx(64 * 986 * 4 / MB)
    assert need.data_mb == pytest.approx(60_000 * 784 * 4 / MB)
    assert need.total_mb == pytest.approx(need.framework_mb + need.weights_mb + need.activations_mb + need.data_mb)


def test_a_bigger_batch_holds_more_and_streamed_data_holds_none() -> None:
    pi3b = get_profile("pi3b")
    small, big = device_memory(pi3b, "resnet32", 32), device_memory(pi3b, "resnet32", 64)
    assert big.activations_mb == pytest.approx(2 * small.activations_mb) and small.data_mb == 0.0


@pytest.mark.parametrize(
    ("field", "value"), [("batch_size", 0), ("resident_samples", -1), ("data_bytes_per_sample", 1.5)]
)
def test_bad_input_names_its_parameter(field: str, value: object) -> None:
    args = {"batch_size": 32, "resident_samples": 0, "data_bytes_per_sample": 0} | {field: value}
    batch = args.pop("batch_size")
    with pytest.raises(ConfigError, match=field):
        device_memory(get_profile("pi3b"), "mlp", batch, **args)
