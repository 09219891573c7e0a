"""Benchmark: the embedded devices under ``SCHED_BATCH`` against the kernel's default, side by side on one cluster.

``edgelab.cluster.device_scheduling`` runs the embedded cluster's device workers
under Linux's ``SCHED_BATCH`` so that a device woken by its weights does not
preempt the client mid-round. This measures what that changes: one cluster of
10 emulated devices, the same LeNet-MLP rounds as ``bench_sync.py`` part A
(batch 64, digits, seed 0), each path and device count run under both
policies in turn, the devices switched between them in place; the order of
the two alternates from repeat to repeat. Per cell: the median round (the
client's wall time of the round, as part A), its compute (the slowest
device's) and the overhead between them, and the mean round with the host's
wall time per round (the tails the median does not see). Medians over the
repeats; results and the host's load go to
``reports/benchmarks/scheduling.{json,md}``. Linux only.

    python benchmarks/bench_scheduling.py            # 4 repeats of 90 rounds: about 11 minutes here
"""

from __future__ import annotations

import os
import sys

from bench_training import THREAD_CAP

if "tensorflow" not in sys.modules:
    os.environ.update(THREAD_CAP)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from bench_training import host_info  # noqa: E402

from edgelab.cluster import device_scheduling
from edgelab.common.paths import reports_dir  # noqa: E402
from edgelab.common.results import atomic_write_text  # noqa: E402
from edgelab.data import load_dataset  # noqa: E402
from edgelab.runtime.devices import connect  # noqa: E402
from edgelab.training.data_parallel import TrainConfig, train  # noqa: E402

BATCH = 64
#: (transport, devices) of every cell
CELLS = (("direct", 2), ("direct", 5), ("direct", 10), ("allreduce", 2), ("allreduce", 5), ("allreduce", 10))
POLICIES = device_scheduling.POLICIES


def run_benchmark(*, rounds: int, repeats: int) -> dict[str, Any]:
    """Every cell under both policies, ``repeats`` times, the policies' order alternating."""
    if not hasattr(os, "SCHED_BATCH"):
        raise SystemExit("bench_scheduling: scheduling policies are Linux's; nothing to compare here")
    host = host_info()
    n_max = max(n for _, n in CELLS)
    data = load_dataset("mnist", sample_limit=min(60_000, max(rounds, 20) * BATCH * n_max), test_limit=100)
    rows: list[dict[str, Any]] = []
    with connect(n_max, dashboard_address="127.0.0.1:0") as cluster:
        for transport, n in CELLS:  # every path traced and its channels opened before anything is timed
            cfg = TrainConfig(model="mlp", n_devices=n, batch_size=BATCH, worker_data="full", seed=0)
            train(cluster, data.limited(sample_limit=20 * BATCH * n, test_limit=100), cfg, transport=transport)
        for repeat in range(repeats):
            for policy in POLICIES if repeat % 2 == 0 else POLICIES[::-1]:
                cluster.client.run(device_scheduling.apply, policy)
                for transport, n in CELLS:
                    cfg = TrainConfig(model="mlp", n_devices=n, batch_size=BATCH, worker_data="full", seed=0)
                    limit = min(data.n_train // n * n, rounds * BATCH * n)
                    run = train(cluster, data.limited(sample_limit=limit, test_limit=100), cfg, transport=transport)
                    per_round = run.records.groupby("round")
                    wall, compute = per_round["round_wall_s"].first(), per_round["wall_s"].max()
                    row = {
                        "repeat": repeat,
                        "policy": policy,
                        "transport": transport,
                        "devices": n,
                        "rounds": len(wall),
                        "round_ms": 1e3 * float(wall.median()),
                        "compute_ms": 1e3 * float(compute.median()),
                        "overhead_ms": 1e3 * float((wall - compute).median()),
                        "mean_round_ms": 1e3 * float(wall.mean()),
                        "host_ms_per_round": 1e3 * float(run.host["train_wall_s"]) / len(wall),
                    }
                    rows.append(row)
                    print(
                        f"[{repeat}] {policy:6s} {transport:9s} {n:2d}: round {row['round_ms']:.2f} ms, "
                        f"overhead {row['overhead_ms']:.2f} ms, mean {row['mean_round_ms']:.2f} ms",
                        flush=True,
                    )
        cluster.client.run(device_scheduling.apply, device_scheduling.DEFAULT)
    host["loadavg_end"] = list(os.getloadavg())
    return {"host": host, "rounds": rounds, "repeats": repeats, "rows": rows, "summary": summarize(rows)}


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per cell and policy, the medians over the repeats; and batch / normal for each measure."""
    measures = ("round_ms", "compute_ms", "overhead_ms", "mean_round_ms", "host_ms_per_round")
    out = []
    for transport, n in CELLS:
        cell: dict[str, Any] = {"transport": transport, "devices": n}
        for policy in POLICIES:
            mine = [r for r in rows if (r["transport"], r["devices"], r["policy"]) == (transport, n, policy)]
            for measure in measures:
                cell[f"{policy}_{measure}"] = statistics.median(r[measure] for r in mine)
        for measure in measures:
            cell[f"batch_over_normal_{measure}"] = cell[f"batch_{measure}"] / cell[f"normal_{measure}"]
        out.append(cell)
    return out


def render_markdown(results: dict[str, Any]) -> str:
    """The summary as a markdown table, with where and how it ran."""
    host = results["host"]
    lines = [
        "# Device scheduling: SCHED_BATCH against the kernel's default",
        "",
        f"{host['date_utc']}, {host['processor']}, {host['cpu_affinity']} CPUs; one cluster of 10 emulated "
        f"devices, LeNet-MLP, batch {BATCH}; {results['repeats']} repeats of {results['rounds']} rounds per cell "
        "and policy, the devices switched between the policies in place, the order alternating. Load average "
        f"{host['loadavg_start'][0]:.1f} at start, {host['loadavg_end'][0]:.1f} at end.",
        "",
        "Round and overhead: medians of the rounds (as `bench_sync.py` part A); mean round and host ms/round "
        "include the tails. Each value is the median over the repeats.",
        "",
        "| path | devices | round ms, normal | round ms, batch | overhead ms, normal | overhead ms, batch "
        "| mean round ms, normal | mean round ms, batch | host ms/round, batch / normal |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in results["summary"]:
        lines.append(
            f"| {c['transport']} | {c['devices']} | {c['normal_round_ms']:.2f} | {c['batch_round_ms']:.2f} "
            f"| {c['normal_overhead_ms']:.2f} | {c['batch_overhead_ms']:.2f} | {c['normal_mean_round_ms']:.2f} "
            f"| {c['batch_mean_round_ms']:.2f} | {c['batch_over_normal_host_ms_per_round']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=90, help="rounds per cell (default %(default)s)")
    parser.add_argument("--repeats", type=int, default=4, help="repeats of every cell and policy (default %(default)s)")
    parser.add_argument("--out-dir", type=Path, default=None, help="default: reports/benchmarks")
    args = parser.parse_args(argv)
    results = run_benchmark(rounds=args.rounds, repeats=args.repeats)
    folder = args.out_dir or reports_dir() / "benchmarks"
    md = render_markdown(results)
    atomic_write_text(folder / "scheduling.json", json.dumps(results, indent=1, sort_keys=True, default=str) + "\n")
    atomic_write_text(folder / "scheduling.md", md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
