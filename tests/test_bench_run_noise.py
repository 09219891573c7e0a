"""The run-noise benchmark's arithmetic: how far runs lie from their mean, and how often a median of three does."""

from __future__ import annotations

import pandas as pd
import pytest

BENCHMARK = "bench_run_noise"  # the module conftest's ``benchmark`` fixture imports


@pytest.fixture(scope="module")
def bench(benchmark):  # type: ignore[no-untyped-def]
    return benchmark


def test_a_spread_counts_the_runs_and_the_triples_whose_median_is_within_the_target_of_the_mean(bench) -> None:  # type: ignore[no-untyped-def]
    # Four runs about a mean of 1.0: two on it, one 20% slow, one 20% fast
    got = bench.spread([1.0, 1.2, 0.8, 1.0])

    # Two of four runs within 10%; of the four triples, (1.0, 1.2, 0.8), (1.0, 1.2, 1.0), (1.0, 0.8, 1.0) and
    # (1.2, 0.8, 1.0) have medians 1.0, 1.0, 1.0, 1.0: all four within
    assert got["runs"] == 4 and got["mean"] == pytest.approx(1.0)
    assert (got["min_share"], got["max_share"]) == (pytest.approx(-0.2), pytest.approx(0.2))
    assert got["within_target"] == 0.5 and got["triples_within_target"] == 1.0
    assert got["sd_share"] == pytest.approx((0.08 / 3) ** 0.5)


def test_a_spread_of_runs_that_lean_one_way_loses_the_triples_that_hold_two_of_the_far_ones(bench) -> None:  # type: ignore[no-untyped-def]
    # Mean 1.0: two runs 15% slow, two 15% fast, one on it; a triple's median is off by 15% when two of its
    # three runs are on the same side
    got = bench.spread([1.15, 1.15, 0.85, 0.85, 1.0])

    # Of the ten triples, those holding the run on the mean and one of each side (4) have it as their median;
    # the other six hold two runs of one side
    assert got["within_target"] == 0.2
    assert got["triples_within_target"] == pytest.approx(0.4)
    with pytest.raises(ValueError, match="at least 3 runs, got 2"):
        bench.spread([1.0, 1.1])


def test_a_run_judged_by_another_fails_whenever_they_differ_and_three_so_judged_when_two_do(bench) -> None:  # type: ignore[no-untyped-def]
    # Three runs of 1 s and three of 2 s: a pair within a kind errs by 0, across by +100% or -50%
    got = bench.judged_by_another([1.0, 1.0, 1.0, 2.0, 2.0, 2.0])

    # Of 30 ordered pairs, the 12 within a kind; of the 15 ways to pair the six runs, the 9 holding a pair of each
    # kind have a median error of 0, the 6 pairing every 1 s run with a 2 s run none (each orientation alike)
    assert got == {"one": pytest.approx(12 / 30), "three": pytest.approx(9 / 15)}
    one_apart = bench.judged_by_another([1.0, 1.0, 1.0, 1.0, 1.0, 2.0])
    assert one_apart == {"one": pytest.approx(20 / 30), "three": 1.0}  # one pair errs, the median never
    with pytest.raises(ValueError, match="at least 6 runs, got 5"):
        bench.judged_by_another([1.0] * 5)


def test_a_run_s_row_takes_its_rounds_from_the_client_and_its_devices_from_their_tasks(bench) -> None:  # type: ignore[no-untyped-def]
    # Two rounds of two devices: round walls 5 and 7 s at the client; device walls 4/4.5 and 6/6.5 s
    records = pd.DataFrame(
        {
            "round": [0, 0, 1, 1],
            "round_wall_s": [5.0, 5.0, 7.0, 7.0],
            "wall_s": [4.0, 4.5, 6.0, 6.5],
            "cpu_s": [0.9, 1.0, 1.1, 1.2],
            "steps": [100, 100, 100, 100],
        }
    )
    run = type("Run", (), {"records": records})()

    row = bench.run_row({"run": run, "model": "mlp", "devices": 2}, 0.2, 3)

    assert row["rounds_s"] == [5.0, 7.0] and row["measured_s"] == 6.0
    assert (row["device_max_s"], row["device_mean_s"]) == (5.5, 5.25)
    assert row["device_cpu_ms_per_step"] == pytest.approx(10.5)  # the median of 9, 10, 11 and 12 ms
    assert (row["run"], row["steps_per_round"]) == (3, bench.steps_per_round("mlp", 0.2))


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--runs", "5"], "--runs must be at least 6"),
        (["--points", "2x0.2"], "argument --points: takes devices:cores pairs such as 5:0.2, not '2x0.2'"),
        (["--gemm-windows", "1"], "--gemm-windows must be >= 3"),
    ],
)
def test_bad_arguments_are_refused_before_any_host_is_built(bench, argv, said, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(bench, "run_benchmark", lambda **kwargs: pytest.fail("ran"))
    with pytest.raises(SystemExit):
        bench.main(argv)
    assert said in capsys.readouterr().err


def test_a_run_read_back_is_summarized_and_rendered_again(bench, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    # Prepare: six runs of one configuration, two rounds each, as a run writes them (no summary yet)
    walls = [6.0, 6.6, 5.4, 6.0, 6.0, 7.2]
    runs = [
        {"model": "mlp", "devices": 2, "cores": 0.2, "run": i, "measured_s": w, "rounds_s": [w, w],
         "device_cpu_ms_per_step": 1.0 + i / 100}
        for i, w in enumerate(walls)
    ]  # fmt: skip
    doc = {
        "config": {"runs": 6, "link_mbit": 100.0, "memory_mb": 1024, "target": 0.1, "gemm_window_s": 3.0},
        "host": {"cpu_count": 2, "benchmark_wall_s": 600.0, "date_utc": "2026-12-06T17:11"},
        "gemm": bench.spread([80.0, 88.0, 84.0]),
        "runs": runs,
    }
    (tmp_path / "in.json").write_text(json.dumps(doc))

    # Execute
    assert bench.main(["--from-json", str(tmp_path / "in.json"), "--out-dir", str(tmp_path)]) == 0

    # Assert: the summary recomputed from the runs, and its row on the page (mean 6.2 s; 5.4 and 7.2 more than 10%
    # from it)
    [row] = json.loads((tmp_path / "run_noise.json").read_text())["summary"]
    assert row["round"]["mean"] == pytest.approx(6.2) and row["round"]["within_target"] == pytest.approx(4 / 6)
    page = (tmp_path / "run_noise.md").read_text()
    assert "| 2 | 0.2 | mlp | 6 | 6.200 |" in page and "mean 84.0 GFLOP/s" in page
