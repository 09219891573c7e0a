"""Many emulated devices per worker process (``hosting="virtual"``).

A real three-worker cluster (tests/conftest.py) trains the LeNet-MLP. A run
with its devices hosted many to a worker must be the run with a worker per
device: the same devices train the same samples with the same bytes, and the
weights agree to float rounding (the hosts pre-sum their devices' deltas, so
the server's sums are grouped differently). A worker killed mid-round comes
back with every device it hosts, and the run ends as an undisturbed one.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.cluster.faults import Kill
from edgelab.common.errors import ConfigError
from edgelab.data import Dataset
from edgelab.training.config import clients_of_round
from edgelab.training.data_parallel import TrainConfig, train

QUIET = {"log": lambda _: None}
# float32 deltas of a few SGD steps, averaged in two groupings: the means differ in the last bits only.
GROUPING_ATOL = 1e-6
SAME = ["round", "device_index", "samples", "steps", "bytes_received", "bytes_sent"]


@pytest.fixture(scope="module")
def cluster(three_devices: DeviceCluster) -> DeviceCluster:
    return three_devices


def _gap(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b, strict=True))


def _rows(run: object) -> list[tuple[object, ...]]:
    records = run.records  # type: ignore[attr-defined]
    return sorted(map(tuple, records[SAME].itertuples(index=False)))


@pytest.mark.integration
@pytest.mark.parametrize(
    "settings",
    [
        {"sync_every": "epoch", "epochs": 2},
        {"sync_period": 2, "client_fraction": 0.5, "seed": 4},
        {"compressor": "topk:0.1", "sync_period": 4},
        {"sync_period": 2, "deadline": "fixed:0.05", "late": "stale", "slowdown": (1.0, 1.0, 4.0)},
    ],
    ids=["fedavg", "local-sgd-client-fraction", "compressed", "deadline-stale"],
)
def test_virtual_devices_train_as_devices_of_their_own(
    cluster: DeviceCluster, dataset: Dataset, settings: dict[str, object]
) -> None:
    cfg = TrainConfig(n_devices=3, batch_size=16, **settings)  # type: ignore[arg-type]
    own = train(cluster, dataset, cfg, **QUIET)
    hosted = train(cluster, dataset, replace(cfg, hosting="virtual"), **QUIET)
    assert _rows(hosted) == _rows(own)
    assert _gap(hosted.weights, own.weights) <= GROUPING_ATOL
    if cfg.deadline != "none":  # the same updates were late, and applied a round later
        late = [(r.round, r.device_index, r.applied_round) for r in own.records.itertuples() if r.late]
        assert late and late == [
            (r.round, r.device_index, r.applied_round) for r in hosted.records.itertuples() if r.late
        ]
    assert hosted.host["hosting"] == "virtual: 3 devices on 3 worker processes"
    assert own.host["hosting"].startswith("process")


@pytest.mark.integration
def test_many_devices_share_few_workers_and_each_keeps_its_own_shard(cluster: DeviceCluster, dataset: Dataset) -> None:
    cfg = TrainConfig(
        n_devices=16, batch_size=8, client_fraction=0.25, sync_every="epoch", epochs=2, seed=5, hosting="virtual"
    )
    run = train(cluster, dataset, cfg, **QUIET)
    assert run.host["hosting"] == "virtual: 16 devices on 3 worker processes"
    # Each device its own 16 digits (256 / 16), loaded on the worker that hosts it, round-robin.
    assert run.shards["samples"].tolist() == [16] * 16
    assert run.shards["host"].tolist() == [cluster.devices[i % 3] for i in range(16)]
    records = run.records
    for rnd, trained in records.groupby("round")["device_index"]:
        assert sorted(trained) == sorted(clients_of_round(cfg, int(rnd), list(range(16))))  # 4 a round
        assert records.loc[trained.index, "host"].tolist() == [cluster.devices[i % 3] for i in trained]
    assert (records["samples"] == 16).all()
    # Each device's time is its own training: the CPU seconds of one device's round, not a worker's queue.
    per_worker = records.groupby(["round", "host"])["cpu_s"].sum()
    assert (records["cpu_s"] < per_worker.max()).all()
    assert run.evaluations["accuracy"].iloc[-1] > 0.1


@pytest.mark.integration
def test_a_killed_worker_comes_back_with_all_its_devices(cluster: DeviceCluster, dataset: Dataset) -> None:
    cfg = TrainConfig(n_devices=7, batch_size=16, sync_period=2, seed=2, hosting="virtual")
    undisturbed = train(cluster, dataset, cfg, **QUIET)
    run = train(cluster, dataset, cfg, kills=[Kill(cluster.devices[1], "train", 1)], **QUIET)
    assert run.recoveries["device"].tolist() == [cluster.devices[1]]
    assert _rows(run) == _rows(undisturbed)
    assert _gap(run.weights, undisturbed.weights) == 0.0  # the same groupings in the same order: the same bits


def test_hosting_is_checked_before_any_cluster_work(cluster: DeviceCluster, dataset: Dataset) -> None:
    with pytest.raises(ConfigError, match="hosting.*'bogus'.*process.*virtual"):
        TrainConfig(n_devices=2, hosting="bogus")
    with pytest.raises(ConfigError, match="hosting.*'virtual'.*strategy='ps_async'"):
        TrainConfig(n_devices=2, strategy="ps_async", hosting="virtual")
    with pytest.raises(ConfigError, match="transport.*'allreduce'.*'direct' under hosting='virtual'"):
        train(cluster, dataset, TrainConfig(n_devices=2, hosting="virtual"), transport="allreduce", **QUIET)
    with pytest.raises(ConfigError, match="n_devices.*at most the 3 devices.*hosting='virtual'"):
        train(cluster, dataset, TrainConfig(n_devices=4), **QUIET)
