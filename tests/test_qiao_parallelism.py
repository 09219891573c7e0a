"""Data against model parallelism (qiao/fig3-1, fig3-2): real runs on two emulated devices, and the refusals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from edgelab.cluster import DeviceCluster
from edgelab.errors import ConfigError
from edgelab.experiments import qiao_parallelism as exp
from edgelab.figures import qiao_parallelism as figures
from edgelab.results import ResultsStore, StoredRun

SMALL = {
    "stages": [2],
    "devices": [1, 2],
    "slowdowns": [1, 3],
    "sample_limit": 256,
    "test_limit": 100,
    "pipeline_batch": 16,
}


@pytest.fixture(autouse=True)
def _no_download(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGELAB_OFFLINE", "1")


@pytest.fixture(scope="module")
def done(cluster: DeviceCluster, tmp_path_factory: pytest.TempPathFactory) -> tuple[exp.Plan, list[StoredRun]]:
    """The small plan run once on the two devices: K = 1, 2 and both strategies on N = 1, 2."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EDGELAB_OFFLINE", "1")
        plan = exp.prepare(**SMALL, data_dir=str(tmp_path_factory.mktemp("no-data")))
    return plan, exp.run(plan, store=ResultsStore(tmp_path_factory.mktemp("results")), cluster=cluster)


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"stages": [0]}, "stages"),
        ({"devices": [2, 17]}, "devices"),
        ({"strategies": ["end_average"]}, "strategies"),
        ({"slowdowns": [0.5]}, "slowdowns"),
        ({"pipeline_steps": 1}, "pipeline_steps"),  # the first batch is a warm-up: nothing would be measured
        ({"device_profile": "pi4b"}, "device_profile"),  # no fitted device model to time the steps
        ({"unknown": 1}, "unknown"),
    ],
)
def test_bad_parameters_are_refused_before_anything_is_built(kwargs: dict, parameter: str) -> None:
    with pytest.raises(ConfigError) as err:
        exp.ParallelismParams(**kwargs) if parameter != "unknown" else exp.prepare(**kwargs)
    assert err.value.parameter == parameter


@pytest.mark.parametrize(
    ("intervals", "most"),
    [
        ([(0, 1), (1, 2), (2, 3)], 1),  # one after another: an end frees the device before the next start
        ([(0, 2), (1, 3)], 2),
        ([(0, 5), (1, 2), (1.5, 3)], 3),
    ],
)
def test_max_concurrency_counts_overlapping_passes(intervals: list[tuple[float, float]], most: int) -> None:
    # Prepare
    passes = pd.DataFrame(intervals, columns=["start", "end"])
    # Execute / Assert
    assert exp.max_concurrency(passes) == most


def test_layer_map_splits_the_weights_and_counts_the_working_set(done: tuple[exp.Plan, list[StoredRun]]) -> None:
    plan, _ = done
    layers = exp.layer_map(plan)
    totals = layers.groupby("K")["parameters"].sum()
    assert totals[1] == totals[2] == 37_642  # every split holds the whole network once
    single = layers[layers["K"] == 1].iloc[0]
    # Weights and gradients, then the batch's input (28x28 floats) and every layer's output: 5 maps of 28x28x32,
    # the pooled 32 floats and the 10 class scores.
    per_image = 28 * 28 * 4 + 5 * 28 * 28 * 32 * 4 + 32 * 4 + 10 * 4
    assert single["working_set_bytes"] == 2 * 4 * 37_642 + 16 * per_image
    first = layers[(layers["K"] == 2) & (layers["stage"] == 1)].iloc[0]
    assert first["output_bytes_per_batch"] == 16 * 28 * 28 * 32 * 4


def test_model_parallel_runs_one_stage_at_a_time(done: tuple[exp.Plan, list[StoredRun]]) -> None:
    plan, stored = done
    summary = exp.model_summary(plan, stored).set_index("K")
    assert list(summary.index) == [1, 2]
    assert (summary["max_concurrency"] == 1).all()
    # What crosses between the two stages each batch: the first stage's output forward, its gradient back.
    activation = 16 * 28 * 28 * 32 * 4
    assert summary.loc[2, "activation_bytes_per_batch"] == activation
    assert summary.loc[2, "gradient_bytes_per_batch"] == activation
    assert summary.loc[1, "activation_bytes_per_batch"] == 0
    assert 0 < summary.loc[2, "utilisation"] <= 0.5
    assert summary.loc[2, "working_set_vs_single"] < 1


def test_shards_are_disjoint_and_cover_the_training_set(done: tuple[exp.Plan, list[StoredRun]]) -> None:
    plan, stored = done
    shards = exp.shards(plan, stored)
    labels = shards[[f"label_{c}" for c in range(10)]].sum(axis=1)
    assert (labels == shards["rows"]).all()
    assert shards.groupby("N")["rows"].sum().tolist() == [256, 256]
    assert shards[shards["N"] == 2]["rows"].tolist() == [128, 128]


def test_one_device_is_the_same_sgd_either_way(done: tuple[exp.Plan, list[StoredRun]]) -> None:
    plan, stored = done
    single = {k.strategy: r for k, r in exp.data_runs(plan, stored).items() if k.devices == 1}
    assert single["ps_sync"].summary["weights_sha256"] == single["ps_async"].summary["weights_sha256"]
    runs = exp.data_summary(plan, stored).set_index(["strategy", "N"])
    assert runs.loc[("ps_sync", 1), "epoch_s"] == pytest.approx(runs.loc[("ps_async", 1), "epoch_s"], rel=1e-12)
    assert runs.loc[("ps_async", 2), "staleness_max"] >= 1


def test_straggler_slows_sync_more_and_the_replay_is_the_runs_schedule(
    done: tuple[exp.Plan, list[StoredRun]],
) -> None:
    plan, stored = done
    slow = exp.stragglers(plan, stored).set_index("s")
    assert slow.loc[1.0, "replayed_s"] == 0.0
    assert slow.loc[3.0, "sync_epoch_s"] > slow.loc[1.0, "sync_epoch_s"]
    assert slow.loc[3.0, "async_relative"] > slow.loc[3.0, "sync_relative"]
    # Slowing nobody changes nothing: s=1 composes the run's own rounds.
    sync = next(r for k, r in exp.data_runs(plan, stored).items() if k.strategy == "ps_sync" and k.devices == 2)
    rounds = exp.timeline.compose(
        sync.tables["records"],
        plan.profile,
        compute_s=plan.device_model.records_compute_s(sync.tables["records"], exp.DATA_MODEL),
    )
    assert slow.loc[1.0, "sync_epoch_s"] == pytest.approx(float(rounds["elapsed_s"].iloc[-1]), rel=1e-12)


def test_render_writes_both_items_with_verdicts(done: tuple[exp.Plan, list[StoredRun]], tmp_path: Path) -> None:
    plan, stored = done
    items = figures.render(tmp_path, plan, stored, notebook="notebooks/qiao_parallelism.ipynb", parameters={})
    assert [i.id for i in items] == ["qiao/fig3-1", "qiao/fig3-2"]
    for item in items:
        assert all(Path(f).is_file() for f in item.files)
        assert item.status in ("reproduced", "differs", "not judged") and item.why
    assert np.isfinite(exp.model_summary(plan, stored)["utilisation"]).all()
