"""Asynchronous SGD: the emulated-clock order of updates, and real runs on a two-device cluster."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.common.errors import ConfigError, DeviceOutOfMemory
from edgelab.data import Dataset
from edgelab.emulation.async_schedule import run_schedule, simulate
from edgelab.emulation.device_model import DeviceModel
from edgelab.emulation.profiles import get_profile
from edgelab.emulation.timeline import Topology
from edgelab.models.costs import training_flops_per_sample, weight_count
from edgelab.sync import DeviceUpdate, ParameterServerAsync, ParameterServerSync, build_strategy
from edgelab.training.data_parallel import TrainConfig, train


def test_one_device_is_never_stale() -> None:
    plan = simulate([[1.0, 1.0, 1.0]], [0.5], [0.5])
    assert plan["staleness"].tolist() == [0, 0, 0]
    assert plan["t_applied"].tolist() == [2.0, 4.0, 6.0]


def test_equal_devices_take_turns_and_each_update_is_n_minus_1_stale() -> None:
    plan = simulate([[1.0] * 3] * 3, [0.0] * 3, [0.0] * 3)
    assert plan["device_index"].tolist() == [0, 1, 2] * 3
    # All pull version 0 at t=0; afterwards each device pulls right after its own update.
    assert plan["staleness"].tolist() == [0, 1, 2, 2, 2, 2, 2, 2, 2]


def test_a_faster_device_applies_more_updates_first() -> None:
    plan = simulate([[1.0] * 4, [3.0] * 2], [0.0, 0.0], [0.0, 0.0])
    assert plan["device_index"].tolist()[:3] == [0, 0, 0]
    # Device 1 pulled version 0 and lands at t=3, tied with device 0's third update, which goes first.
    assert plan.loc[plan["device_index"] == 1, "staleness"].iloc[0] == 3


def test_a_shared_link_queues_the_pulls() -> None:
    plan = simulate([[1.0], [1.0]], [1.0, 1.0], [0.0, 0.0], Topology("shared"))
    assert plan["t_pull"].tolist() == [0.0, 1.0]
    per_device = simulate([[1.0], [1.0]], [1.0, 1.0], [0.0, 0.0], Topology("per_device"))
    assert per_device["t_pull"].tolist() == [0.0, 0.0]


def test_a_runs_schedule_times_steps_on_the_device_model_and_weights_on_the_link() -> None:
    # Prepare: 1 ms per step plus 1 GFLOP/s; every LeNet-MLP weight over pi3b's link, each way
    clock, profile = DeviceModel("pi3b", step_s=0.001, flops_per_s=1e9), get_profile("pi3b")
    samples = [[32, 32, 16], [32, 8]]
    step = [[0.001 + n * training_flops_per_sample("mlp") / 1e9 for n in row] for row in samples]
    link = profile.latency_s + weight_count("mlp") * 4 / profile.link_bytes_per_s
    inputs = {"device_model": clock, "profile": profile}

    # Execute
    played = run_schedule("mlp", samples, topology=Topology(), **inputs)
    slowed = run_schedule("mlp", samples, topology=Topology(), slowdown={1: 3.0}, **inputs)
    apart = Topology(master_is_device=False)
    remote = run_schedule("mlp", samples, topology=apart, **inputs)

    # Assert: the server's own device exchanges locally, the other over the link; only device 1 slowed
    pd.testing.assert_frame_equal(played, simulate(step, [0.0, link], [0.0, link]))
    assert played["t_applied"].iloc[0] == pytest.approx(step[0][0], rel=1e-12)
    pd.testing.assert_frame_equal(slowed, simulate([step[0], [3 * t for t in step[1]]], [0.0, link], [0.0, link]))
    pd.testing.assert_frame_equal(remote, simulate(step, [link, link], [link, link], apart))


def test_async_server_applies_one_update_as_the_sync_server_applies_one_device() -> None:
    rng = np.random.default_rng(0)
    weights = [rng.normal(size=(3, 2)).astype(np.float32)]
    updates = [DeviceUpdate("d", [rng.normal(size=(3, 2)).astype(np.float32)], 8) for _ in range(3)]
    sync, asyn = ParameterServerSync(momentum=0.9), ParameterServerAsync(momentum=0.9)
    a = b = weights
    for u in updates:
        a = sync.aggregate(a, [u]) or a
        b = asyn.apply(b, u)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_strategy_names_and_their_settings_are_checked() -> None:
    assert isinstance(build_strategy("ps_async"), ParameterServerAsync)
    assert build_strategy("end_average").sync_every == "epoch"
    with pytest.raises(ConfigError, match="strategy='nope'"):
        TrainConfig(strategy="nope")
    with pytest.raises(ConfigError, match="sync_every"):
        TrainConfig(strategy="ps_async", sync_every="epoch")
    with pytest.raises(ConfigError, match="end_average"):
        TrainConfig(strategy="end_average", sync_every="batch")
    with pytest.raises(ConfigError, match="eval_every"):
        TrainConfig(eval_every=0)


# ------------------------------------------------------------ on a cluster ----


@pytest.mark.integration
def test_async_with_one_device_is_plain_sgd_bit_for_bit(cluster: DeviceCluster, dataset: Dataset) -> None:
    common = {"model": "mlp", "n_devices": 1, "batch_size": 32, "momentum": 0.9, "seed": 3}
    sync = train(cluster, dataset, TrainConfig(strategy="ps_sync", **common))
    asyn = train(cluster, dataset, TrainConfig(strategy="ps_async", **common))
    assert asyn.weights_sha256 == sync.weights_sha256
    assert asyn.records["staleness"].tolist() == [0] * 8


@pytest.mark.integration
def test_async_with_two_devices_records_staleness_and_evaluates_as_asked(
    cluster: DeviceCluster, dataset: Dataset
) -> None:
    cfg = TrainConfig(model="mlp", n_devices=2, batch_size=32, strategy="ps_async", eval_every=4, eval_limit=100)
    first = train(cluster, dataset, cfg)
    again = train(cluster, dataset, cfg)
    records = first.records
    assert len(records) == 8  # 2 shards of 128 samples, 4 batches each
    assert records["update"].tolist() == list(range(8))
    # The master's own exchange is local, so device 0 runs ahead: updates land between another's pull and push.
    assert records["staleness"].max() >= 1
    assert (records["pulled_version"] + records["staleness"] == records["update"]).all()
    assert first.progress["updates"].tolist() == [4, 8]
    assert first.weights_sha256 == again.weights_sha256  # the emulated clock fixes the order
    sync = train(cluster, dataset, TrainConfig(model="mlp", n_devices=2, batch_size=32))
    assert sync.weights_sha256 != first.weights_sha256


@pytest.mark.integration
def test_a_step_over_the_memory_budget_ends_the_run_as_out_of_memory(cluster: DeviceCluster, dataset: Dataset) -> None:
    cfg = TrainConfig(model="mlp", n_devices=1, batch_size=32, memory_budget_mb=0.001)
    with pytest.raises(DeviceOutOfMemory, match="ran out of memory") as caught:
        train(cluster, dataset, cfg)
    assert caught.value.needed_mb > 0.001
    assert caught.value.device == "pi3b-0"
