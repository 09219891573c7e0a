"""The ResNet and Fig 3 experiments check their parameters and plan every run before any cluster work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgelab.common.errors import ConfigError
from edgelab.emulation.device_model import for_profile
from edgelab.papers.park2020 import resnet as park2020_resnet
from edgelab.papers.park2020 import sync_async as park2020_async


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"depths": [33]}, "depths"),
        ({"batch_sizes": [0]}, "batch_sizes"),
        ({"device_counts": []}, "device_counts"),
        ({"table4_epochs": -1}, "table4_epochs"),
        ({"dataset": "mnist"}, "dataset"),
        ({"device_memory_mb": 250}, "device_memory_mb"),
        ({"nope": 1}, "nope"),
    ],
)
def test_resnet_bad_input_names_the_parameter(kwargs: dict, parameter: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{parameter}="):
        park2020_resnet.prepare(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"strategies": ["ps_async", "gossip"]}, "strategies"),  # a strategy, but not one of the paper's
        ({"devices": 0}, "devices"),
        ({"eval_every": 0}, "eval_every"),
        ({"models": ["vgg16"]}, "models"),
        ({"models": ["cnn", "resnet33"]}, "models"),  # not 6n+2
        ({"models": []}, "models"),
        ({"models": [42]}, "model"),  # not a model at all: user_model names its own parameter
    ],
)
def test_async_bad_input_names_the_parameter(kwargs: dict, parameter: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{parameter}="):
        park2020_async.prepare(**kwargs)


def test_resnet_plan_estimates_memory_and_the_paper_rounds(cifar10_dir: Path) -> None:
    plan = park2020_resnet.prepare(data_dir=str(cifar10_dir), depths=[32, 110], batch_sizes=[32, 128])
    facts = park2020_resnet.deterministic_facts(plan)
    one = facts[(facts["model"] == "resnet32") & (facts["batch"] == 32) & (facts["devices"] == 1)].iloc[0]
    assert one["syncs_per_device_per_paper_epoch"] == 1563  # ceil(50,000 / 32)
    assert one["parameters"] == 466_906
    # The estimate says ResNet-110 at batch 128 cannot fit the Pi's 724 MB training budget; 32x32 fits.
    assert plan.memory_mb[(110, 128)]["total"] > plan.profile.training_budget_mb
    assert plan.memory_mb[(32, 32)]["total"] < plan.profile.training_budget_mb
    assert plan.device_model == for_profile("pi3b")


def test_async_plan_has_every_method_and_the_progress_runs(cifar10_dir: Path) -> None:
    plan = park2020_async.prepare(data_dir=str(cifar10_dir), devices=3, progress_devices=[1, 3])
    fig3a = {(r.model, r.strategy) for r in plan.runs if not r.progress}
    assert fig3a == {(m, s) for m in ("cnn", "resnet32") for s in ("ps_sync", "ps_async", "end_average")}
    progress = [(r.strategy, r.devices) for r in plan.runs if r.progress]
    assert progress == [("ps_async", 1), ("ps_async", 3), ("ps_sync", 3)]
    assert plan.config(plan.runs[2]).sync_every == "epoch"  # end_average: one average, at the end


def test_async_facts_count_the_updates_each_method_applies(cifar10_dir: Path) -> None:
    plan = park2020_async.prepare(data_dir=str(cifar10_dir), devices=3, progress_devices=[3], sample_limit=640)
    facts = park2020_async.deterministic_facts(plan).set_index(["model", "strategy", "devices", "progress_run"])
    # LeNet: every device walks all 640 images at batch 64 = 10 steps.
    assert facts.loc[("cnn", "ps_sync", 3, False), "updates"] == 10  # one mean per round
    assert facts.loc[("cnn", "ps_async", 3, False), "updates"] == 30  # every device's every step
    assert facts.loc[("cnn", "end_average", 3, False), "updates"] == 1  # one average, at the end
    # ResNet: shards, capped at resnet_max_steps (2).
    assert facts.loc[("resnet32", "ps_async", 3, False), "steps_per_device"] == 2
    assert facts.loc[("cnn", "ps_async", 3, True), "eval_every"] == plan.params.eval_every


def test_resnet_runs_most_devices_first(cifar10_dir: Path) -> None:
    plan = park2020_resnet.prepare(data_dir=str(cifar10_dir), depths=[32], batch_sizes=[32], device_counts=[1, 4, 2])
    assert [r.devices for r in plan.runs if r.epochs == 1] == [4, 2, 1]


def test_resnet_table4_runs_right_after_the_runs_of_its_model(cifar10_dir: Path) -> None:
    # The devices hold one model at a time: Table 4's ResNet-32 run, put after the deeper models, built it again.
    plan = park2020_resnet.prepare(
        data_dir=str(cifar10_dir), depths=[56, 32, 44], batch_sizes=[64, 32], device_counts=[1, 2], table4_devices=3
    )
    models = [(r.depth, r.batch_size, r.devices, r.epochs) for r in plan.runs]
    assert models[:8] == [(56, 64, 2, 1), (56, 64, 1, 1), (56, 32, 2, 1), (56, 32, 1, 1)] + [
        (32, 64, 2, 1),
        (32, 64, 1, 1),
        (32, 32, 2, 1),
        (32, 32, 1, 1),
    ]
    assert models[8] == (32, 32, 3, plan.params.table4_epochs)  # the smallest depth and batch, its model still held
    assert models[9:] == [(44, 64, 2, 1), (44, 64, 1, 1), (44, 32, 2, 1), (44, 32, 1, 1)]


def test_async_fixed_length_runs_with_a_fig3b_twin_share_its_training(cifar10_dir: Path) -> None:
    plan = park2020_async.prepare(data_dir=str(cifar10_dir), devices=3, progress_devices=[1, 3])
    by = {(r.model, r.strategy, r.devices, r.progress): r for r in plan.runs}
    # The same model, method and devices, evaluated along the way: one training, one results key
    for strategy in ("ps_sync", "ps_async"):
        fixed, twin = by[("cnn", strategy, 3, False)], by[("cnn", strategy, 3, True)]
        assert plan.twin(fixed) == twin and plan.run_params(fixed) == plan.run_params(twin)
    # Without a twin a run keeps its own key: section 2's end average, and every ResNet run
    assert plan.twin(by[("cnn", "end_average", 3, False)]) is None
    keys = {json.dumps(plan.run_params(r), sort_keys=True) for r in plan.runs}
    assert len(keys) == len(plan.runs) - 2
    # The facts read as they always did: a fixed-length run shows no evaluation interval
    facts = park2020_async.deterministic_facts(plan).set_index(["model", "strategy", "devices", "progress_run"])
    assert facts.loc[("cnn", "ps_async", 3, False), "eval_every"] == "-"
    assert "runs" not in facts


def test_async_repeats_give_every_whole_epoch_run_seeds_of_its_own(cifar10_dir: Path) -> None:
    plan = park2020_async.prepare(data_dir=str(cifar10_dir), devices=3, progress_devices=[1, 3], repeats=3)
    repeated = {(str(r.model), r.strategy, r.devices, r.progress) for r in plan.runs if r.repeat}
    # LeNet's three methods and Fig 3b's asynchronous curves; not ResNet (2 steps, accuracy not judged), not the
    # synchronous reference curve
    assert repeated == {("cnn", s, 3, False) for s in ("ps_sync", "ps_async", "end_average")} | {
        ("cnn", "ps_async", n, True) for n in (1, 3)
    }
    seeds = sorted(
        plan.config(r).seed for r in plan.runs if (r.strategy, r.devices, r.progress) == ("ps_async", 1, True)
    )
    assert seeds == [0, 1, 2]
    facts = park2020_async.deterministic_facts(plan).set_index(["model", "strategy", "devices", "progress_run"])
    assert (
        facts.loc[("cnn", "ps_async", 1, True), "runs"] == 3
        and facts.loc[("resnet32", "ps_sync", 3, False), "runs"] == 1
    )
    assert park2020_async.FULL_PROFILE["repeats"] >= 3


def test_resnet_memory_repeats_change_the_key_only_when_asked(cifar10_dir: Path) -> None:
    once = park2020_resnet.prepare(data_dir=str(cifar10_dir), depths=[32], device_counts=[1])
    thrice = park2020_resnet.prepare(data_dir=str(cifar10_dir), depths=[32], device_counts=[1], memory_repeats=3)
    assert "memory_repeats" not in once.run_params(once.runs[0])
    assert thrice.run_params(thrice.runs[0])["memory_repeats"] == 3
    assert park2020_resnet.FULL_PROFILE["memory_repeats"] >= 3
    with pytest.raises(ConfigError, match="^memory_repeats="):
        park2020_resnet.prepare(data_dir=str(cifar10_dir), memory_repeats=0)
