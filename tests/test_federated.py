"""Rounds of several batches (local SGD) or epochs (federated averaging), and a share of the devices per round.

A real two-device cluster (tests/conftest.py) trains the LeNet-MLP; each
setting is checked against what it must equal: a period of H batches trains
the same batches as H rounds of one (on one device the same weights, to float
rounding of the applied delta), a round of E local epochs trains those E
epochs' batches, and a client fraction trains exactly the devices its seeded
draw names.
"""

from __future__ import annotations

import numpy as np
import pytest

from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.common.errors import ConfigError
from edgelab.data import Dataset
from edgelab.sync.local_sgd import SyncPeriod
from edgelab.training.config import clients_of_round
from edgelab.training.data_parallel import TrainConfig, phase_counts, train

QUIET = {"log": lambda _: None}
# Float32 weights after a few dozen SGD steps: the delta applied once or step by step differs by rounding only.
ROUNDING_ATOL = 2e-6


def _close(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b, strict=True))


@pytest.mark.integration
def test_a_period_of_batches_trains_the_same_batches_in_fewer_rounds(cluster: DeviceCluster, dataset: Dataset) -> None:
    every = train(cluster, dataset, TrainConfig(n_devices=1, batch_size=32), **QUIET)
    local = train(cluster, dataset, TrainConfig(n_devices=1, batch_size=32, sync_period=3), **QUIET)
    # 256 digits in batches of 32: 8 batches, rounds of 3, 3 and 2
    assert local.records["steps"].tolist() == [3, 3, 2]
    assert local.records["samples"].tolist() == [96, 96, 64]
    assert len(every.records) == 8
    assert _close(every.weights, local.weights) <= ROUNDING_ATOL
    two = train(cluster, dataset, TrainConfig(n_devices=2, batch_size=32, sync_period=2), **QUIET)
    assert two.records.groupby("round")["device"].count().tolist() == [2, 2]  # 4 batches each, rounds of 2
    assert len(two.records["round"].unique()) == phase_counts(two.config, dataset.n_train)["train"]


@pytest.mark.integration
def test_an_adaptive_period_follows_the_rounds_losses(cluster: DeviceCluster, dataset: Dataset) -> None:
    cfg = TrainConfig(
        n_devices=2, batch_size=4, epochs=3, learning_rate=0.1, sync_period=16, sync_period_rule="adaptive"
    )
    run = train(cluster, dataset, cfg, **QUIET)
    rounds = run.records.groupby("round").agg(
        steps=("steps", "max"), loss=("loss", "mean"), first=("first_step", "min")
    )
    # Replayed from the recorded losses, the rule gives every round's period (cut short at an epoch's end).
    replay = SyncPeriod(16, "adaptive")
    for row in rounds.itertuples():
        assert row.steps == min(replay.next(), 32 - row.first)  # 128 digits per device: 32 batches of 4
        replay.observe(row.loss)
    assert rounds["steps"].iloc[0] == 16 and rounds["steps"].min() < 16  # the loss fell: the period shortened
    assert run.records["samples"].sum() == 3 * dataset.n_train


@pytest.mark.integration
def test_a_round_of_local_epochs_trains_those_epochs_batches(cluster: DeviceCluster, dataset: Dataset) -> None:
    per_epoch = TrainConfig(n_devices=1, batch_size=64, epochs=3, sync_every="epoch")
    all_three = TrainConfig(n_devices=1, batch_size=64, epochs=3, sync_every="epoch", sync_period=3)
    a, b = (train(cluster, dataset, cfg, **QUIET) for cfg in (per_epoch, all_three))
    assert len(a.records) == 3 and len(b.records) == 1
    assert b.records["samples"].tolist() == [3 * dataset.n_train]
    assert _close(a.weights, b.weights) <= ROUNDING_ATOL  # each epoch starts where the last one ended
    assert b.evaluations["epoch"].tolist() == [3]  # evaluated once, after the round's three epochs


@pytest.mark.integration
def test_a_client_fraction_trains_the_drawn_devices_only(cluster: DeviceCluster, dataset: Dataset) -> None:
    cfg = TrainConfig(n_devices=2, batch_size=32, client_fraction=0.5, seed=3)
    run = train(cluster, dataset, cfg, **QUIET)
    trained = run.records.groupby("round")["device_index"].apply(list).tolist()
    assert all(len(devices) == 1 for devices in trained)
    assert trained == [clients_of_round(cfg, r, [0, 1]) for r in range(len(trained))]
    assert {d for devices in trained for d in devices} == {0, 1}  # 4 draws of one of two: both trained
    # Each device walks only its own shard: half the data goes unused in a round it sits out.
    assert run.records["samples"].sum() == 32 * len(trained)


def test_a_draw_is_seeded_and_keeps_at_least_one_device() -> None:
    cfg = TrainConfig(n_devices=10, client_fraction=0.3, seed=1)
    draws = [clients_of_round(cfg, r, list(range(10))) for r in range(5)]
    assert draws == [clients_of_round(cfg, r, list(range(10))) for r in range(5)]
    assert all(len(d) == 3 and d == sorted(d) for d in draws)
    assert len({tuple(d) for d in draws}) > 1
    assert clients_of_round(TrainConfig(n_devices=3, client_fraction=0.1), 0, [0, 1, 2]) != []
    assert clients_of_round(TrainConfig(n_devices=3), 7, [0, 2]) == [0, 2]


@pytest.mark.parametrize(
    ("settings", "parameter"),
    [
        ({"sync_period": 0}, "sync_period"),
        ({"sync_period": 1.5}, "sync_period"),
        ({"sync_every": "epoch", "epochs": 3, "sync_period": 2}, "sync_period"),
        ({"client_fraction": 0.0}, "client_fraction"),
        ({"client_fraction": 1.5}, "client_fraction"),
        ({"strategy": "ps_async", "sync_period": 2}, "strategy"),
        ({"strategy": "ps_async", "client_fraction": 0.5}, "strategy"),
        ({"sync_period_rule": "sometimes"}, "sync_period_rule"),
        ({"sync_period_rule": "adaptive", "sync_every": "epoch"}, "sync_period_rule"),
    ],
)
def test_bad_round_settings_are_refused_naming_the_parameter(settings: dict, parameter: str) -> None:
    with pytest.raises(ConfigError) as raised:
        TrainConfig(n_devices=2, **settings)
    assert raised.value.parameter == parameter


def test_settings_at_their_defaults_leave_stored_keys_unchanged() -> None:
    plain = TrainConfig(n_devices=2).to_dict()
    assert "sync_period" not in plain and "client_fraction" not in plain and "compressor" not in plain
    assert TrainConfig(n_devices=2, sync_period=4).to_dict()["sync_period"] == 4


@pytest.mark.parametrize("scheme", ["iid", "label"])
def test_a_shared_subset_is_on_every_device_and_the_rest_on_one(scheme: str) -> None:
    from edgelab.data import partition, shared_subset_split
    from edgelab.training.config import samples_per_device

    labels = np.repeat(np.arange(10), 30)  # 300 samples, 10 labels
    shards = shared_subset_split(labels, 4, 0.05, scheme=scheme, seed=2)
    common = set.intersection(*(set(s.tolist()) for s in shards))
    assert len(common) == 15  # round(0.05 * 300)
    rest = [sorted(set(s.tolist()) - common) for s in shards]
    assert sorted(i for r in rest for i in r) == sorted(set(range(300)) - common)  # each other sample once
    assert all(len(s) == len(set(s.tolist())) for s in shards)
    # the rest is cut as partition cuts it
    others = np.setdiff1d(np.arange(300), sorted(common))
    assert rest == [sorted(others[s].tolist()) for s in partition(labels[others], 4, scheme=scheme, seed=2)]
    if scheme == "iid":
        cfg = TrainConfig(n_devices=4, shared_fraction=0.05)
        assert [len(s) for s in shards] == samples_per_device(cfg, 300)
    assert [s.tolist() for s in shards] == [
        s.tolist() for s in shared_subset_split(labels, 4, 0.05, scheme=scheme, seed=2)
    ]
    with pytest.raises(ConfigError, match="shared_fraction"):
        shared_subset_split(labels, 4, 1.0)
