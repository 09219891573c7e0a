"""Round deadlines on the device clock: a slowed device's late updates dropped or applied a round late.

A real two-device cluster (tests/conftest.py); device 1 is slowed 4x on the
device clock (``TrainConfig.slowdown``), which changes only when its updates
arrive, never what it computes.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.common.errors import ConfigError
from edgelab.data import Dataset
from edgelab.sync.deadline import Deadline, arrival_s, build_deadline, slowness
from edgelab.training.data_parallel import TrainConfig, train

QUIET = {"log": lambda _: None}
BASE = {"n_devices": 2, "batch_size": 32, "slowdown": (1.0, 4.0)}


def test_an_adaptive_deadline_is_the_median_plus_k_mads_of_recent_arrivals() -> None:
    d = Deadline(k=3.0)
    assert d.limit_s() == math.inf
    for arrivals in ([1.0, 2.0], [1.0, 2.0], [1.0, 2.0], [1.0, 2.0], [1.0, 2.0], [10.0, 10.0]):
        d.observe(arrivals)
    # the window keeps 5 rounds: four of [1, 2] and one of [10, 10]: median 2, MAD 1
    assert d.limit_s() == pytest.approx(2.0 + 3.0 * 1.0)
    assert Deadline(fixed_s=2.5).limit_s() == 2.5
    assert arrival_s(1.0, 100.0, 300.0, rate_bytes_per_s=100.0, latency_s=0.5) == pytest.approx(1.0 + 4.0 + 1.0)


@pytest.mark.parametrize("spec", ["fixed:0", "fixed:-1", "adaptive:-1", "fixed:x", "sometimes", "fixed:inf"])
def test_a_bad_deadline_is_refused_naming_the_parameter(spec: str) -> None:
    with pytest.raises(ConfigError) as raised:
        build_deadline(spec)
    assert raised.value.parameter == "deadline"
    with pytest.raises(ConfigError, match="deadline"):
        TrainConfig(deadline=spec)


@pytest.mark.parametrize(
    ("settings", "parameter"),
    [
        ({"slowdown": (1.0,)}, "slowdown"),
        ({"slowdown": (1.0, 0.0)}, "slowdown"),
        ({"late": "later"}, "late"),
        ({"strategy": "ps_async", "deadline": "fixed:1", "slowdown": ()}, "deadline"),
    ],
)
def test_bad_straggler_settings_are_refused(settings: dict, parameter: str) -> None:
    with pytest.raises(ConfigError) as raised:
        TrainConfig(**{**BASE, **settings})
    assert raised.value.parameter == parameter


@pytest.fixture(scope="module")
def runs(cluster: DeviceCluster, dataset: Dataset) -> dict[str, object]:
    settings = {
        "waits": {},
        "drop": {"deadline": "adaptive:0.5"},
        "stale": {"deadline": "adaptive:0.5", "late": "stale"},
        "never": {"deadline": "fixed:1e9"},
    }
    return {name: train(cluster, dataset, TrainConfig(**BASE, **extra), **QUIET) for name, extra in settings.items()}


@pytest.mark.integration
def test_a_slowed_device_arrives_later_and_an_unreached_deadline_changes_nothing(runs: dict) -> None:
    waits = runs["waits"].records
    fast, slow = (waits[waits["device_index"] == i].reset_index() for i in (0, 1))
    # the same work (shards of 128, 4 batches each) at 4x the compute time
    assert np.allclose(slow["device_s"], 4 * fast["device_s"])
    assert (slow["arrival_s"] > fast["arrival_s"]).all()
    assert not waits["late"].any()
    assert runs["never"].weights_sha256 == runs["waits"].weights_sha256


@pytest.mark.integration
def test_late_updates_are_dropped_or_applied_a_round_late(runs: dict) -> None:
    drop, stale = runs["drop"].records, runs["stale"].records
    for records in (drop, stale):
        # round 0 has no history to judge by; from round 1 the slow device's arrivals are past median + 0.5 MAD
        late = records.pivot(index="round", columns="device_index", values="late")
        assert late[0].tolist() == [False] * 4 and late[1].tolist() == [False, True, True, True]
        waited = records.groupby("round")["round_emulated_s"].first()
        assert (waited.iloc[1:] < records.groupby("round")["arrival_s"].max().iloc[1:]).all()
    assert (drop.loc[drop["late"], "applied_round"] == -1).all()
    assert (stale.loc[stale["late"], "applied_round"] == stale.loc[stale["late"], "round"] + 1).all()
    digests = {runs[n].weights_sha256 for n in ("waits", "drop", "stale")}
    assert len(digests) == 3  # dropping, deferring and waiting each give their own weights
    report = slowness(drop).set_index("device")
    assert report["late"].tolist() == [0, 3] and report.loc[report.index[1], "late_share"] == 0.75
