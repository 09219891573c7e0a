"""The limited-hosts benchmark's arithmetic: measured rounds against the emulated clock of the same records."""

from __future__ import annotations

import dataclasses
import os
import statistics
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from edgelab.emulation.profiles import PROFILES, DeviceProfile
from edgelab.models.costs import training_flops_per_sample

BENCHMARK = "bench_limited_hosts"  # the module conftest's ``benchmark`` fixture imports


@pytest.fixture(scope="module")
def bench(benchmark):  # type: ignore[no-untyped-def]
    return benchmark


@pytest.fixture
def board(monkeypatch: pytest.MonkeyPatch) -> DeviceProfile:
    """A board of 1 ms a step and 1 GFLOP/s behind a 1 MB/s link with no latency, registered as calibrate does."""
    profile = DeviceProfile(
        name="benchboard",
        cores=1,
        clock_ghz=None,
        memory_mb=1024,
        os_reserve_mb=0,
        link_mbps=8.0,
        latency_s=0.0,
        reference_gflops=1.0,
        reference_note="test",
        framework_mb=600,
        framework_note="test",
        step_s=0.001,
        flops_per_s=1e9,
        measured_on="test",
    )
    monkeypatch.setitem(PROFILES, profile.name, profile)
    return profile


def _run(records: pd.DataFrame):  # type: ignore[no-untyped-def]
    from edgelab.training.data_parallel import TrainConfig, TrainRun

    cfg = TrainConfig(model="mlp", n_devices=2)
    return TrainRun(cfg, records, pd.DataFrame(), pd.DataFrame(), pd.DataFrame())


def test_the_emulated_round_is_the_slower_devices_pull_compute_and_push_each_over_its_own_link(
    bench, board: DeviceProfile
) -> None:  # type: ignore[no-untyped-def]
    # Prepare: two rounds of two devices, 100 steps of 64 samples each; device 1 pulls 2 MB and pushes 1 MB
    flops = training_flops_per_sample("mlp")
    records = pd.DataFrame(
        {
            "round": [0, 0, 1, 1],
            "epoch": [0, 0, 1, 1],
            "device": ["b-0", "b-1", "b-0", "b-1"],
            "device_index": [0, 1, 0, 1],
            "steps": [100] * 4,
            "samples": [6400] * 4,
            "cpu_s": [1.0] * 4,
            "wall_s": [2.0, 2.5, 1.5, 2.5],
            "bytes_received": [1_000_000, 2_000_000, 1_000_000, 2_000_000],
            "bytes_sent": [1_000_000] * 4,
            "round_wall_s": [4.0, 4.0, 6.0, 6.0],
            "server_s": [0.01, 0.01, 0.03, 0.03],
        }
    )

    # Execute
    out = bench.compare(_run(records), board, cell_step_s=0.002, pace=1.5, spread=1.1)

    # Assert: compute 100 x 1 ms + 6400 x FLOPs / 1 GFLOP/s; device 1 adds 2 s + 1 s of link, device 0 only 2 s
    compute = 0.1 + 6400 * flops / 1e9
    assert out["emulated_s"] == pytest.approx(compute + 3.0)
    assert out["model_compute_s"] == pytest.approx(compute)
    assert out["emulated_comm_s"] == pytest.approx(3.0)
    assert out["measured_s"] == pytest.approx(5.0)  # the mean of the rounds' walls
    assert out["device_compute_s"] == pytest.approx(2.5)  # the slower device
    assert out["device_cpu_ms_per_step"] == pytest.approx(10.0)  # 1 s of task CPU over 100 steps
    assert out["measured_rest_s"] == pytest.approx(2.5)
    # each device's walls round by round and its CPU per step: the straggler named
    assert out["device_walls_s"] == {"b-0": [2.0, 1.5], "b-1": [2.5, 2.5]}
    assert out["device_cpu_ms_per_step_each"] == {"b-0": pytest.approx(10.0), "b-1": pytest.approx(10.0)}
    assert out["server_s"] == pytest.approx(0.02)
    assert out["error"] == pytest.approx((compute + 3.0) / 5.0 - 1)
    # the diagnostic clock: each step as the board's own timed cell, 2 ms
    assert out["emulated_cell_s"] == pytest.approx(0.2 + 3.0)
    assert out["mb_per_device_round"] == pytest.approx(2.5)
    # the paced clock: the board 1.5 x slower at the run than at its calibration slows its compute, not its link
    assert out["emulated_paced_s"] == pytest.approx(1.5 * compute + 3.0)
    assert out["error_paced"] == pytest.approx((1.5 * compute + 3.0) / 5.0 - 1)
    # the clock that waits for the slowest device: the calibration's spread slows its compute, not its link
    assert out["spread_at_board"] == 1.1
    assert out["emulated_spread_s"] == pytest.approx(1.1 * compute + 3.0)
    assert out["error_spread"] == pytest.approx((1.1 * compute + 3.0) / 5.0 - 1)


def test_the_devices_spread_names_the_straggler_and_the_device_that_spent_most_cpu_a_step(bench) -> None:  # type: ignore[no-untyped-def]
    # Prepare: two repeats of two devices, b-1 slower every round; b-1 spends more CPU a step in one repeat, b-0 in
    # the other; a pipeline row and a row from before the walls were kept are left out
    def row(walls: dict, cpu: dict) -> dict:
        return {"devices": 2, "cores": 0.2, "model": "mlp", "device_walls_s": walls, "device_cpu_ms_per_step_each": cpu}

    rows = [
        row({"b-0": [2.0, 1.5], "b-1": [2.5, 2.5]}, {"b-0": 1.0, "b-1": 1.2}),
        row({"b-0": [2.0, 2.0], "b-1": [2.0, 3.0]}, {"b-0": 1.1, "b-1": 0.9}),
        {"devices": 2, "cores": 0.2, "model": "pipeline"},
        {"devices": 2, "cores": 0.2, "model": "cnn"},
    ]

    # Execute
    (spread,) = bench.device_spread(rows)

    # Assert: per round, slowest over mean: 2.5/2.25, 2.5/2.0, 2.0/2.0, 3.0/2.5
    ratios = sorted([2.5 / 2.25, 2.5 / 2.0, 1.0, 3.0 / 2.5])
    assert spread["model"] == "mlp" and spread["repeats"] == 2
    assert spread["slowest_over_mean"] == pytest.approx((ratios[1] + ratios[2]) / 2)
    assert spread["slowest_over_mean_max"] == pytest.approx(1.25)
    assert (spread["cpu_ms_min"], spread["cpu_ms_max"]) == (0.9, 1.2)
    assert spread["most_cpu_repeats"] == 1 and spread["most_cpu_device"] in ("b-0", "b-1")


def test_the_page_sets_the_clock_that_waits_for_the_slowest_beside_the_calibrations_and_the_rounds_spread(
    bench,
) -> None:  # type: ignore[no-untyped-def]
    # Prepare: two repeats of two devices with the spread clock's columns, and a pipeline row, which has none
    def row(walls: dict, at_board: float, beside: float, error: float, waited: float) -> dict:
        return {
            "devices": 2,
            "cores": 0.2,
            "model": "mlp",
            "device_walls_s": walls,
            "device_cpu_ms_per_step_each": {"b-0": 1.0, "b-1": 1.0},
            "spread_at_board": at_board,
            "spread_beside_run": beside,
            "error": error,
            "error_spread": waited,
        }

    rows = [
        row({"b-0": [2.0, 2.0], "b-1": [3.0, 2.0]}, 1.02, 1.10, -0.10, -0.08),
        row({"b-0": [2.0, 2.0], "b-1": [2.0, 2.0]}, 1.04, 1.20, -0.20, -0.16),
        {"devices": 2, "cores": 0.2, "model": "pipeline"},
    ]

    # Execute
    lines = bench._device_lines(rows)

    # Assert: medians of the two repeats; the rounds' own ratios (1.2, 1, 1, 1) have median 1; the pipeline no row
    assert "| 2 | 0.2 | mlp | 1.030 | 1.150 | 1.000 | -15.0% | -12.0% | -16.0% .. -8.0% | no |" in lines
    assert not any(line.startswith("| 2 | 0.2 | pipeline") for line in lines)
    # rows of runs from before the spread clock (no such columns, or none filled) give no such table
    earlier = [{k: v for k, v in r.items() if not k.startswith(("spread", "error_spread"))} for r in rows]
    assert not any("with the wait" in line for line in bench._device_lines(earlier))
    assert not any("with the wait" in line for line in bench._device_lines([{**r, "error_spread": None} for r in rows]))


def test_a_runs_pace_is_its_probes_mean_over_the_calibrations_and_a_bad_probe_is_refused(bench) -> None:  # type: ignore[no-untyped-def]
    assert bench.paced(0.011, 0.013, 0.010) == pytest.approx(1.2)
    assert bench.paced(0.005, 0.005, 0.010) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="positive seconds per step"):
        bench.paced(0.0, 0.013, 0.010)


def test_the_pace_beside_a_run_is_probed_on_each_of_its_hosts_at_once_and_the_slowest_kept(bench) -> None:  # type: ignore[no-untyped-def]
    # Prepare: a client that records where each probe goes (a stand-in for the cluster: what is tested is which
    # hosts are asked, all before any answer is waited for, and which answer is kept)
    asked: list[str] = []
    waited: list[int] = []

    class Task:
        def __init__(self, seconds: float) -> None:
            self.seconds = seconds

        def result(self, timeout: float) -> float:
            waited.append(len(asked))
            return self.seconds

    class Client:
        def submit(self, fn, model, steps, *, workers, allow_other_workers, pure):  # type: ignore[no-untyped-def]
            assert fn is bench.step_pace and steps == bench.PACE_STEPS[model]
            assert (allow_other_workers, pure) == (False, False)
            asked.extend(workers)
            return Task({"ell-0": 0.010, "ell-1": 0.014, "ell-2": 0.012}[workers[0]])

    class Spec:
        def device(self, i: int) -> str:
            return f"ell-{i}"

    cluster = type("Cluster", (), {"client": Client()})()
    hosts = type("Hosts", (), {"spec": Spec()})()

    # Execute / Assert: alone, the first host; beside a run of three, all three at once, the slowest kept
    assert bench.pace_on(cluster, hosts, "mlp") == 0.010 and asked == ["ell-0"]
    asked.clear()
    waited.clear()
    assert bench.pace_on(cluster, hosts, "mlp", 3) == 0.014
    assert asked == ["ell-0", "ell-1", "ell-2"] and waited == [3, 3, 3]
    asked.clear()
    assert bench.paces_on(cluster, hosts, "mlp", 3) == [0.010, 0.014, 0.012] and asked == ["ell-0", "ell-1", "ell-2"]


def test_the_wait_for_the_slowest_host_is_the_slowest_probe_over_the_mean_and_a_bad_probe_is_refused(bench) -> None:  # type: ignore[no-untyped-def]
    assert bench.slowest_over_mean([0.010, 0.014, 0.012]) == pytest.approx(0.014 / 0.012)
    assert bench.slowest_over_mean([0.010]) == 1.0
    with pytest.raises(ValueError, match="positive seconds per step"):
        bench.slowest_over_mean([0.010, 0.0])
    with pytest.raises(ValueError, match="positive seconds per step"):
        bench.slowest_over_mean([])


def test_the_pace_probe_gives_seconds_per_real_training_step_its_untimed_build_and_trace_left_out(bench) -> None:  # type: ignore[no-untyped-def]
    import time

    # Off a worker it keeps nothing: the call builds the model and runs the window once untimed, then timed
    start = time.perf_counter()
    per_step = bench.step_pace("mlp", 20)
    took = time.perf_counter() - start
    assert 0 < 20 * per_step < took / 2  # the timed window is one of the two runs and none of the build


def test_each_configuration_is_summarized_by_its_medians_and_judged_against_the_target(bench) -> None:  # type: ignore[no-untyped-def]
    rows = [
        {"devices": 2, "cores": 0.2, "model": "mlp", "repeat": r, "measured_s": m, "emulated_s": 1.0, "error": e}
        for r, (m, e) in enumerate([(1.0, 0.0), (1.1, -0.09), (0.8, 0.25)])
    ]
    rows.append({"devices": 5, "cores": 0.2, "model": "mlp", "repeat": 0, "measured_s": 2.0, "error": -0.5})
    [two, five] = bench.summarize(rows)
    assert (two["devices"], two["repeats"], two["measured_s"], two["error"]) == (2, 3, 1.0, 0.0)
    assert (two["error_min"], two["error_max"], two["within_target"]) == (-0.09, 0.25, True)
    assert two["error_mean"] == pytest.approx(0.16 / 3)
    assert two["error_sem"] == pytest.approx(statistics.stdev([0.0, -0.09, 0.25]) / 3**0.5)
    assert five["error_sem"] != five["error_sem"]  # one repeat: no standard error (NaN)
    assert two["cores_in_all"] == pytest.approx(0.4)
    assert five["within_target"] is False and "emulated_s" not in five  # a column it lacks is left out


def test_a_repeat_run_again_for_the_hypervisor_s_steal_is_judged_by_its_steal_never_by_its_error(bench) -> None:  # type: ignore[no-untyped-def]
    # Prepare: repeat 0 stolen 12% (error -25%), run again at 2% (error +9%); repeat 1 stolen over the limit in
    # all three attempts, the least stolen (6%) the worst error; repeat 2 under it at once; a row without a
    # steal read (NaN) counts as under it
    def row(repeat, attempt, steal, error):  # type: ignore[no-untyped-def]
        return {
            "devices": 2,
            "cores": 0.2,
            "model": "mlp",
            "repeat": repeat,
            "attempt": attempt,
            "machine_stolen_of_wanted": steal,
            "error": error,
            "measured_s": 1.0,
        }

    rows = [
        row(0, 0, 0.12, -0.25),
        row(0, 1, 0.02, 0.09),
        row(1, 0, 0.30, 0.01),
        row(1, 1, 0.06, -0.40),
        row(1, 2, 0.08, 0.02),
        row(2, 0, float("nan"), 0.03),
    ]

    # Execute
    kept = bench.judged(rows)
    [summary] = bench.summarize(rows)
    lines = bench._steal_lines(rows, kept, {"steal_limit": 0.05, "steal_retries": 2})

    # Assert: one row a repeat, picked by steal; the verdict's median over them, the others counted apart
    assert [(r["repeat"], r["attempt"]) for r in kept] == [(0, 1), (1, 1), (2, 0)]
    assert summary["repeats"] == 3 and summary["not_judged"] == 3
    assert summary["error"] == pytest.approx(0.03) and summary["error_min"] == pytest.approx(-0.40)
    assert lines[-1].endswith(
        "Not judged in this run: 3 (2 x 0.2 mlp, repeat 0: 12.0% stolen, error -25.0%; 2 x 0.2 mlp, repeat 1: "
        "30.0% stolen, error +1.0%; 2 x 0.2 mlp, repeat 1: 8.0% stolen, error +2.0%)."
    )
    # a run before the rule: every row judged, nothing said
    assert bench._steal_lines(rows[:1], rows[:1], {}) == []
    assert bench.judged([{k: v for k, v in r.items() if k != "attempt"} for r in rows[2:3]])[0]["error"] == 0.01


def test_a_stream_is_emulated_stage_by_stage_at_the_speed_factor_over_the_links(bench, board: DeviceProfile) -> None:  # type: ignore[no-untyped-def]
    from edgelab.pipeline.stream import StreamResult

    # Prepare: two stages on two devices, two micro-batches one after another (one in flight); the master sends
    # 1 MB to stage 0, which spends 0.1 s of CPU and sends 0.5 MB on; stage 1 spends 0.2 s and sends nothing back.
    rows = []
    for m in range(2):
        rows.append(
            {
                "branch": 0,
                "stage": "stage0",
                "device": "b-0",
                "micro_batch": m,
                "images": 1,
                "cpu_s": 0.1,
                "compute_cpu_s": 0.08,  # the rest: the worker's comms meanwhile
                "bytes_in": 1_000_000,
                "bytes_out": 500_000,
                "t_start": 10.0 * m,
                "t_end": 10.0 * m + 0.4,
            }
        )
        rows.append(
            {
                "branch": 0,
                "stage": "stage1",
                "device": "b-1",
                "micro_batch": m,
                "images": 1,
                "cpu_s": 0.2,
                "compute_cpu_s": 0.16,
                "bytes_in": 500_000,
                "bytes_out": 0,
                "t_start": 10.0 * m + 1,
                "t_end": 10.0 * m + 1.9,
            }
        )
    sends = pd.DataFrame({"micro_batch": [0, 1], "branch": [0, 0], "bytes": [1_000_000] * 2})
    empty = pd.DataFrame()
    result = StreamResult([], pd.DataFrame(rows), sends, empty, empty, micro_batch=1, max_in_flight=1, wall_s=6.6)

    # Execute: the board five times slower than this machine
    out = bench.compare_stream(result, board, speed_factor=5.0)

    # Assert: each micro-batch 1 s in, 0.5 s on stage 0, 0.5 s between the stages, 1.0 s on stage 1: 3 s, twice
    assert out["emulated_s"] == pytest.approx(6.0)
    assert out["measured_s"] == pytest.approx(6.6)
    assert out["error"] == pytest.approx(6.0 / 6.6 - 1)
    assert out["model_compute_s"] == pytest.approx(2.0)  # stage 1's two micro-batches
    assert out["device_compute_s"] == pytest.approx(1.8)  # stage 1's measured wall, 0.9 s each
    assert out["images"] == 2 and out["rounds"] == 2

    # The board's messages priced at 0.1 s a micro-batch: charged beside the computing threads' CPU alone (0.4 s
    # and 0.8 s), not beside the process's, which holds the comms already: each micro-batch 1 + 0.5 + 0.5 + 0.9 s
    out = bench.compare_stream(result, board, speed_factor=5.0, message={"per_message_s": 0.1, "per_byte_s": 0.0})
    assert out["emulated_s"] == pytest.approx(5.8) and out["emulated_nominal_s"] == pytest.approx(6.0)
    assert "error_no_hop" not in out  # a price without a hand-off: no second clock
    assert out["device_message_ms"] == pytest.approx(100.0)

    # And 0.1 us a byte in and out: stage 0 takes 1 MB in (0.1 s, under the 1 s transfer) and hands 0.5 MB on
    # (0.05 s, under the 0.5 s transfer), stage 1 takes 0.5 MB in (0.05 s, beside the transfer): the device work
    # hides under the wire and the stream's time is the same
    priced = {"per_message_s": 0.1, "per_byte_s": 1e-7}
    out = bench.compare_stream(result, board, speed_factor=5.0, message=priced)
    assert out["emulated_s"] == pytest.approx(5.8)
    assert out["device_ns_per_byte"] == pytest.approx(100.0)

    # Given the same stream as the emulator ran it (no quota: half the CPU a stage), the clock composes that one's
    # records and judges them against the limited run's wall: each micro-batch 1 + 0.25 + 0.5 + 0.5 s
    unthrottled = result.records.assign(cpu_s=result.records["cpu_s"] / 2)
    host = StreamResult([], unthrottled, sends, empty, empty, micro_batch=1, max_in_flight=1, wall_s=1.0)
    out = bench.compare_stream(result, board, speed_factor=5.0, host=host)
    assert out["emulated_s"] == pytest.approx(2 * 2.25)
    assert out["measured_s"] == pytest.approx(6.6) and out["host_wall_s"] == pytest.approx(1.0)
    assert out["device_compute_s"] == pytest.approx(1.8)  # still the limited run's measured stage wall

    # And one micro-batch at a time there, where stage 1 took 0.08 s, not 0.1 (its neighbour busy beside it cost
    # it a quarter more): stage 1's composed CPU divided by 1.25, each micro-batch 1 + 0.25 + 0.5 + 0.4 s
    one_at_a_time = unthrottled.assign(
        cpu_s=unthrottled["cpu_s"].where(unthrottled["stage"] == "stage0", unthrottled["cpu_s"] / 1.25)
    )
    alone = StreamResult([], one_at_a_time, sends, empty, empty, micro_batch=1, max_in_flight=1, wall_s=1.0)
    out = bench.compare_stream(result, board, speed_factor=5.0, host=host, alone=alone)
    assert out["contention"] == {"stage0": pytest.approx(1.0), "stage1": pytest.approx(1.25)}
    assert out["emulated_s"] == pytest.approx(2 * 2.15)
    assert "error_bursty" not in out

    # A bursty numerator half the continuous one: the same clock at speed factor 2.5 is kept beside the verdict's,
    # each micro-batch 1 + 0.125 + 0.5 + 0.2 s
    out = bench.compare_stream(result, board, speed_factor=5.0, host=host, alone=alone, bursty_factor=2.5)
    assert out["emulated_s"] == pytest.approx(2 * 2.15)
    assert out["emulated_bursty_s"] == pytest.approx(2 * 1.825)
    assert out["error_bursty"] == pytest.approx(2 * 1.825 / 6.6 - 1)
    assert out["bursty_factor"] == 2.5
    # and a factor from the pipeline's own model, 10: the same clock at speed factor 10, each micro-batch
    # 1 + 0.5 + 0.5 + 0.8 s, kept beside the verdict's, which it does not move
    out = bench.compare_stream(result, board, speed_factor=5.0, host=host, alone=alone, stage_factor=10.0)
    assert out["emulated_s"] == pytest.approx(2 * 2.15)
    assert out["emulated_stage_s"] == pytest.approx(2 * 2.8)
    assert out["error_stage"] == pytest.approx(2 * 2.8 / 6.6 - 1)
    assert out["stage_factor"] == 10.0 and "error_bursty" not in out

    # A price with a hand-off of 0.1 s: three hops a micro-batch, one at a time, 0.3 s more each in the verdict's
    # clock (each micro-batch 1 + 0.5 + 0.5 + 0.9 s without them), and the clock without them kept beside it
    hops = {"per_message_s": 0.1, "per_byte_s": 0.0, "per_hop_s": 0.1}
    out = bench.compare_stream(result, board, speed_factor=5.0, message=hops)
    assert out["emulated_s"] == pytest.approx(2 * (2.9 + 0.3))
    assert out["emulated_no_hop_s"] == pytest.approx(5.8)
    assert out["error_no_hop"] == pytest.approx(5.8 / 6.6 - 1)

    # The busiest stage's pattern: stage 1's 0.16 s of compute a micro-batch, the rest of the 3.3 s cycle idle
    burst, idle = bench.stage_pattern(result)
    assert (burst, idle) == (pytest.approx(0.16), pytest.approx(3.3 - 0.16))
    assert (
        bench.bursty_gemm(
            StreamResult(
                [],
                result.records.assign(compute_cpu_s=0.0),
                sends,
                empty,
                empty,
                micro_batch=1,
                max_in_flight=1,
                wall_s=6.6,
            ),
            1.0,
        )
        == {}
    )


def test_a_hand_off_is_what_makes_the_clock_compose_the_token_stream_and_is_checked_on_the_loaded_one(
    bench, board: DeviceProfile
) -> None:  # type: ignore[no-untyped-def]
    from edgelab.pipeline.stream import StreamResult

    # Prepare: two stages that compute 1 ms of CPU each inside a 0.2-core quota (5 ms of the board's), two
    # micro-batches one at a time, no bytes; the messages priced 10 ms a micro-batch: the clock says 2 x 2 x 15 ms
    rows = [
        {
            "branch": 0,
            "stage": f"stage{i}",
            "device": f"b-{i}",
            "micro_batch": m,
            "images": 1,
            "cpu_s": 0.002,
            "compute_cpu_s": 0.001,
            "bytes_in": 0,
            "bytes_out": 0,
            "t_start": 0.0,
            "t_end": 0.0,
        }
        for m in range(2)
        for i in range(2)
    ]
    sends = pd.DataFrame({"micro_batch": [0, 1], "branch": [0, 0], "bytes": [0, 0]})
    empty = pd.DataFrame()
    price = {"per_message_s": 0.01, "per_byte_s": 0.0, "cores": 0.2}

    def stream(wall_s: float, **changes: int) -> StreamResult:
        records = pd.DataFrame(rows).assign(**changes)
        return StreamResult([], records, sends, empty, empty, micro_batch=1, max_in_flight=1, wall_s=wall_s)

    # Execute: the token stream took 0.18 s, 0.12 s more than the clock, over 2 micro-batches of 3 hops each; the
    # loaded one hands 8,000 bytes on from each stage (8 ms on the board's 1 MB/s link) and took 0.20 s
    out = bench.hop_latency(stream(0.18), stream(0.20, bytes_out=8000), board, price)

    # Assert: 20 ms a hand-off; the loaded stream's clock with it 0.18 s + 2 x 2 x 8 ms, 0.212 s against 0.20
    assert out["hop_token_clock_s"] == pytest.approx(0.06)
    assert out["per_hop_s"] == pytest.approx(0.02, abs=1e-5)
    assert out["hop_loaded_error"] == pytest.approx(0.212 / 0.20 - 1, abs=1e-4)
    # and a stream as fast as its clock leaves nothing out
    assert bench.hop_latency(stream(0.05), stream(0.05), board, price)["per_hop_s"] == 0.0


def test_the_diagnostic_clocks_are_listed_per_repeat_beside_the_verdict_s(bench) -> None:  # type: ignore[no-untyped-def]
    bursty = {"bursty_factor": 32.0, "error_bursty": -0.02, "stage_burst_ms": 14.0, "stage_idle_ms": 30.5}
    runs = pd.DataFrame(
        [
            {"devices": 2, "cores": 0.2, "repeat": 1, "error": 0.12, "speed_factor": 40.0, **bursty},
            {"devices": 2, "cores": 0.2, "repeat": 0, "error": 0.09, "speed_factor": 40.0},  # a row without them
        ]
    )
    lines = bench._diagnostic_lines(runs)
    assert lines[-1] == "| 2 | 0.2 | 1 | 14.0 / 30.5 | 0.80 | +12.0% | -2.0% | nan | +nan% | +nan% |"
    assert len([line for line in lines if line.startswith("| 2 ")]) == 1
    lines = bench._diagnostic_lines(runs.assign(per_hop_s=0.0213, hop_loaded_error=-0.03, error_hop=0.051))
    assert lines[-1].endswith("| +12.0% | -2.0% | 21.3 | -3.0% | +5.1% |")  # a run before the hand-offs' clock
    assert "error, hand-offs |" in lines[-3]
    # since the hand-offs are in the verdict's clock, the column beside it is the clock without them
    lines = bench._diagnostic_lines(runs.assign(per_hop_s=0.0213, hop_loaded_error=-0.03, error_no_hop=-0.04))
    assert lines[-1].endswith("| +12.0% | -2.0% | 21.3 | -3.0% | -4.0% |")
    assert "error without hand-offs |" in lines[-3]
    # and since the pipeline's own model is timed on the board, its factor's clock beside them
    lines = bench._diagnostic_lines(runs.assign(error_no_hop=-0.04, stage_factor=30.0, error_stage=0.031))
    assert lines[-1].endswith("| -4.0% | 0.75 | +3.1% |")
    assert "own model's factor over the GEMM's |" in lines[-3]
    assert bench._diagnostic_lines(runs.drop(columns="error_bursty")) == []


def test_the_pipeline_s_own_model_is_timed_forward_on_micro_batches(bench) -> None:  # type: ignore[no-untyped-def]
    # Act: ResNet-20 forward on two micro-batches of CIFAR-shaped images, a window of 0.2 s, here (not a worker)
    images = np.random.default_rng(0).random((2 * bench.MICRO_BATCH, 28, 28, 3), dtype=np.float32)
    out = bench.forward_pace(images, 0.2)

    # Assert: at least every micro-batch once and as many as fill the window, its wall and CPU a micro-batch
    assert out["micro_batches"] >= 2
    assert out["wall_s"] * out["micro_batches"] >= 0.2
    assert out["wall_s"] > 0 and out["cpu_s"] > 0


def test_the_busiest_device_s_cpu_is_split_into_its_compute_and_its_event_loop(bench) -> None:  # type: ignore[no-untyped-def]
    from edgelab.pipeline.stream import StreamResult

    # Prepare: two devices over a stream; b-1's process used most (3 s, its event loop 1.2 s), its two
    # micro-batches' computing threads 0.7 s and 0.8 s
    records = pd.DataFrame(
        {"device": ["b-0", "b-1", "b-0", "b-1"], "compute_cpu_s": [0.5, 0.7, 0.5, 0.8], "micro_batch": [0, 0, 1, 1]}
    )
    cpu = pd.DataFrame({"process_s": [2.0, 3.0], "event_loop_s": [0.9, 1.2]}, index=["b-0", "b-1"])
    empty = pd.DataFrame()
    result = StreamResult([], records, empty, empty, empty, micro_batch=1, max_in_flight=1, wall_s=1.0, device_cpu=cpu)
    # Execute, Assert
    assert bench._busiest_cpu(result, "limited") == {
        "limited_process_cpu_s": 3.0,
        "limited_event_loop_cpu_s": 1.2,
        "limited_compute_cpu_s": pytest.approx(1.5),
    }
    assert bench._busiest_cpu(dataclasses.replace(result, device_cpu=empty), "host") == {}  # after a recovery


def test_a_device_s_cpu_per_byte_counts_the_payload_in_and_on_once_each(bench) -> None:  # type: ignore[no-untyped-def]
    token = {"cpu_s": 0.005, "payload_bytes": 64}
    loaded = {"cpu_s": 0.030, "payload_bytes": 1_000_064}
    assert bench.stream_cpu_per_byte(token, loaded) == pytest.approx(0.025 / 2e6)
    assert bench.stream_cpu_per_byte(token, {"cpu_s": 0.004, "payload_bytes": 1_000_064}) == 0.0


def test_a_stream_s_row_carries_its_message_prices_at_the_board_s_speed_and_the_host_cpu_behind_them(bench) -> None:  # type: ignore[no-untyped-def]
    message = {
        "per_message_s": 0.021,
        "per_byte_s": 45e-9,
        "token": {"cpu_s": 0.0042},
        "loaded": {"cpu_s": 0.0189},
    }
    assert bench._message_row(message) == pytest.approx(
        {"message_ms": 21.0, "message_ns_per_byte": 45.0, "token_cpu_ms": 4.2, "loaded_cpu_ms": 18.9}
    )


def test_a_link_measured_slower_than_its_rate_slows_the_clock_by_what_it_was_measured_to_take(
    bench, board: DeviceProfile
) -> None:  # type: ignore[no-untyped-def]
    # 2 MB a round took 4 s on a link of 1 MB/s: it delivers 0.5 MB/s (4 Mbit/s), the latency (0) kept.
    slow = bench.measured_link(board, {"exchange_s": 4.0, "bytes": 2_000_000})
    assert slow.link_mbps == pytest.approx(4.0) and slow.latency_s == board.latency_s
    assert bench.measured_link(board, {"exchange_s": 0.0, "bytes": 2_000_000}) == board  # nothing to go by


def test_the_groups_counts_are_summed_and_the_busiest_devices_cpu_is_kept_apart(bench) -> None:  # type: ignore[no-untyped-def]
    before = {"cpu/a": {"cpu_ns": 100, "nr_throttled": 1}, "cpu/b": {"cpu_ns": 50, "nr_throttled": 0}, "mem/a": {}}
    after = {
        "cpu/a": {"cpu_ns": 400, "nr_throttled": 5},
        "cpu/b": {"cpu_ns": 550, "nr_throttled": 2},
        "mem/a": {"memory_peak_bytes": 7},
    }
    assert bench._cgroup_deltas(before, after) == {
        "cpu_ns": 800,
        "nr_throttled": 6,
        "memory_peak_bytes": 7,
        "busiest_cpu_ns": 500,
    }


def test_a_run_s_row_splits_the_machine_s_cpu_into_its_own_work_and_what_the_hypervisor_took(bench) -> None:  # type: ignore[no-untyped-def]
    from edgelab.common.machine_cpu import CpuTimes

    # Prepare: 10 s of 2 devices' run; over it 2,000 ticks of the 2 CPUs: 1,000 busy, 500 idle, 500 stolen
    done = {
        "model": "mlp",
        "devices": 2,
        "cgroups": {"cpu_ns": 3_000_000_000, "busiest_cpu_ns": 2_000_000_000, "nr_periods": 100, "nr_throttled": 90},
        "load": (CpuTimes(100.0, 10_000, 50_000, 1_000), CpuTimes(110.0, 11_000, 50_500, 1_500)),
    }

    # Execute
    row = bench._row(done, {"error": 0.0}, 0.2, 0)

    # Assert
    assert row["run_wall_s"] == 10.0
    assert (row["machine_steal_share"], row["machine_stolen_of_wanted"]) == (0.25, 500 / 1500)
    assert row["machine_busy_cores"] == pytest.approx(0.5 * (os.cpu_count() or 1))
    assert (row["devices_cores_used"], row["busiest_device_cores"]) == (0.15, 0.2)
    assert row["throttled_share"] == 0.9


def test_a_board_s_steal_while_timed_is_said_when_its_file_records_it(bench) -> None:  # type: ignore[no-untyped-def]
    assert bench._stolen({"measurements": {"machine": {"stolen_of_wanted": 0.123}}}) == (
        "; 12% of the CPU time wanted stolen while timed"
    )
    assert bench._stolen({"measurements": {}}) == ""  # a board file from before it was measured
    assert bench._stolen({"measurements": {"machine": {"stolen_of_wanted": float("nan")}}}) == ""


def test_a_board_s_line_says_the_host_rate_is_per_cpu_second_when_it_was_measured_so(bench) -> None:  # type: ignore[no-untyped-def]
    profile = {"step_s": 0.0, "flops_per_s": 5e9, "reference_gflops": 10.0}
    doc = {"profile": profile, "measurements": {"cells": []}, "host_sustained_gflops": 70.0}
    assert "(this machine's 70.0: speed factor 7.00)" in bench._board_terms(doc)[1]  # a run from before
    doc["host_gemm_clock"] = "cpu"
    assert "(this machine's 70.0 per CPU second: speed factor 7.00)" in bench._board_terms(doc)[1]


def test_a_later_calibration_that_fails_keeps_the_last_board_and_says_why_and_a_first_one_ends_the_block(
    bench, board: DeviceProfile, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    import contextlib

    # Prepare: a calibration that the kernel killed (as a memory ceiling did), no hosts to busy beside it
    def killed(*args: object, **kwargs: object) -> None:
        raise RuntimeError("calibration at 0.2 cores failed: the timed training steps failed")

    monkeypatch.setattr(bench, "calibrate_on_first_host", killed)
    monkeypatch.setattr(bench, "others_training", lambda cluster, hosts, devices: contextlib.nullcontext([0]))
    doc = {"calibrations": []}
    last = ({"host_sustained_gflops": 80.0}, board)

    # Execute
    kept = bench._calibrate_busy(None, None, None, 4.0, 1, 5, doc, last)

    # Assert: the runs go on against the last board, and the failure is in the results, with its device count
    assert kept is last
    assert doc["calibrations"] == [
        {
            "devices_training": 5,
            "repeat": 1,
            "failed": "calibration at 0.2 cores failed: the timed training steps failed",
        }
    ]
    with pytest.raises(RuntimeError, match="timed training steps failed"):  # no board yet: nothing to judge by
        bench._calibrate_busy(None, None, None, 4.0, 0, 5, doc, None)


def test_the_hosts_beside_a_calibration_train_until_it_ends_and_the_first_host_is_left_to_it(bench) -> None:  # type: ignore[no-untyped-def]
    import time

    from distributed import Client, LocalCluster

    # Prepare: three workers named as hosts are, in this process (the load is real training, on each worker)
    with (
        LocalCluster(n_workers=3, processes=False, threads_per_worker=1, dashboard_address="127.0.0.1:0") as local,
        Client(local) as client,
    ):
        cluster = type("Cluster", (), {"client": client})()
        hosts = type("Hosts", (), {"spec": type("Spec", (), {"device": staticmethod(lambda i: i)})()})()

        def built(dask_worker) -> bool:  # type: ignore[no-untyped-def]
            return set(dask_worker.__dict__.get("_edgelab_pace", {})) == set(bench.MODELS)

        # Execute: the context held until both other hosts have built the models they train
        with bench.others_training(cluster, hosts, 3) as trained:
            deadline = time.monotonic() + 120
            while sum(client.run(built).values()) < 2 and time.monotonic() < deadline:
                time.sleep(0.2)
            during = client.run(built)

        # Assert: hosts 2 and 3 trained both models, the first was left alone; leaving the context stopped them
        # and counted their steps (each at least one turn of both models: the one it was in when told to stop)
        by_name = {w["name"]: during[a] for a, w in client.scheduler_info()["workers"].items()}
        assert by_name == {0: False, 1: True, 2: True}
        assert trained[0] >= 2 * sum(bench.BUSY_STEPS.values())


def test_training_that_dies_beside_a_later_calibration_fails_it_and_the_last_board_is_kept(
    bench, board: DeviceProfile, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from distributed import Client, LocalCluster

    # Prepare: three workers named as hosts are, in this process; the training beside the calibration dies on
    # each (as a worker over its memory ceiling is killed), the calibration itself succeeds
    def dies(stop: str) -> int:
        raise MemoryError("over the ceiling")

    monkeypatch.setattr(bench, "keep_training", dies)
    monkeypatch.setattr(bench, "calibrate_on_first_host", lambda *args, **kwargs: tmp_path / "never-read.json")
    with (
        LocalCluster(n_workers=3, processes=False, threads_per_worker=1, dashboard_address="127.0.0.1:0") as local,
        Client(local) as client,
    ):
        cluster = type("Cluster", (), {"client": client})()
        hosts = type("Hosts", (), {"spec": type("Spec", (), {"device": staticmethod(lambda i: i)})()})()
        doc = {"calibrations": []}
        last = ({"host_sustained_gflops": 80.0}, board)

        # Execute
        kept = bench._calibrate_busy(cluster, hosts, tmp_path, 4.0, 2, 3, doc, last)

        # Assert: the repeat goes on against the last board; the failure is kept, naming the host and the error;
        # with no board yet the block ends
        assert kept is last
        [failed] = doc["calibrations"]
        assert (failed["devices_training"], failed["repeat"]) == (3, 2)
        assert "the training beside the calibration failed on 1: MemoryError('over the ceiling')" in failed["failed"]
        with pytest.raises(RuntimeError, match="failed on 1: "):
            bench._calibrate_busy(cluster, hosts, tmp_path, 4.0, 0, 3, doc, None)


def test_a_later_calibration_is_preceded_by_the_first_hosts_worker_restarted_and_warmed_again(
    bench, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    # Prepare: a cluster whose client records what it is asked, hosts named as the benchmark's, and the warm-up
    calls: list[tuple[str, object]] = []

    class Client:
        def restart_workers(self, workers: list[str], timeout: float) -> dict[str, str]:
            calls.append(("restart", list(workers)))
            return dict.fromkeys(workers, "OK")

    class Cluster:
        client = Client()

    class Hosts:
        spec = type("Spec", (), {"device": staticmethod(lambda i: f"pi3b-{i}")})()
        cgroups: dict[str, list[str]] = {}  # no quotas to lift

    monkeypatch.setattr(bench, "warm_up", lambda cluster, devices, kinds, stages: calls.append(("warm", devices)))

    # Execute
    bench.fresh_first_host(Cluster(), Hosts(), 5, ("mlp",), 5)

    # Assert: the first host's worker only, then every device warmed as at the block's start
    assert calls == [("restart", ["pi3b-0"]), ("warm", 5)]


def test_the_hosts_together_over_a_host_alone_is_their_probes_means_ratio_and_a_bad_probe_is_refused(bench) -> None:  # type: ignore[no-untyped-def]
    # The hosts stepped at 6 ms together, 10 and 14 ms alone (either side): 0.5
    assert bench.co_run([0.010, 0.014], [0.006, 0.006]) == pytest.approx(0.5)
    assert bench.co_run([0.010], [0.012, 0.014]) == pytest.approx(1.3)
    with pytest.raises(ValueError, match="positive seconds per step"):
        bench.co_run([0.010, 0.0], [0.006])
    with pytest.raises(ValueError, match="positive seconds per step"):
        bench.co_run([], [0.006])


def test_each_calibration_is_listed_by_the_runs_it_served_a_given_board_and_a_failed_one_said_so(bench) -> None:  # type: ignore[no-untyped-def]
    profile = {"name": "limited20_n5_r1", "step_s": 0.0, "flops_per_s": 6e9, "reference_gflops": 15.0}
    cells = [{"model": "mlp", "batch_size": 64, "step_s": 0.0045}]
    board = {"profile": profile, "measurements": {"cells": cells, "fit": {"relative_rms_residual": 0.07}}}

    assert bench._calibration_line({**board, "devices_training": 5, "repeat": 1}).startswith(
        "  - repeat 1, 5 hosts (`limited20_n5_r1`): 0.00 ms per step + 6.00 GFLOP/s, fit residual 7% RMS; "
        "sustained GEMM 15.00 GFLOP/s; cells mlp/64 4.50 ms"
    )
    given = bench._calibration_line({**board, "devices_training": None, "repeat": 0, "devices": 2})
    assert given.startswith("  - given (`--board`), 2 hosts' runs (`limited20_n5_r1`)")
    failed = {"devices_training": 2, "repeat": 2, "failed": "calibration at 0.2 cores failed: killed"}
    assert bench._calibration_line(failed) == (
        "  - repeat 2, 2 hosts: failed (the last board kept): calibration at 0.2 cores failed: killed"
    )


def _run_doc(date: str, errors: dict[tuple[int, str], list[float]], **config: object) -> dict:  # type: ignore[type-arg]
    """A run's results as the benchmark writes them, its rows reduced to what pooling reads."""
    rows = [
        {"devices": n, "cores": 0.2, "model": m, "repeat": r, "error": e, "measured_s": 1.0}
        for (n, m), each in errors.items()
        for r, e in enumerate(each)
    ]
    settings = {"board": "one per device count", "batch_size": 64, "rounds_per_run": 4, **config}
    return {"config": settings, "host": {"date_utc": date}, "runs": rows}


def test_pooled_runs_are_judged_by_the_medians_over_all_their_repeats(bench) -> None:  # type: ignore[no-untyped-def]
    # Prepare: one configuration misses in this run and not in the earlier; one meets in both
    now = _run_doc("2026-12-06T10:28", {(2, "mlp"): [-0.09, -0.17, -0.16], (5, "cnn"): [0.04, -0.15, -0.06]})
    before = _run_doc("2026-12-06T07:44", {(2, "mlp"): [0.06, 0.05, 0.08], (5, "cnn"): [0.02, 0.03, -0.06]})

    # Execute
    pooled = bench.pool(now, {"earlier.json": before})

    # Assert: six repeats per configuration, each median over all six
    two, five = pooled["summary"]
    assert (two["model"], two["repeats"], two["error_min"], two["error_max"]) == ("mlp", 6, -0.17, 0.08)
    assert two["error"] == pytest.approx((-0.09 + 0.05) / 2) and two["within_target"]
    assert five["error"] == pytest.approx((-0.06 + 0.02) / 2) and five["repeats"] == 6
    assert pooled["runs"] == ["2026-12-06T10:28", "2026-12-06T07:44"] and pooled["files"] == ["earlier.json"]
    lines = bench._pooled_lines(pooled)
    assert "## Pooled with earlier runs of the same method: within 10% in 2 of 2" in lines
    # the mean -3.8%, the sample sd 11.5%, over the square root of six: 4.7%
    assert "| 2 | 0.2 | mlp | 6 | -2.0% | -17.0% .. +8.0% | yes | -3.8% ± 4.7% |  |" in lines


def test_a_run_of_another_method_or_no_run_at_all_is_refused_for_pooling(bench, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from edgelab.common.errors import ConfigError

    now = _run_doc("2026-12-06T10:28", {(2, "mlp"): [0.0]})
    other = _run_doc("2026-12-05T20:00", {(2, "mlp"): [0.0]}, board="calibrated alone")
    with pytest.raises(ConfigError, match=r"--pool='old.json'.*its board is 'calibrated alone'"):
        bench.pool(now, {"old.json": other})
    (tmp_path / "notes.json").write_text('{"runs": []}')
    with pytest.raises(ConfigError, match="config, host and runs"):
        bench.load_run(tmp_path / "notes.json")
    with pytest.raises(ConfigError, match="--pool"):
        bench.load_run(tmp_path / "missing.json")


def test_a_run_whose_pipelines_clock_had_no_hand_offs_is_pooled_without_its_pipelines(bench) -> None:  # type: ignore[no-untyped-def]
    # Prepare: this run's pipelines clocked with hand-offs; an earlier run's without, its data-parallel rows alike
    now = _run_doc("2026-12-07T20:00", {(2, "mlp"): [0.01], (2, "pipeline"): [0.02]}, stream_clock=bench.STREAM_CLOCK)
    before = _run_doc("2026-12-07T06:26", {(2, "mlp"): [0.05, 0.07], (2, "pipeline"): [0.15, 0.13]})

    # Execute
    pooled = bench.pool(now, {"0626.json": before})

    # Assert: the MLP over all three repeats, the pipeline over this run's one alone, and the page says so
    mlp, pipeline = sorted(pooled["summary"], key=lambda s: s["model"])
    assert (mlp["repeats"], mlp["error"]) == (3, pytest.approx(0.05))
    assert (pipeline["repeats"], pipeline["error"]) == (1, pytest.approx(0.02))
    assert pooled["left_out"] == ["0626.json: its pipeline rows"]
    assert "Left out, their clock not this run's: 0626.json: its pipeline rows." in bench._pooled_lines(pooled)[3]


def test_earlier_runs_of_one_file_name_in_two_folders_are_both_pooled(bench, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    # Prepare: two runs, each written as its folder's limited_hosts.json
    paths = []
    for folder, error in (("morning", 0.05), ("noon", -0.15)):
        (tmp_path / folder).mkdir()
        path = tmp_path / folder / "limited_hosts.json"
        path.write_text(json.dumps(_run_doc(f"2026-12-06 {folder}", {(2, "mlp"): [error]})))
        paths.append(path)

    # Execute
    earlier = bench.load_runs([*paths, paths[0]])
    pooled = bench.pool(_run_doc("2026-12-06 evening", {(2, "mlp"): [0.0]}), earlier)

    # Assert: both runs counted once each, with this one: three repeats
    assert list(earlier) == [str(p) for p in paths]
    [row] = pooled["summary"]
    assert (row["repeats"], row["error"], row["error_min"]) == (3, 0.0, -0.15)


def test_a_run_that_fails_part_way_writes_the_runs_it_had_and_says_it_ended_early(
    bench, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    import json

    # Prepare: the first block's board and first two runs as a committed run recorded them, then the second
    # block failing as a worker's restart once did; no machine checks (no hosts are built)
    committed = json.loads((Path(__file__).parents[1] / "reports/benchmarks/limited_hosts.json").read_text())
    first = [r for r in committed["runs"] if r["cores"] == 0.2][:2]

    def run_block(cores, devices, *, doc, rows, **kwargs):  # type: ignore[no-untyped-def]
        if cores == 0.1:
            raise TimeoutError("a worker did not shut down within 120 s")
        doc.update(committed["boards"]["0.2"])
        rows.extend(first)

    monkeypatch.setattr(bench, "run_block", run_block)
    monkeypatch.setattr(bench.shaped_hosts, "check_machine", lambda: None)
    monkeypatch.setattr(bench.device_cgroups, "check_machine", lambda limits: None)
    monkeypatch.setattr(bench, "end_on_sigterm", lambda: None)

    # Execute
    with pytest.raises(bench.RunEndedEarly, match="after 2 runs: TimeoutError: a worker did not shut down"):
        bench.main(["--points", "2:0.2", "10:0.1", "--repeats", "1", "--out-dir", str(tmp_path)])

    # Assert: the two runs and the board written, with the reason; the page says so above its table
    written = json.loads((tmp_path / "limited_hosts.json").read_text())
    assert [(r["model"], r["devices"], r["repeat"]) for r in written["runs"]] == [
        (r["model"], r["devices"], r["repeat"]) for r in first
    ]
    assert written["ended_early"] == "TimeoutError: a worker did not shut down within 120 s"
    assert set(written["boards"]) == {"0.2", "0.1"} and written["boards"]["0.1"] == {}
    assert len(written["summary"]) == len({(r["model"], r["devices"]) for r in first})
    page = (tmp_path / "limited_hosts.md").read_text().splitlines()
    assert page[2].startswith(
        "**This run ended early** (TimeoutError: a worker did not shut down within 120 s): 2 runs"
    )
    steps = committed["config"]["steps_per_round_at_0.2_cores"]
    assert f"data: {steps['mlp']} steps of mlp, {steps['cnn']} of cnn at 0.2 cores" in page[4]


def test_a_run_that_fails_before_any_run_writes_nothing(bench, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    def run_block(cores, devices, **kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError("calibration at 0.2 cores failed")

    monkeypatch.setattr(bench, "run_block", run_block)
    monkeypatch.setattr(bench.shaped_hosts, "check_machine", lambda: None)
    monkeypatch.setattr(bench.device_cgroups, "check_machine", lambda limits: None)
    monkeypatch.setattr(bench, "end_on_sigterm", lambda: None)

    with pytest.raises(bench.RunEndedEarly, match="after 0 runs: RuntimeError: calibration at 0.2 cores failed"):
        bench.main(["--points", "2:0.2", "--out-dir", str(tmp_path)])
    assert list(tmp_path.iterdir()) == []
