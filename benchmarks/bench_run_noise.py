"""Benchmark: how much one run varies when it is run again and again on the same limited hosts.

The limited-hosts benchmark (``bench_limited_hosts.py``) judges the emulated
clock against single runs of about twenty seconds, each against a board
calibrated minutes before. How close can any clock come to such a run? This
benchmark runs the same configuration back to back on the same shaped hosts
(``shaped_hosts``, the same quotas, ceilings and links), nothing changed
between runs, and reports how far each run's seconds per round lie from their
mean; and the triples of runs whose median lies within 10% of it: how often a
verdict from the median of three repeats would hold for a clock exact on the
mean. The board a clock is calibrated on is a measurement of the same machine,
so its own spread comes on top.

Beside it, with nothing limited and nothing else running, one thread's GEMM
rate per CPU second (``sustained_gflops``) over windows of a few seconds: how
much this machine's own speed moves.

Needs root and cgroup v1 (``cpu``, ``memory``). Run
``sudo EDGELAB_DATA_DIR=../shared/data .venv/bin/python benchmarks/bench_run_noise.py --help``;
results go to ``reports/benchmarks/run_noise.{json,md}``.
"""

from __future__ import annotations

# First: importing it caps TensorFlow's threads in this process's environment, before anything imports TensorFlow.
from bench_limited_hosts import (  # isort: skip
    LINK_MBIT,
    MEMORY_MB,
    MODELS,
    SHARES,
    TARGET,
    limited_cluster,
    point,
    run_config,
    steps_per_round,
    warm_up,
)

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench_training import end_on_sigterm, host_info

from edgelab.cluster import device_cgroups, shaped_hosts
from edgelab.common.paths import reports_dir
from edgelab.common.results import atomic_write_text
from edgelab.emulation.profiles import sustained_gflops

POINTS = ((2, 0.2), (10, 0.1))  # the limited-hosts benchmark's smallest and largest


def spread(values: list[float]) -> dict[str, float]:
    """How far ``values`` (one per run) lie from their mean, as shares of it.

    ``within_target``: the share of runs within ``TARGET`` of the mean;
    ``triples_within_target``: the share of all triples of runs whose median is.
    """
    if len(values) < 3:
        raise ValueError(f"a spread needs at least 3 runs, got {len(values)}")
    mean = statistics.fmean(values)
    off = [v / mean - 1 for v in values]
    medians = [statistics.median(t) / mean - 1 for t in itertools.combinations(values, 3)]
    return {
        "runs": len(values),
        "mean": mean,
        "sd_share": statistics.stdev(values) / mean,
        "min_share": min(off),
        "max_share": max(off),
        "within_target": sum(abs(o) <= TARGET for o in off) / len(off),
        "triples_within_target": sum(abs(m) <= TARGET for m in medians) / len(medians),
    }


def judged_by_another(values: list[float]) -> dict[str, float]:
    """Each run judged by another as the clock's board would judge it: how often within ``TARGET``.

    A board is itself a measurement of these hosts, minutes from the run it
    judges; here another run of the same configuration stands for it: the
    error of run ``r`` judged by run ``b`` is ``values[b] / values[r] - 1``.
    ``one``: the share of all ordered pairs within the target; ``three``: of
    all ways to pick three disjoint pairs, the share whose median error is (a
    benchmark's verdict from three repeats, each against a board of its own).
    """
    if len(values) < 6:
        raise ValueError(f"three disjoint pairs need at least 6 runs, got {len(values)}")
    pairs = list(itertools.permutations(range(len(values)), 2))

    def error(pair: tuple[int, int]) -> float:
        return values[pair[0]] / values[pair[1]] - 1

    threes = [t for t in itertools.combinations(pairs, 3) if len({i for pair in t for i in pair}) == 6]
    return {
        "one": sum(abs(error(p)) <= TARGET for p in pairs) / len(pairs),
        "three": sum(abs(statistics.median(map(error, t))) <= TARGET for t in threes) / len(threes),
    }


def run_row(done: dict[str, Any], cores: float, run: int) -> dict[str, Any]:
    """One run's seconds per round at the client, and inside its devices' tasks, from its records."""
    records = done["run"].records
    per_round = records.groupby("round").agg(
        measured_s=("round_wall_s", "first"), device_max_s=("wall_s", "max"), device_mean_s=("wall_s", "mean")
    )
    per_step = records["cpu_s"] / records["steps"]
    return {
        "model": done["model"],
        "devices": done["devices"],
        "cores": cores,
        "run": run,
        "steps_per_round": steps_per_round(done["model"], cores),
        "rounds_s": [float(v) for v in per_round["measured_s"]],
        "measured_s": float(per_round["measured_s"].mean()),
        "device_max_s": float(per_round["device_max_s"].mean()),
        "device_mean_s": float(per_round["device_mean_s"].mean()),
        "device_cpu_ms_per_step": float(1e3 * per_step.median()),
    }


def run_point(devices: int, cores: float, models: tuple[str, ...], runs: int) -> list[dict[str, Any]]:
    """``runs`` runs of each model on ``devices`` hosts of ``cores`` each, back to back, the models alternating."""
    rows = []
    with limited_cluster(cores, devices, prefix="edgelab-run-noise-") as (cluster, hosts, _):
        warm_up(cluster, devices, models, 0)
        for r in range(runs):
            for model in models if r % 2 == 0 else models[::-1]:
                rows.append(run_row(run_config(cluster, hosts, model, devices), cores, r))
                print(f"{devices} x {cores:g} {model} run {r}: {rows[-1]['measured_s']:.3f} s a round", flush=True)
    return rows


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per configuration: the spread of its runs' seconds per round, and of its devices' CPU per step."""
    out = []
    for (devices, cores, model), group in itertools.groupby(
        sorted(rows, key=lambda r: (r["devices"], r["cores"], r["model"], r["run"])),
        key=lambda r: (r["devices"], r["cores"], r["model"]),
    ):
        runs = list(group)
        out.append(
            {
                "devices": devices,
                "cores": cores,
                "model": model,
                "round": spread([r["measured_s"] for r in runs]),
                "judged_by_another": judged_by_another([r["measured_s"] for r in runs]),
                "cpu_per_step": spread([r["device_cpu_ms_per_step"] for r in runs]),
                "rounds_in_a_run": spread([s for r in runs for s in r["rounds_s"]]),
            }
        )
    return out


def run_benchmark(
    *, points: list[tuple[int, float]], models: tuple[str, ...], runs: int, gemm_windows: int, gemm_s: float
) -> dict[str, Any]:
    """The machine's own GEMM windows first (nothing else running), then each point's runs."""
    shaped_hosts.check_machine()
    device_cgroups.check_machine(device_cgroups.DeviceLimits(cpus=min(c for _, c in points), memory_mb=MEMORY_MB))
    host = host_info()
    t0 = time.perf_counter()
    gemm = [sustained_gflops(seconds=gemm_s, repeats=1, clock="cpu") for _ in range(gemm_windows)]
    rows = [row for n, c in points for row in run_point(n, c, models, runs)]
    host["benchmark_wall_s"] = time.perf_counter() - t0
    return {
        "config": {
            "points": [list(p) for p in points],
            "models": list(models),
            "runs": runs,
            "gemm_windows": gemm_windows,
            "gemm_window_s": gemm_s,
            "memory_mb": MEMORY_MB,
            "cpu_shares": SHARES,
            "link_mbit": LINK_MBIT,
            "target": TARGET,
        },
        "host": host,
        "gemm_gflops": gemm,
        "gemm": spread(gemm),
        "runs": rows,
        "summary": summarize(rows),
    }


def render_markdown(results: dict[str, Any]) -> str:
    """The spread of each configuration's runs, and of the machine's GEMM rate."""
    c, h, g = results["config"], results["host"], results["gemm"]
    target = f"{c['target']:.0%}"
    lines = [
        "# How much one run varies on the limited hosts",
        "",
        f"The same configuration run {c['runs']} times back to back on the same shaped hosts (the limited-hosts "
        f"benchmark's: {c['link_mbit']:g} Mbit/s links, a CFS quota of each host's cores, {c['memory_mb']} MiB "
        "ceiling), the models alternating, nothing changed between runs. Seconds per round as measured at the "
        f"client; 'runs within {target}': of the runs, those within {target} of their mean; 'triples': of all "
        f"triples of runs, those whose median is within {target} of the mean: how often the median of three "
        "repeats would agree with a clock exact on the mean. But a clock's board is itself measured on these hosts, "
        "minutes from the runs it judges: 'one judged by another' stands another run of the configuration in for "
        f"it (run b's seconds over run r's, less 1), the share of all ordered pairs of runs within {target}; 'three "
        "so judged': of all ways to pick three disjoint pairs, the share whose median error is, a verdict from "
        f"three repeats each against a board of its own. Host: {h.get('cpu_count')} CPUs, "
        f"{h['benchmark_wall_s'] / 60:.0f} min, from {h.get('date_utc', '?')}.",
        "",
        "| devices | cores each | model | runs | s a round, mean | sd | lowest .. highest | "
        f"runs within {target} | triples | one judged by another | three so judged | rounds within a run: sd | "
        "CPU per step: sd |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in results["summary"]:
        r = s["round"]
        lines.append(
            f"| {s['devices']} | {s['cores']:g} | {s['model']} | {r['runs']} | {r['mean']:.3f} | {r['sd_share']:.1%} "
            f"| {r['min_share']:+.1%} .. {r['max_share']:+.1%} | {r['within_target']:.0%} | "
            f"{r['triples_within_target']:.0%} | {s['judged_by_another']['one']:.0%} | "
            f"{s['judged_by_another']['three']:.0%} | {s['rounds_in_a_run']['sd_share']:.1%} | "
            f"{s['cpu_per_step']['sd_share']:.1%} |"
        )
    lines += [
        "",
        f"This machine's own speed, nothing limited and nothing else running: one thread's GEMM rate per CPU second "
        f"over {g['runs']} windows of {c['gemm_window_s']:g} s, mean {g['mean']:.1f} GFLOP/s, sd {g['sd_share']:.1%}, "
        f"{g['min_share']:+.1%} .. {g['max_share']:+.1%} of the mean.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--points",
        nargs="+",
        type=point,
        default=list(POINTS),
        help="devices:cores-each points (default: 2:0.2 10:0.1)",
    )
    parser.add_argument("--runs", type=int, default=6, help="runs of each model at each point, at least 6 (default 6)")
    parser.add_argument("--only", nargs="+", choices=MODELS, default=list(MODELS), help="models (default: both)")
    parser.add_argument("--gemm-windows", type=int, default=20, help="GEMM windows, at least 3 (default 20)")
    parser.add_argument("--gemm-seconds", type=float, default=3.0, help="each GEMM window's length (default 3)")
    parser.add_argument("--out-dir", type=Path, default=None, help="default: reports/benchmarks/")
    parser.add_argument(
        "--from-json", type=Path, default=None, metavar="FILE", help="summarize and render this run_noise.json again"
    )
    args = parser.parse_args(argv)
    folder = args.out_dir or reports_dir() / "benchmarks"
    if args.from_json is not None:
        results = json.loads(args.from_json.read_text())
        results["summary"] = summarize(results["runs"])
        return _write(results, folder)
    if args.runs < 6:
        parser.error(f"--runs must be at least 6 (three disjoint pairs of runs), not {args.runs}")
    if args.gemm_windows < 3 or not args.gemm_seconds > 0:
        parser.error(
            f"--gemm-windows must be >= 3 and --gemm-seconds > 0, not {args.gemm_windows}, {args.gemm_seconds}"
        )
    end_on_sigterm()
    results = run_benchmark(
        points=args.points,
        models=tuple(args.only),
        runs=args.runs,
        gemm_windows=args.gemm_windows,
        gemm_s=args.gemm_seconds,
    )
    return _write(results, folder)


def _write(results: dict[str, Any], folder: Path) -> int:
    atomic_write_text(folder / "run_noise.json", json.dumps(results, indent=1, sort_keys=True, default=str) + "\n")
    md = render_markdown(results)
    atomic_write_text(folder / "run_noise.md", md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
