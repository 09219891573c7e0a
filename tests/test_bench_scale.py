"""The scale benchmark's own checks and arithmetic (benchmarks/bench_scale.py), without running it."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from edgelab.common.errors import ConfigError

BENCHMARK = "bench_scale"


@pytest.fixture(scope="module")
def bench_scale(benchmark):  # type: ignore[no-untyped-def]
    return benchmark


def test_sides_are_checked_before_any_run(bench_scale, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match=r"sides='horovod' is not allowed: any of edgelab-virtual"):
        bench_scale.check_sides(["horovod"])
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "flwr" else real(name, *a))
    with pytest.raises(ConfigError, match=r"sides='flower-fit'.*flwr is missing \(pip install -e '\.\[bench\]'\)"):
        bench_scale.check_sides(["edgelab-virtual", "flower-fit"])
    bench_scale.check_sides(["edgelab-virtual", "edgelab-process"])  # edgelab's own sides need nothing more


def test_each_side_runs_the_same_work_in_its_own_process(bench_scale) -> None:  # type: ignore[no-untyped-def]
    virtual = bench_scale._command("edgelab-virtual", 1000, 4, "w.npz")
    fit = bench_scale._command("flower-fit", 1000, 4, "w.npz")
    work = ["--clients", "1000", "--samples", "60000", "--rounds", "4", "--batch", "32"]
    for cmd in (virtual, fit, bench_scale._command("flower-compiled", 1000, 4, "w.npz")):
        assert cmd[0] == sys.executable and cmd[2:10] == work
    assert virtual[10:14] == ["--hosting", "virtual", "--workers", "2"]
    assert "--hosting" not in bench_scale._command("edgelab-process", 10, 4, "w.npz")
    assert fit[10:12] == ["--client-loop", "fit"]
    # Ten thousand devices hold 6 digits each: their batch is the shard
    assert bench_scale._command("edgelab-virtual", 10000, 4, "w.npz")[9] == "6"


def test_the_summary_takes_medians_and_divides_flower_by_edgelab(bench_scale) -> None:  # type: ignore[no-untyped-def]
    def run(side: str, s_round: float, start: float) -> dict[str, object]:
        return {
            "side": side,
            "devices": 100,
            "later_round_s": s_round,
            "round1_s": 2 * s_round,
            "to_round1_end_s": start,
            "peak_memory_gb": 1.0,
            "accuracy": 0.9,
        }

    runs = [run("edgelab-virtual", 1.0, 10.0), run("edgelab-virtual", 3.0, 14.0), run("flower-compiled", 4.0, 36.0)]
    runs.append({"side": "flower-fit", "devices": 100, "error": "timed out"})
    rows = {r["side"]: r for r in bench_scale.summarize({"runs": runs})}
    assert rows["edgelab-virtual"]["later_round_s"] == 2.0 and rows["edgelab-virtual"]["runs"] == 2
    assert rows["edgelab-virtual"]["flower_compiled_over_edgelab"] == 2.0
    assert rows["edgelab-virtual"]["startup_ratio"] == 3.0
    assert rows["flower-fit"]["runs"] == 0 and rows["flower-fit"]["error"] == "timed out"
