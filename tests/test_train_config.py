"""Tests for edgelab.training.data_parallel without a cluster: config validation, pre-checks, memory estimate."""

from __future__ import annotations

import re
from typing import Any

import pytest

from edgelab.common.errors import ConfigError, DeviceMemoryError
from edgelab.emulation.profiles import get_profile, with_memory
from edgelab.training.data_parallel import TrainConfig, check, estimate_memory_mb, samples_per_device

MB = 2**20
PI3B = get_profile("pi3b")


# ---------------------------------------------------------------- TrainConfig


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"model": "resnet"}, "model"),
        ({"sync_every": "step"}, "sync_every"),
        ({"worker_data": "half"}, "worker_data"),
        ({"partition": "dirichlet"}, "partition"),
        ({"strategy": "allreduce"}, "strategy"),
        ({"n_devices": 0}, "n_devices"),
        ({"n_devices": True}, "n_devices"),
        ({"n_devices": 2.0}, "n_devices"),
        ({"epochs": 0}, "epochs"),
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": -32}, "batch_size"),
        ({"momentum": 1.0}, "momentum"),
        ({"momentum": -0.5}, "momentum"),
        ({"weight_decay": -1e-4}, "weight_decay"),
        ({"learning_rate": 0.0}, "learning_rate"),
    ],
)
def test_train_config_rejects_bad_values(kwargs: dict[str, Any], parameter: str) -> None:
    # Execute
    with pytest.raises(ConfigError) as info:
        TrainConfig(**kwargs)

    # Assert
    assert info.value.parameter == parameter
    assert str(info.value).startswith(f"{parameter}=")


def test_train_config_defaults_and_spec() -> None:
    # Execute
    cfg = TrainConfig(model="cnn", learning_rate=0.1, seed=3)

    # Assert
    assert (cfg.spec.name, cfg.spec.learning_rate, cfg.spec.seed) == ("cnn", 0.1, 3)
    assert cfg.to_dict()["model"] == "cnn"
    assert cfg.to_dict()["n_devices"] == 1


# ---------------------------------------------------------------- samples_per_device


@pytest.mark.parametrize(
    ("n_train", "n_devices", "shard", "full"),
    [
        (10, 1, [10], [10]),
        (10, 3, [4, 3, 3], [10, 10, 10]),
        (100, 3, [34, 33, 33], [100, 100, 100]),
        (12, 4, [3, 3, 3, 3], [12, 12, 12, 12]),
    ],
)
def test_samples_per_device(n_train: int, n_devices: int, shard: list[int], full: list[int]) -> None:
    # Execute
    got_shard = samples_per_device(TrainConfig(n_devices=n_devices, worker_data="shard"), n_train)
    got_full = samples_per_device(TrainConfig(n_devices=n_devices, worker_data="full"), n_train)

    # Assert
    assert got_shard == shard
    assert sum(got_shard) == n_train
    assert got_full == full


# ---------------------------------------------------------------- estimate_memory_mb


def test_estimate_memory_hand_computed() -> None:
    # Execute
    est = estimate_memory_mb("mlp", 2, 10)

    # Assert: 4 copies of 109,386 float32; batch 2 x (986 kept activations + the widest layer's 128 gradient);
    # 10 x (784 x 4 + 8) bytes
    assert est["parameters"] == pytest.approx(4 * 109386 * 4 / MB)
    assert est["activations"] == pytest.approx(2 * (986 + 128) * 4 / MB)
    assert est["data"] == pytest.approx(10 * 3144 / MB)
    assert est["total"] == pytest.approx(est["parameters"] + est["activations"] + est["data"])


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_estimate_memory_grows_with_batch_and_samples(model: str) -> None:
    # Execute
    base = estimate_memory_mb(model, 32, 1000)["total"]
    bigger_batch = estimate_memory_mb(model, 64, 1000)["total"]
    more_samples = estimate_memory_mb(model, 32, 2000)["total"]

    # Assert
    assert base < bigger_batch
    assert base < more_samples


def test_estimate_memory_cnn_needs_more_than_mlp() -> None:
    # Execute / Assert
    assert estimate_memory_mb("cnn", 64, 1000)["total"] > estimate_memory_mb("mlp", 64, 1000)["total"]


# ---------------------------------------------------------------- check


@pytest.mark.parametrize("batch_size", [34, 64])
def test_check_rejects_batch_larger_than_smallest_shard(batch_size: int) -> None:
    # Prepare: 100 samples over 3 devices -> shards 34, 33, 33
    cfg = TrainConfig(n_devices=3, batch_size=batch_size)

    # Execute
    with pytest.raises(ConfigError, match="batch_size") as info:
        check(cfg, n_train=100, profile=PI3B)

    # Assert
    assert info.value.parameter == "batch_size"
    assert "33 samples" in str(info.value)


def test_check_accepts_batch_equal_to_smallest_shard() -> None:
    # Prepare
    cfg = TrainConfig(n_devices=3, batch_size=33)

    # Execute
    est = check(cfg, n_train=100, profile=PI3B)

    # Assert: the estimate is the busiest device's (34 samples)
    assert est == estimate_memory_mb("mlp", 33, 34)


def test_check_batch_against_full_data() -> None:
    # Prepare: with full data every device sees all 100 samples
    cfg = TrainConfig(n_devices=3, batch_size=64, worker_data="full")

    # Execute / Assert: no error
    assert check(cfg, n_train=100, profile=PI3B)["total"] > 0


def test_check_rejects_more_devices_than_samples() -> None:
    # Prepare
    cfg = TrainConfig(n_devices=5, batch_size=1)

    # Execute / Assert
    with pytest.raises(ConfigError, match="n_devices") as info:
        check(cfg, n_train=4, profile=PI3B)
    assert info.value.parameter == "n_devices"


def test_check_rejects_run_that_does_not_fit_device_memory() -> None:
    # Prepare: 50 MB above the OS allowance and the framework's footprint
    tiny = with_memory(PI3B, PI3B.os_reserve_mb + PI3B.framework_mb + 50)
    cfg = TrainConfig(model="cnn", n_devices=2, worker_data="full", batch_size=64)
    need = estimate_memory_mb("cnn", 64, 60000)["total"]

    # Execute
    with pytest.raises(DeviceMemoryError) as info:
        check(cfg, n_train=60000, profile=tiny)

    # Assert
    message = str(info.value)
    assert tiny.training_budget_mb == 50
    assert need > 50
    assert f"needs about {need:.0f} MB" in message
    assert re.search(r"\b50 MB\b", message)
    assert "cnn" in message and "60000" in message


def test_same_run_fits_default_pi3b() -> None:
    # Prepare
    cfg = TrainConfig(model="cnn", n_devices=2, worker_data="full", batch_size=64)

    # Execute
    est = check(cfg, n_train=60000, profile=PI3B)

    # Assert
    assert est["total"] < PI3B.usable_memory_mb


# ---------------------------------------------------------------- with_memory


@pytest.mark.parametrize("memory_mb", [200, 100, 0, -1])
def test_with_memory_rejects_memory_not_above_os_allowance(memory_mb: int) -> None:
    # Execute / Assert
    with pytest.raises(ConfigError, match="device_memory_mb") as info:
        with_memory(PI3B, memory_mb)
    assert "200 MB" in str(info.value)


def test_with_memory_replaces_only_memory() -> None:
    # Execute
    small = with_memory(PI3B, 512)

    # Assert
    assert small.memory_mb == 512
    assert small.usable_memory_mb == 312
    assert (small.cores, small.link_mbps, small.os_reserve_mb) == (PI3B.cores, PI3B.link_mbps, 200)
    assert with_memory(PI3B, None) is PI3B


def test_estimate_memory_of_streamed_data_leaves_the_data_out() -> None:
    est = estimate_memory_mb("resnet110", 64, 50_000, data_resident=False)
    assert est["data"] == 0.0
    # Measured on this host's TensorFlow: a ResNet-110 step at batch 64 (28x28 crops) peaks 736-755 MB above the
    # framework.
    assert 650 < est["total"] < 800


def test_memory_below_the_framework_footprint_is_refused() -> None:
    floor = PI3B.os_reserve_mb + PI3B.framework_mb
    allowed = rf"device_memory_mb={floor} .* > {floor} MB: the OS allowance \(200 MB\) plus the framework"
    with pytest.raises(ConfigError, match=allowed):
        with_memory(PI3B, floor)
