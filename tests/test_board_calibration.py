"""``edgelab calibrate``: a board of one's own, measured here, written as a profile every ``device_profile`` takes."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import numpy as np
import pytest

import edgelab
from edgelab import cli
from edgelab.common.errors import ConfigError
from edgelab.emulation import device_model
from edgelab.emulation.profiles import PROFILES, get_profile, load_board, save_board, sustained_gflops
from edgelab.models.costs import training_flops_per_sample
from edgelab.runtime import board_calibration as bc


def _cells(step_s: float, flops_per_s: float, *, param_s: float = 0.0, dense_flops_per_s: float | None = None) -> dict:
    model = device_model.DeviceModel(
        "board_t", step_s, flops_per_s, param_s=param_s, dense_flops_per_s=dense_flops_per_s
    )
    cells = [
        {"model": name, "batch_size": batch, "step_s": float(model.compute_s(name, 1, batch))}
        for name, batch in bc.CELLS
    ]
    return {"cells": cells}


def test_the_fit_recovers_the_terms_the_cells_were_made_from() -> None:
    terms = bc.fit_terms(_cells(0.004, 3.5e9, param_s=2e-8, dense_flops_per_s=6e9))
    assert terms["step_s"] == pytest.approx(0.004, rel=1e-6)
    assert terms["param_s"] == pytest.approx(2e-8, rel=1e-6)
    assert terms["flops_per_s"] == pytest.approx(3.5e9, rel=1e-6)
    assert terms["dense_flops_per_s"] == pytest.approx(6e9, rel=1e-6)
    assert terms["relative_rms_residual"] == pytest.approx(0.0, abs=1e-9)


def test_the_fitted_terms_predict_each_timed_cell() -> None:
    # Cells with a 5% wobble: the four terms give them back within it, where one rate for both classes cannot.
    steps = _cells(0.001, 2e9, param_s=1e-8, dense_flops_per_s=8e9)
    for i, cell in enumerate(steps["cells"]):
        cell["step_s"] *= 1.05 if i % 2 else 0.95
    terms = bc.fit_terms(steps)
    model = device_model.DeviceModel(
        "board_t",
        terms["step_s"],
        terms["flops_per_s"],
        param_s=terms["param_s"],
        dense_flops_per_s=terms["dense_flops_per_s"],
    )
    for cell in steps["cells"]:
        predicted = float(model.compute_s(cell["model"], 1, cell["batch_size"]))
        assert predicted == pytest.approx(cell["step_s"], rel=0.08)


def test_cells_that_cannot_tell_the_rates_apart_get_one_rate_not_an_infinite_one() -> None:
    # The MLP's steps take no longer for a larger batch: NNLS puts zero seconds on a dense FLOP.
    steps = _cells(0.002, 2e9)
    for cell in steps["cells"]:
        if cell["model"] == "mlp":
            cell["step_s"] = 0.002
    terms = bc.fit_terms(steps)
    assert terms["terms"] == ["step_s", "param_s", "s_per_flop"]
    assert terms["dense_flops_per_s"] is None
    assert 0 < terms["flops_per_s"] < 1e12 and terms["step_s"] >= 0 and terms["param_s"] >= 0


def test_a_step_cost_the_cells_cannot_show_is_zero_not_negative() -> None:
    # Cells that follow one FLOP rate with no per-step cost, one of them slower than the rest.
    steps = _cells(0.0, 2e9)
    steps["cells"][0]["step_s"] *= 0.8
    terms = bc.fit_terms(steps)
    assert terms["step_s"] >= 0 and terms["param_s"] >= 0 and terms["flops_per_s"] > 0
    assert terms["relative_rms_residual"] > 0


def test_cgroup_v2_quota_and_limit_are_read(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("20000 100000\n")
    (tmp_path / "memory.max").write_text(str(512 * 2**20) + "\n")
    assert bc._cgroup_cpu_quota(str(tmp_path)) == pytest.approx(0.2)
    assert bc._cgroup_memory_limit_mb(str(tmp_path)) == pytest.approx(512)
    (tmp_path / "cpu.max").write_text("max 100000\n")
    (tmp_path / "memory.max").write_text("max\n")
    assert bc._cgroup_cpu_quota(str(tmp_path)) is None
    assert bc._cgroup_memory_limit_mb(str(tmp_path)) is None


def test_cgroup_v1_quota_and_limit_are_read(tmp_path: Path) -> None:
    cpu, memory = tmp_path / "cpu", tmp_path / "memory"
    cpu.mkdir()
    memory.mkdir()
    (cpu / "cpu.cfs_quota_us").write_text("50000\n")
    (cpu / "cpu.cfs_period_us").write_text("100000\n")
    (memory / "memory.limit_in_bytes").write_text(str(300 * 2**20))
    assert bc._cgroup_cpu_quota(str(tmp_path)) == pytest.approx(0.5)
    assert bc._cgroup_memory_limit_mb(str(tmp_path)) == pytest.approx(300)
    (cpu / "cpu.cfs_quota_us").write_text("-1\n")
    (memory / "memory.limit_in_bytes").write_text(str(2**63 - 4096))
    assert bc._cgroup_cpu_quota(str(tmp_path)) is None
    assert bc._cgroup_memory_limit_mb(str(tmp_path)) is None


@pytest.mark.parametrize("name", ["pi3b", "native", "My Board", "9lives", "", "a" * 33])
def test_a_board_name_that_is_taken_or_unusable_is_refused(name: str) -> None:
    with pytest.raises(ConfigError, match="name"):
        bc.write_board(name, "/tmp/never-written.json")


def test_the_profile_file_must_end_in_json(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="out"):
        bc.write_board("board_a", tmp_path / "board_a.yaml")


def _board(name: str) -> edgelab.emulation.profiles.DeviceProfile:
    from dataclasses import replace

    return replace(PROFILES["pi4b"], name=name, step_s=0.002, flops_per_s=4e9, measured_on="a test, today")


def test_a_saved_board_loads_by_its_path_with_its_measured_device_model(tmp_path: Path) -> None:
    path = save_board(_board("board_b"), tmp_path / "board_b.json", {"cells": []})
    try:
        profile = get_profile(str(path))
        assert profile == _board("board_b")
        assert get_profile("board_b") is profile  # registered under its name once loaded
        model = device_model.for_profile("board_b")
        assert (model.step_s, model.flops_per_s) == (0.002, 4e9)
        assert "measured on the board: a test, today" in model.describe()
        assert "measured_on" in model.to_dict()
    finally:
        PROFILES.pop("board_b", None)


def test_a_paper_fitted_model_keeps_the_dict_its_stored_runs_were_keyed_by() -> None:
    assert set(device_model.for_profile("pi3b").to_dict()) == {"profile", "step_s", "flops_per_s", "fitted_on"}


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda doc: doc.update(format="something else"), "format"),
        (lambda doc: doc["profile"].pop("cores"), "missing"),
        (lambda doc: doc["profile"].update(turbo=True), "unknown"),
        (lambda doc: doc["profile"].update(step_s=None), "measured"),
        (lambda doc: doc["profile"].update(name="pi3b"), "built-in"),
    ],
)
def test_a_board_file_that_is_not_one_is_refused_naming_device_profile(tmp_path: Path, change, says: str) -> None:
    path = save_board(_board("board_c"), tmp_path / "board_c.json", {})
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match=says) as error:
        load_board(path)
    assert error.value.parameter in ("device_profile", "name")
    assert "board_c" not in PROFILES


def test_a_missing_board_file_is_refused_naming_device_profile(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="device_profile"):
        get_profile(str(tmp_path / "nowhere.json"))


def test_calibrate_measures_this_host_and_its_profile_trains_on_a_cluster(tmp_path: Path) -> None:
    path = tmp_path / "thishost.json"
    try:
        code = cli.main(["calibrate", "thishost", "--out", str(path), "--seconds", "0.3", "--repeats", "2"])
        assert code == 0
        doc = json.loads(path.read_text())
        cells = doc["measurements"]["cells"]
        for cell in cells:  # two repeats each, their spread beside the median
            fast, slow = cell["all"]
            assert fast <= slow and cell["spread"] == pytest.approx((slow - fast) / cell["step_s"])
        assert doc["measurements"]["largest_spread"] == max(cell["spread"] for cell in cells)
        machine = doc["measurements"]["machine"]  # the machine's CPU while the steps were timed: busy, some stolen
        assert machine["busy_cores"] > 0 and 0.0 <= machine["steal_share"] <= machine["stolen_of_wanted"] < 1.0
        profile = get_profile(str(path))
        assert profile.step_s is not None and profile.step_s >= 0 and profile.flops_per_s > 0
        assert profile.cores >= 1 and profile.memory_mb > profile.framework_mb > 0
        assert [(c["model"], c["batch_size"]) for c in doc["measurements"]["cells"]] == list(bc.CELLS)
        assert doc["measurements"]["link"]["source"] == "given, not measured"

        rng = np.random.default_rng(0)
        images = rng.integers(0, 256, size=(256, 28, 28), dtype=np.uint8)
        data = edgelab.Dataset.from_arrays(images, rng.integers(0, 10, size=256), name="noise")
        config = edgelab.TrainConfig(model="mlp", n_devices=2, epochs=1, batch_size=64)
        with edgelab.connect(2, profile=str(path), dashboard_address="127.0.0.1:0") as cluster:
            run = edgelab.train(cluster, data, config, log=lambda line: None)
        result = run.result()
        assert result.board == "thishost"
        assert "measured on the board" in result.clock
        # Two devices, one shard of 128 each: two steps of 64 on the calibrated model, plus the exchange.
        model = device_model.for_profile("thishost")
        assert result.board_s > float(model.compute_s("mlp", 2, 128))
    finally:
        PROFILES.pop("thishost", None)


def test_a_calibration_run_on_a_worker_times_the_steps_in_the_worker_s_own_process() -> None:
    from distributed import Client, LocalCluster

    # Prepare: one worker process of its own, its TensorFlow with one thread per pool as a device worker's
    with (
        LocalCluster(
            n_workers=1, processes=True, threads_per_worker=1, dashboard_address="127.0.0.1:0", env=bc.WORKER_THREADS
        ) as local,
        Client(local) as client,
    ):
        (worker_pid,) = client.run(os.getpid).values()

        # Execute: the measurement as a task on that worker, timed where it runs
        task = client.submit(bc.calibrate_board, "onworker", seconds=0.2, repeats=1, in_process=True, pure=False)
        profile, measurements = task.result(timeout=300)

    # Assert: timed in the worker (not a child of it, not this process), with the worker's threads; a board
    timed_in = measurements["timed_in"]
    assert timed_in["pid"] == worker_pid != os.getpid()
    assert timed_in["process"] == "this one"
    assert timed_in["threads"] == bc.WORKER_THREADS
    assert profile.name == "onworker" and profile.flops_per_s > 0
    assert "the worker process it ran in" in profile.framework_note  # its memory is the worker's, not TensorFlow's
    assert [(c["model"], c["batch_size"]) for c in measurements["cells"]] == list(bc.CELLS)


@pytest.mark.parametrize(("steal", "warned"), [(0.2, True), (0.01, False)])
def test_calibrate_says_when_the_hypervisor_took_the_machine_s_cpu_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], steal: float, warned: bool
) -> None:
    # Prepare: the timing itself stood in for by a board file whose measurements record that much steal
    machine = {"busy_cores": 1.0, "steal_share": steal / 2, "stolen_of_wanted": steal}
    measurements = {"cells": [], "largest_spread": 0.0, "machine": machine}
    path = save_board(_board("board_s"), tmp_path / "board_s.json", measurements)
    monkeypatch.setattr(bc, "write_board", lambda name, out, **options: path)
    try:
        # Execute
        code = cli.main(["calibrate", "board_s", "--out", str(path)])
    finally:
        PROFILES.pop("board_s", None)

    # Assert: the profile is written either way; above 5% the user is told what the hour cost
    assert code == 0
    said = capsys.readouterr().err
    assert (f"the hypervisor kept {steal:.0%} of the CPU time this machine wanted" in said) is warned


def test_calibration_repeats_are_interleaved_so_a_slow_spell_hits_every_cell() -> None:
    calls: list[str] = []
    clock = iter([2.0, 1.0, 8.0, 4.0, 4.0, 1.0])  # seconds of each call, in the order the calls come

    def timer(name: str):
        def run(steps: int) -> float:
            calls.append(name)
            return next(clock)

        return run

    times = bc.interleaved([(timer("a"), 2), (timer("b"), 4)], repeats=3)
    assert calls == ["a", "b", "a", "b", "a", "b"]
    assert times == [[1.0, 2.0, 4.0], [0.25, 0.25, 1.0]]  # seconds per step, sorted


def test_a_round_of_several_local_epochs_pays_every_epoch_s_steps() -> None:
    import pandas as pd

    model = device_model.DeviceModel("board_d", step_s=0.01, flops_per_s=1e9)
    one = pd.DataFrame({"steps": [10, 10], "samples": [640, 1280]})
    two = one.assign(local_epochs=[1, 2])
    flops = training_flops_per_sample("mlp")
    assert model.records_compute_s(one, "mlp").tolist() == pytest.approx(
        [0.1 + 640 * flops / 1e9, 0.1 + 1280 * flops / 1e9]
    )
    assert model.records_compute_s(two, "mlp").tolist() == pytest.approx(
        [0.1 + 640 * flops / 1e9, 0.2 + 1280 * flops / 1e9]
    )


def test_a_board_file_from_before_the_later_terms_loads_with_them_at_their_defaults(tmp_path: Path) -> None:
    path = save_board(_board("board_e"), tmp_path / "board_e.json", {})
    doc = json.loads(path.read_text())
    for name in ("dense_flops_per_s", "param_s", "wire_s_per_byte"):
        del doc["profile"][name]
    path.write_text(json.dumps(doc))
    try:
        profile = load_board(path)
        assert (profile.dense_flops_per_s, profile.param_s, profile.wire_s_per_byte) == (None, 0.0, 0.0)
        assert set(device_model.for_profile("board_e").to_dict()) == {
            "profile",
            "step_s",
            "flops_per_s",
            "fitted_on",
            "measured_on",
        }
    finally:
        PROFILES.pop("board_e", None)


def test_a_measured_board_prices_steps_parameters_each_class_and_the_bytes_it_exchanges() -> None:
    import pandas as pd

    from edgelab.models.costs import parameter_count, training_flops_by_class

    model = device_model.DeviceModel(
        "board_f", step_s=0.001, flops_per_s=2e9, dense_flops_per_s=5e9, param_s=1e-8, wire_s_per_byte=1e-9
    )
    records = pd.DataFrame({"steps": [10], "samples": [640], "bytes_sent": [4e5], "bytes_received": [6e5]})
    split = training_flops_by_class("cnn")
    per_step = 0.001 + 1e-8 * parameter_count("cnn")
    per_sample = (split["conv"] + split["elementwise"]) / 2e9 + split["dense"] / 5e9
    expected = 10 * per_step + 640 * per_sample + 1e6 * 1e-9
    assert model.records_compute_s(records, "cnn").tolist() == pytest.approx([expected], rel=1e-12)
    # A first convolution keeps its three passes: MXNet 0.9.5 multiplies out the images' gradient too.
    assert split["conv"] == 6 * (24 * 24 * 20 * 25 + 8 * 8 * 50 * 500) and split["dense"] == 6 * (800 * 500 + 500 * 10)
    # Without the measured terms it is the two-term model, to the last bit (the paper-fitted boards' clock).
    plain = device_model.DeviceModel("board_f", step_s=0.001, flops_per_s=2e9)
    assert plain.compute_s("cnn", 10, 640) == 10 * 0.001 + 640 * training_flops_per_sample("cnn") / 2e9
    describe = model.describe()
    assert "dense 5.000" in describe and "per parameter" in describe and "per byte exchanged" in describe


@pytest.mark.parametrize("term", ["dense_flops_per_s", "param_s", "wire_s_per_byte"])
def test_a_negative_or_zero_term_is_refused_naming_it(term: str) -> None:
    with pytest.raises(ConfigError, match=term):
        device_model.DeviceModel("board_g", step_s=0.001, flops_per_s=1e9, **{term: -1.0})


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity here (not Linux)")
def test_the_gemm_rate_per_cpu_second_leaves_out_time_the_thread_did_not_run() -> None:
    # Prepare: this process on one CPU beside a thread that spins, so the products get about half of its time
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    spinner = threading.Thread(target=spin, daemon=True)
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    try:
        spinner.start()
        # Execute
        wall = sustained_gflops(seconds=0.3, repeats=1, size=256, clock="wall")
        cpu = sustained_gflops(seconds=0.3, repeats=1, size=256, clock="cpu")
    finally:
        stop.set()
        spinner.join()
        os.sched_setaffinity(0, cpus)

    # Assert: per wall second the products did about half the work they did per CPU second
    assert cpu > 1.3 * wall


def test_a_gemm_in_bursts_is_rated_per_cpu_second_its_sleep_left_out() -> None:
    # Execute: bursts of 5 ms with 50 ms asleep, a tenth of the window computing
    continuous = sustained_gflops(seconds=0.3, repeats=1, size=256, clock="cpu")
    bursty = sustained_gflops(seconds=0.3, repeats=1, size=256, clock="cpu", burst_s=0.005, idle_s=0.05)

    # Assert: per wall second it would be about a tenth of the continuous rate; per CPU second, near it
    assert bursty > 0.4 * continuous


@pytest.mark.parametrize(
    ("given", "parameter"),
    [
        ({"clock": "wall", "burst_s": 0.01}, "clock"),
        ({"clock": "cpu", "burst_s": 0.0}, "burst_s"),
        ({"clock": "cpu", "burst_s": 0.01, "idle_s": -1.0}, "idle_s"),
        ({"clock": "cpu", "idle_s": 0.05}, "idle_s"),
    ],
)
def test_bursts_the_gemm_cannot_keep_are_refused_naming_the_parameter(given: dict, parameter: str) -> None:
    with pytest.raises(ConfigError, match=parameter) as error:
        sustained_gflops(seconds=0.01, **given)
    assert error.value.parameter == parameter


def test_a_gemm_clock_that_is_neither_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match="clock") as error:
        sustained_gflops(seconds=0.01, clock="steal")
    assert error.value.parameter == "clock"
