"""The Jeon experiment's plan: every run checked before any cluster work."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from edgelab.common.errors import ConfigError, DeviceMemoryError
from edgelab.models.transfer import RANDOM_BASE, TransferConfig, imagenet_weights, targets
from edgelab.papers.jeon import pipeline as jeon
from edgelab.papers.jeon.pipeline_figures import reductions
from edgelab.report.verdict import MIN_REPEATS


def test_good_parameters_plan_every_run_with_jeons_split(plantvillage_dir: Path) -> None:
    # Execute
    plan = jeon.prepare(data_dir=str(plantvillage_dir), image_size=64, weights=None)
    # Assert: Jeon's 27/27/36/53/14, one run per mode and repeat, every key distinct
    assert [s.n_layers for s in plan.cut.stages] == [27, 27, 36, 53, 14]
    streams = [r for r in plan.runs if r[0] == "stream"]
    assert len(streams) == 3 * plan.params.repeats and streams[:3] == [("stream", m, 0) for m in jeon.MODES]
    keys = {json.dumps(plan.run_params(r), sort_keys=True) for r in plan.runs}
    assert len(keys) == len(plan.runs)
    assert plan.weights is None and RANDOM_BASE in plan.weights_source
    # The ensemble's streams depend on the members' training, the others on the ten-class model's
    assert set(plan.run_params(("stream", "ensemble", 0))["training"]) == {f"member-{k}" for k in range(5)}
    assert set(plan.run_params(("stream", "pipeline", 0))["training"]) == {"kcs"}


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"split": ["block_2_depthwise"]}, "cuts"),  # inside a residual block
        ({"split": "balanced"}, "split"),
        ({"split": "macs", "n_stages": 500}, "n_stages"),  # more stages than cut points
        ({"micro_batch": 0}, "micro_batch"),
        ({"image_size": 16}, "image_size"),
        ({"augment_per_class": 10}, "augment_per_class"),
        ({"fault_stage": 9}, "fault_stage"),
        ({"stages": 5}, "stages"),  # not a parameter
    ],
)
def test_bad_parameters_fail_before_any_cluster_work(plantvillage_dir: Path, kwargs: dict, parameter: str) -> None:
    with pytest.raises(ConfigError) as info:
        jeon.prepare(**{"data_dir": str(plantvillage_dir), "image_size": 64, "weights": None, **kwargs})
    assert info.value.parameter == parameter


def test_a_stage_that_does_not_fit_its_device_is_refused(plantvillage_dir: Path) -> None:
    with pytest.raises(DeviceMemoryError, match="micro_batch=512"):
        jeon.prepare(data_dir=str(plantvillage_dir), weights=None, micro_batch=512, device_memory_mb=400)


def test_ensemble_targets_are_one_hot_over_the_members_pair() -> None:
    cfg = TransferConfig(classes=(2, 3), image_size=96, output="sigmoid")
    out = targets(np.array([2, 3, 5]), cfg)
    np.testing.assert_array_equal(out, [[1, 0], [0, 1], [0, 0]])


def test_imagenet_weights_are_taken_from_the_data_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare: Keras' file name in a data directory, and no network allowed
    monkeypatch.setenv("EDGELAB_OFFLINE", "1")
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras"))
    name = "mobilenet_v2_weights_tf_dim_ordering_tf_kernels_1.0_96_no_top.h5"
    (tmp_path / "mobilenet_v2").mkdir()
    (tmp_path / "mobilenet_v2" / name).write_bytes(b"h5")
    # Execute / Assert: found there at 96 px; at 128 px nothing is found and the model trains on a random base
    assert imagenet_weights(96, data_dir=tmp_path)[0] == str(tmp_path / "mobilenet_v2" / name)
    weights, source = imagenet_weights(128, data_dir=tmp_path)
    assert weights is None and RANDOM_BASE in source


def test_every_item_states_how_the_run_is_smaller_than_the_papers(plantvillage_dir: Path) -> None:
    # Prepare: the smoke profile's size at 64 px, and the full profile (the same sample, paper-sized settings)
    smoke = jeon.prepare(data_dir=str(plantvillage_dir), image_size=64, weights=None)
    full = jeon.prepare(data_dir=str(plantvillage_dir), weights=None, **_full_profile())

    # Execute
    small, large = reductions(smoke), reductions(full)

    # Assert: the smoke run names every way it is smaller; the full profile keeps only what it reduces
    assert "1,600 of the paper's 16,023 images" in small["jeon/table1"]
    assert f"1 run(s) per mode, not {MIN_REPEATS}" in small["jeon/table1"]
    assert "64 px input" in small["jeon/eq-layer-split"]
    assert "1,600 of the paper's 16,023 images" in large["jeon/table1"]
    assert "run(s) per mode" not in large["jeon/table1"] and not large["jeon/eq-layer-split"]
    assert f"{full.params.augment_per_class:,} of 10,000 images per class" in large["jeon/fig8"]
    assert "frozen epochs" not in large["jeon/fig9"] and "no fine-tuning" not in large["jeon/fig9"]


def test_the_full_profile_repeats_the_measured_streams_at_the_papers_structure(plantvillage_dir: Path) -> None:
    # Execute
    plan = jeon.prepare(data_dir=str(plantvillage_dir), weights=None, **_full_profile())

    # Assert: three runs of each mode (the policy's repeats), the paper's 224 px, 5 frozen + 1 fine-tuning epochs
    p = plan.params
    assert p.repeats >= MIN_REPEATS
    assert [r for r in plan.runs if r[0] == "stream"][-3:] == [("stream", m, p.repeats - 1) for m in jeon.MODES]
    assert (p.image_size, p.phase1_epochs, p.phase2_epochs) == (224, 5, 1)
    assert [s.n_layers for s in plan.cut.stages] == [27, 27, 36, 53, 14]


def _full_profile() -> dict:
    return {k: v for k, v in jeon.FULL_PROFILE.items() if k != "profile"}
