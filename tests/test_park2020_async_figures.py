"""park2020 fig1, fig2 (edgelab.papers.park2020.diagrams) and fig3a, fig3b (edgelab.papers.park2020.sync_async_figures).

Rendered from a synthetic ``AsyncSummary`` and a synthetic stored ResNet run of three devices: no cluster.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from edgelab.common.results import StoredRun
from edgelab.emulation.device_model import for_profile
from edgelab.emulation.profiles import get_profile
from edgelab.models.costs import parameter_count, weight_count
from edgelab.papers.park2020 import diagrams
from edgelab.papers.park2020 import sync_async_figures as fig3
from edgelab.papers.park2020.sync_async import AsyncSummary, measurements, run_facts
from edgelab.report.manifest import STATUSES
from edgelab.report.verdict import Verdict
from edgelab.training.config import TrainConfig

N = 3


def _row(
    model: str, strategy: str, seconds: float, accuracy: float, repeat: int = 0, **rest: object
) -> dict[str, object]:
    n_train = {"cnn": 60_000, "resnet32": 50_000}[model]
    row = {"model": model, "strategy": strategy, "devices": 10, "progress_run": False, "elapsed_s": seconds * 1.1}
    row |= {"mean_device_s": seconds, "scale": 1.0, "accuracy": accuracy, "updates": 100}
    row |= {"staleness_mean": 0.0 if strategy == "ps_sync" else 4.5, "staleness_max": 0 if strategy == "ps_sync" else 9}
    row |= {"repeat": repeat, "seed": repeat, "dataset": "mnist" if model == "cnn" else "cifar10"}
    row |= {"worker_data": "full" if model == "cnn" else "shard", "loss": 0.4, "collapsed": False}
    return row | {"n_train": n_train} | rest


def _runs(cnn_async_s: float = 1600.0, seeds: int = 3, **rest: object) -> pd.DataFrame:
    """Paper-sized runs where async LeNet is faster and less accurate (9x), ResNet 2500 s both and 2x.

    Each method runs ``seeds`` times, its accuracy a little different each time (its time is the same).
    """
    methods = [
        ("cnn", "ps_sync", 2600.0, 0.99),
        ("cnn", "ps_async", cnn_async_s, 0.11),
        ("cnn", "end_average", 300.0, 0.97),
        ("resnet32", "ps_sync", 2500.0, 0.40),
        ("resnet32", "ps_async", 2450.0, 0.20),
        ("resnet32", "end_average", 2400.0, 0.30),
    ]
    jitter = (0.0, 0.001, -0.001)
    return pd.DataFrame(
        [_row(m, s, t, a + jitter[r % 3], repeat=r, **rest) for r in range(seeds) for m, s, t, a in methods]
    )


def _progress(five_learns: bool = False, seeds: int = 1) -> pd.DataFrame:
    rows = []
    curves = {("ps_async", 1): 0.9, ("ps_async", 3): 0.6, ("ps_sync", 3): 0.8}
    if five_learns:
        curves[("ps_async", 5)] = 0.5
    for repeat in range(seeds):
        for (strategy, n), top in curves.items():
            for k, updates in enumerate((10, 20, 30)):
                per = 64 * (n if strategy == "ps_sync" else 1)
                accuracy = top * (k + 1) / 3
                rows.append({"updates": updates, "samples_seen": updates * per, "accuracy": accuracy, "loss": 1.0})
                rows[-1] |= {"model": "cnn", "strategy": strategy, "devices": n, "repeat": repeat}
    return pd.DataFrame(rows)


def _summary(runs: pd.DataFrame, progress: pd.DataFrame | None = None) -> AsyncSummary:
    progress_runs = pd.DataFrame([_row("cnn", "ps_async", 500.0, 0.6, devices=3, progress_run=True)])
    return AsyncSummary(
        runs=pd.concat([runs, progress_runs], ignore_index=True),
        progress=_progress() if progress is None else progress,
        device_model=for_profile("pi3b"),
        datasets={"mnist": {"name": "mnist", "n_train": 60_000}, "cifar10": {"name": "cifar10", "n_train": 50_000}},
        profile=get_profile("pi3b"),
        eval_every=10,
        eval_limit=500,
    )


def _stored(n_devices: int = N, key: str = "run3") -> StoredRun:
    cfg = TrainConfig(model="resnet32", n_devices=n_devices, batch_size=32, max_steps=2)
    weights = weight_count("resnet32") * 4
    records = pd.DataFrame(
        [
            {"device": f"pi3b-{i}", "device_index": i, "round": r, "epoch": 0, "first_step": r, "steps": 1}
            | {"samples": 32, "bytes_sent": weights, "bytes_received": weights}
            for r in range(2)
            for i in range(n_devices)
        ]
    )
    monitor = pd.DataFrame([{"device": f"pi3b-{i}", "t": t, "cpu_s": 0.1} for i in range(n_devices) for t in (0, 1)])
    params = {"experiment": "park2020_resnet", "train": cfg.to_dict(), "monitor_interval_s": 0.25}
    params |= {"dataset": {"name": "cifar10", "n_train": 512, "n_test": 200}, "device_profile": "pi3b"}
    summary = {
        "cluster": {"workers": n_devices, "memory_limit": "2GiB", "threads_per_worker": 1},
        "calibration": {"speed_factor": 12.5, "host_gflops": 25.0},
        "dataset": {"name": "cifar10", "n_train": 512},
        "profile": asdict(get_profile("pi3b")),
        "device_model": for_profile("pi3b").to_dict(),
        "weights_sha256": "ab" * 32,
        "outcome": "trained",
    }
    return StoredRun(key, params, summary, {"records": records, "evaluations": pd.DataFrame(), "monitor": monitor})


def _check(verdict: Verdict | dict[str, Any], prefix: str) -> list[bool | None]:
    """What the checks whose name starts with ``prefix`` gave (True, False, None: not judged)."""
    checks = (verdict if isinstance(verdict, dict) else verdict.to_dict())["checks"]
    return [c["passed"] for c in checks if c["name"].startswith(prefix)]


def _kinds(verdict: Verdict, prefix: str) -> list[str]:
    """The evidence basis of the checks whose name starts with ``prefix``."""
    return [c.basis.name for c in verdict.checks if c.name.startswith(prefix)]


def test_all_four_items_rendered(tmp_path: Path) -> None:
    items = fig3.render_fig3(_summary(_runs()), root=tmp_path, notebook="nb", parameters={"profile": "smoke"})
    run = _stored()
    items += [diagrams.render_fig1(run, root=tmp_path), diagrams.render_fig2(run, root=tmp_path)]
    assert sorted(i.id for i in items) == [f"park2020/fig{x}" for x in ("1", "2", "3a", "3b")]
    for item in items:
        assert item.status in STATUSES
        assert {Path(f).suffix for f in item.files} == {".png", ".csv", ".md"}
        assert all(Path(f).is_file() and Path(f).is_relative_to(tmp_path) for f in item.files)
    assert items[0].notebook == "nb" and items[0].parameters == {"profile": "smoke"}


def test_fig1_one_row_per_device_with_the_parameter_count(tmp_path: Path) -> None:
    item = diagrams.render_fig1(_stored(), root=tmp_path)
    table = pd.read_csv(tmp_path / "park2020" / "fig1.csv")
    devices = table[table["panel"] == "a data parallel"]
    assert len(devices) == N
    assert (devices["parameters"] == parameter_count("resnet32")).all()
    assert devices["shard_samples"].sum() == 512 and (devices["trained_per_epoch"] == 64).all()
    stages = table[table["panel"] != "a data parallel"]
    assert len(stages) == N and stages["parameters"].sum() == parameter_count("resnet32")
    # A diagram predicts nothing: its checks are what the run configured and built, so it is consistent at best.
    assert item.status == "consistent" and item.verdict.evidence == []
    assert all(c.passed and c.kind == "structural" for c in item.verdict.checks)


def test_fig2_nodes_are_devices_plus_master_plus_monitor(tmp_path: Path) -> None:
    item = diagrams.render_fig2(_stored(), root=tmp_path)
    nodes = pd.read_csv(tmp_path / "park2020" / "fig2.csv")
    assert len(nodes) == N + 2
    assert list(nodes["role"]) == ["master", *["worker"] * N, "monitor"]
    assert _check(item.verdict, "nodes") == [True] and _check(item.verdict, "link rate") == [True]
    # Three devices of the paper's ten, sampled every 0.25 s: those two are not judged; the rest is consistent
    assert _check(item.verdict, "boards") == [None] and _check(item.verdict, "monitor period") == [None]
    assert item.status == "consistent"
    # The master is device 0: its own exchange stays on the board, its link carries the others'.
    master = nodes.iloc[0]
    assert master["link_sent_bytes"] == 2 * (N - 1) * weight_count("resnet32") * 4


def test_pick_run_takes_the_most_devices() -> None:
    assert diagrams.pick_run([_stored(2, "two"), _stored(3, "three")]).key == "three"


def test_balanced_cuts_split_by_cost() -> None:
    assert diagrams.balanced_cuts([5, 1, 1, 1, 1, 1], [0, 1, 2, 3, 4], 2) == [0]


def test_c13_holds_when_async_is_faster_and_less_accurate_at_paper_size() -> None:
    verdict = fig3.judge_fig3a(_runs(), "ps_async")
    assert _check(verdict, "C13") == [True, True]
    assert verdict.status == "reproduced"
    # Times are the device model's (deterministic); accuracies are trained, on three seeds
    assert _kinds(verdict, "C13") == ["MODELLED", "TRAINED"]
    assert next(c for c in verdict.checks if c.name == "C15 LeNet accuracy ratio").runs == 3
    # Section 2's end average is faster but barely less accurate on LeNet: it does not match the paper.
    assert fig3.judge_fig3a(_runs(), "end_average").status == "differs"


def test_one_seed_leaves_the_accuracies_noisy() -> None:
    # Execute: the same runs, once each
    verdict = fig3.judge_fig3a(_runs(seeds=1), "ps_async")

    # Assert: the times are judged, the accuracies say what one run shows and wait for three
    assert _check(verdict, "C13 time") == [True] and _check(verdict, "C13 accuracy") == [None]
    accuracy = next(c for c in verdict.checks if c.name == "C13 accuracy")
    assert accuracy.undecided == "noisy" and "would hold on 1 run(s)" in accuracy.note
    assert (verdict.status, verdict.reason_class) == ("not judged", "noisy")


def test_c13_fails_when_async_is_slower(tmp_path: Path) -> None:
    items = fig3.render_fig3(_summary(_runs(cnn_async_s=3000.0)), root=tmp_path)
    fig3a = next(i for i in items if i.id == "park2020/fig3a")
    assert _check(fig3a.verdict, "C13 time") == [False]
    assert fig3a.status == "differs"


def test_accuracy_not_judged_below_paper_size() -> None:
    verdict = fig3.judge_fig3a(_runs(n_train=1_920), "ps_async")
    assert _check(verdict, "C13 accuracy") == [None]
    assert _check(verdict, "C15") == [None] and _check(verdict, "C17") == [None]
    assert _check(verdict, "C13 time") == [True]


def test_levels_not_judged_off_the_papers_device_count() -> None:
    verdict = fig3.judge_fig3a(_runs(devices=3), "ps_async")
    assert _check(verdict, "C14") == [None] and _check(verdict, "C16") == [None, None]


def test_fig3b_bounds() -> None:
    smoke = fig3.judge_fig3b(_progress())
    assert _check(smoke, "C19") == [None]  # N=5 and 10 not run
    learns = fig3.judge_fig3b(_progress(five_learns=True, seeds=3))
    assert _check(learns, "C19") == [False]
    # One seed: what it shows is said, and not judged
    once = fig3.judge_fig3b(_progress(five_learns=True))
    assert _check(once, "C19") == [None] and once.checks[1].undecided == "noisy"


@pytest.mark.parametrize("method", ["ps_async", "end_average"])
def test_ratios_and_targets_in_the_csv(tmp_path: Path, method: str) -> None:
    fig3.render_fig3(_summary(_runs()), root=tmp_path)
    table = pd.read_csv(tmp_path / "park2020" / "fig3a.csv")
    measured = table[(table["series"] == "measured") & (table["strategy"] == method)]
    assert "sync_minus_async_s" in set(measured["metric"])
    assert (table["series"] == "paper (derived)").any()
    assert "Staleness per update" in (tmp_path / "park2020" / "fig3a.md").read_text()


def test_run_facts_check_a_collapsed_models_accuracy_as_collapsed_and_show_its_number_unchecked() -> None:
    # Prepare: the asynchronous LeNet answers one class (its share of the tests decided by the last bits)
    runs = pd.DataFrame(
        [
            _row("cnn", "ps_sync", 2600.0, 0.874, loss=0.376),
            _row("cnn", "ps_async", 1600.0, 0.092, loss=183.7, collapsed=True),
        ]
    )

    # Execute
    facts = run_facts(_summary(runs)).splitlines()
    shown = measurements(_summary(runs))[0]

    # Assert: the checked table names the collapse, keeps the other accuracies; the unchecked one has the numbers
    assert facts[0].split()[-1] == "accuracy"
    assert [line.split()[-1] for line in facts[1:]] == ["0.874", "collapsed", "0.600"]
    assert shown["accuracy"].tolist() == [0.874, 0.092, 0.6]
    assert shown["loss"].tolist() == [0.376, 183.7, 0.4]
