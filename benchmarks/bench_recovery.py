"""Benchmark: a run survives a device killed at any moment, with nothing lost.

The configuration of the issue that found the hangs: 3 emulated Pi 3B devices,
LeNet-MLP, 19,200 MNIST images in shards, synchronization per batch. One
undisturbed run, then ``--kills`` runs with one SIGKILL each, at seeded points
that cover every phase of a run (``edgelab.training.data_parallel.PHASES``). Each run must
finish with the undisturbed final weights, bit for bit, within a time limit
(a run that hangs is reported as such and ends the benchmark).

Figures: runs finished identical / runs; from the kill to the scheduler's
notice, to the device back, to the run going on. Written to
``reports/benchmarks/recovery.json`` and ``recovery.md``.

Run ``python benchmarks/bench_recovery.py --help``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import logging
import platform
import statistics
from pathlib import Path
from typing import Any

from bench_training import end_on_sigterm

from edgelab.cluster.faults import KillSchedule
from edgelab.common.paths import reports_dir
from edgelab.common.results import atomic_write_text
from edgelab.data import load_dataset
from edgelab.runtime.devices import connect
from edgelab.runtime.fleet import RESTART_WAIT_S
from edgelab.training.data_parallel import PHASES, TrainConfig, TrainRun, phase_counts, train

DEFAULT_KILLS = 20
DEFAULT_SAMPLES = 19_200
N_DEVICES = 3
# A run that takes longer than this has hung: an undisturbed run takes ~10 s here, a recovery ~4 s.
RUN_LIMIT_S = 300.0


def one_run(cluster: Any, dataset: Any, cfg: TrainConfig, kills: KillSchedule | None) -> TrainRun:
    """Train once, or raise TimeoutError when the run outlives ``RUN_LIMIT_S`` (it hung)."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    future = pool.submit(train, cluster, dataset, cfg, kills=kills, log=lambda line: print(" ", line, flush=True))
    try:
        return future.result(timeout=RUN_LIMIT_S)
    finally:
        pool.shutdown(wait=False)


def kill_outcome(run: TrainRun, undisturbed: TrainRun) -> dict[str, Any]:
    """What one disturbed run did: the kill, the recovery, and whether the result is the undisturbed one."""
    kill = run.kills.iloc[0].to_dict() if not run.kills.empty else {}
    rec = run.recoveries.iloc[0].to_dict() if not run.recoveries.empty else {}
    return {
        "kill": {k: kill.get(k) for k in ("device", "phase", "at")},
        "detected_in": {k: rec.get(k) for k in ("phase", "at")},
        "identical": run.weights_sha256 == undisturbed.weights_sha256,
        "recoveries": len(run.recoveries),
        "kill_to_detect_s": rec["t"] - kill["t"] if rec else None,
        "device_back_s": rec.get("back_s"),
        "kill_to_resume_s": rec["t_resumed"] - kill["t"] if rec else None,
        "time_lost_s": rec.get("time_lost_s"),
        "run_wall_s": run.host["total_wall_s"],
    }


def run_benchmark(*, kills: int, samples: int, seed: int, shaped: bool = False) -> dict[str, Any]:
    """The undisturbed run, then one run per seeded kill; every number measured.

    ``shaped``: on shaped hosts (``edgelab.cluster.shaped_hosts``, root): real ``dask
    worker`` programs in their own network namespaces behind 100 Mbit/s links,
    each under its nanny, reached only through the scheduler's address.
    """
    if shaped:
        import tempfile

        from edgelab.cluster import shaped_hosts

        with tempfile.TemporaryDirectory(prefix="edgelab-recovery-") as folder:
            spec = shaped_hosts.HostsSpec(devices=N_DEVICES, prefix="elr", subnet="10.216.0.0/24")
            hosts = shaped_hosts.up(spec, folder=Path(folder))
            try:
                with connect(N_DEVICES, scheduler_address=hosts.scheduler_address) as cluster:
                    result = _run_on(cluster, kills=kills, samples=samples, seed=seed)
            finally:
                shaped_hosts.down(folder=Path(folder))
        result["cluster"] = f"shaped hosts: {N_DEVICES} network namespaces, {spec.rate:g} Mbit/s links"
        return result
    with connect(N_DEVICES, dashboard_address="127.0.0.1:0") as cluster:
        result = _run_on(cluster, kills=kills, samples=samples, seed=seed)
    result["cluster"] = f"embedded: {N_DEVICES} emulated devices on loopback"
    return result


def _run_on(cluster: Any, *, kills: int, samples: int, seed: int) -> dict[str, Any]:
    dataset = load_dataset("mnist", sample_limit=samples, test_limit=1000, seed=0)
    cfg = TrainConfig(model="mlp", n_devices=N_DEVICES, worker_data="shard", batch_size=64, seed=0)
    devices = [f"pi3b-{i}" for i in range(N_DEVICES)]
    schedules = KillSchedule.seeded(
        seed, kills, devices=devices, phases=phase_counts(cfg, dataset.n_train), runs_on={"evaluate": devices[0]}
    )
    results: list[dict[str, Any]] = []
    hung = None
    undisturbed = one_run(cluster, dataset, cfg, None)
    print(f"undisturbed: {undisturbed.host['total_wall_s']:.1f} s, weights {undisturbed.weights_sha256[:12]}")
    for i, schedule in enumerate(schedules):
        kill = schedule.kills[0]
        print(f"run {i + 1}/{len(schedules)}: kill {kill.device} in {kill.phase} {kill.at}", flush=True)
        try:
            run = one_run(cluster, dataset, cfg, schedule)
        except concurrent.futures.TimeoutError:
            hung = {"run": i, "kill": vars(kill), "limit_s": RUN_LIMIT_S}
            print(f"  hung: no result within {RUN_LIMIT_S:.0f} s", flush=True)
            break
        results.append(kill_outcome(run, undisturbed))
    return {
        "config": {**cfg.to_dict(), "n_train": dataset.n_train, "data_source": dataset.provenance()["source"]},
        "seed": seed,
        "kills_planned": kills,
        "phases_covered": sorted({r["kill"]["phase"] for r in results}),
        "restart_wait_s": RESTART_WAIT_S,
        "run_limit_s": RUN_LIMIT_S,
        "undisturbed_wall_s": undisturbed.host["total_wall_s"],
        "runs": results,
        "hung": hung,
        "host": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        },
    }


def render_markdown(result: dict[str, Any]) -> str:
    """The figures of a benchmark result as a short page."""
    runs, cfg = result["runs"], result["config"]
    identical = sum(r["identical"] for r in runs)
    resumes = [r["kill_to_resume_s"] for r in runs if r["kill_to_resume_s"] is not None]
    detects = [r["kill_to_detect_s"] for r in runs if r["kill_to_detect_s"] is not None]
    lines = [
        "# Recovery from killed devices",
        "",
        f"{len(runs)} runs with one SIGKILL each ({cfg['n_devices']} devices, {cfg['model']}, "
        f"{cfg['n_train']:,} samples, sync per {cfg['sync_every']}), "
        f"seed {result['seed']}; phases covered: {', '.join(result['phases_covered'])}. "
        f"Cluster: {result.get('cluster', 'embedded')}.",
        "",
        f"- **Runs finished with the undisturbed result, bit for bit: {identical} / {result['kills_planned']}**"
        + (f" (one hung: {result['hung']})" if result["hung"] else ""),
        f"- Kill to the scheduler noticing: median {statistics.median(detects):.2f} s, longest {max(detects):.2f} s"
        if detects
        else "- no recovery recorded",
        f"- Kill to the run going on: median {statistics.median(resumes):.1f} s, longest {max(resumes):.1f} s "
        f"(the worker's restart plus re-sending its shard and warming its model)"
        if resumes
        else "",
        f"- Undisturbed run: {result['undisturbed_wall_s']:.1f} s",
        "",
        "| kill | detected in | identical | kill to detect (s) | device back (s) | kill to resume (s) |",
        "|---|---|---|---|---|---|",
    ]
    for r in runs:
        k, d = r["kill"], r["detected_in"]
        lines.append(
            f"| {k['device']} {k['phase']} {k['at']} | {d['phase']} {d['at']} | {r['identical']} | "
            f"{_f(r['kill_to_detect_s'])} | {_f(r['device_back_s'])} | {_f(r['kill_to_resume_s'])} |"
        )
    return "\n".join(lines) + "\n"


def _f(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def main() -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=DEFAULT_KILLS, help="disturbed runs, one kill each")
    parser.add_argument("--samples", type=int, default=DEFAULT_SAMPLES, help="MNIST training images")
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill points")
    parser.add_argument("--out-dir", type=Path, default=None, help="default: reports/benchmarks")
    parser.add_argument(
        "--shaped", action="store_true", help="on shaped hosts (root): results go to recovery-shaped.{json,md}"
    )
    args = parser.parse_args()
    end_on_sigterm()
    if args.kills < len(PHASES):
        parser.error(f"--kills {args.kills}: at least {len(PHASES)}, one per phase ({', '.join(PHASES)})")
    # Dask logs each kill's aftermath (lost data, restarting worker); the benchmark prints its own lines.
    logging.getLogger("distributed").setLevel(logging.CRITICAL)
    result = run_benchmark(kills=args.kills, samples=args.samples, seed=args.seed, shaped=args.shaped)
    out = args.out_dir or reports_dir() / "benchmarks"
    name = "recovery-shaped" if args.shaped else "recovery"
    atomic_write_text(out / f"{name}.json", json.dumps(result, indent=1, default=str) + "\n")
    page = render_markdown(result)
    atomic_write_text(out / f"{name}.md", page)
    print(page)


if __name__ == "__main__":
    main()
