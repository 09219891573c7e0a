"""Benchmark: the emulated link's time against real bytes over a real rate-limited link.

The same LeNet training (MNIST, 2 devices, batch 64, one synchronous round per
batch) runs side by side on:

1. the embedded emulated cluster, every byte over loopback: host wall per
   round, and the bytes each device moves per round;
2. shaped hosts on this machine (``edgelab.cluster.shaped_hosts``: a network namespace
   per device, its link rate-limited with ``tc`` at the Pi 3B's 100 Mbit/s;
   needs root).

The link's real cost per round is the shaped round's wall minus the loopback
round's. The emulated clock charges each device its bytes over its link
(``edgelab.emulation.timeline``: pull + push); the two devices' links are separate, so a
round costs the slower device's. Latency is left out of that analytic time:
the shaped links have none (no ``tc netem`` here). The ratio analytic / real is
the headline: 1.0 means the emulated link charges what a real link of that rate
costs; below 1, the emulation is optimistic (framing, TCP and Dask's messages
add bytes and round trips the payload count does not).

Run ``python benchmarks/bench_shaped_link.py --help``; results go to
``reports/benchmarks/shaped_link.{json,md}``.
"""

from __future__ import annotations

import os
import sys

from bench_training import THREAD_CAP

if "tensorflow" not in sys.modules:
    os.environ.update(THREAD_CAP)
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from bench_training import end_on_sigterm, host_info, round_costs  # noqa: E402

from edgelab.cluster import shaped_hosts
from edgelab.cluster.device_cluster import DeviceCluster  # noqa: E402
from edgelab.common.paths import reports_dir  # noqa: E402
from edgelab.common.results import atomic_write_text  # noqa: E402
from edgelab.data import Dataset, load_dataset  # noqa: E402
from edgelab.emulation.profiles import get_profile  # noqa: E402
from edgelab.runtime.devices import connect  # noqa: E402
from edgelab.training.data_parallel import TrainConfig, TrainRun, train  # noqa: E402

BATCH_SIZE = 64
DEVICES = 2
MODELS = ("mlp", "cnn")
SUBNET = "10.215.0.0/24"  # not the default shaped cluster's: a user's own is left alone


def _tasks_held(dask_scheduler: Any) -> int:
    return len(dask_scheduler.tasks)


def _train(cluster: DeviceCluster, dataset: Dataset, cfg: TrainConfig, *, timeout_s: float = 30.0) -> TrainRun:
    """Train, then wait until the scheduler has released the run's keys, so runs do not overlap.

    Defined here, not imported: the shaped hosts' scheduler is another process and
    can only run a function it can unpickle, and this script's are sent by value.
    """
    run = train(cluster, dataset, cfg, log=lambda _: None)
    deadline = time.monotonic() + timeout_s
    while cluster.client.run_on_scheduler(_tasks_held) and time.monotonic() < deadline:
        time.sleep(0.02)
    return run


def analytic_link_s(run: TrainRun, rate_bytes_per_s: float) -> float:
    """Mean over rounds of the slowest device's bytes (pulled + pushed) over its own link, in seconds."""
    r = run.records
    per_device = (r["bytes_received"] + r["bytes_sent"]) / rate_bytes_per_s
    return float(per_device.groupby(r["round"]).max().mean())


def measure(cluster: DeviceCluster, dataset: Dataset, *, repeats: int, rate_bytes_per_s: float) -> dict[str, Any]:
    """Per model: the median round wall, compute, bytes and analytic link time over ``repeats`` runs."""
    warm = dataset.limited(sample_limit=4 * BATCH_SIZE * DEVICES, test_limit=64)
    out: dict[str, Any] = {}
    for model in MODELS:
        _train(cluster, warm, TrainConfig(model=model, n_devices=DEVICES, sync_every="epoch"))  # traces the step
        runs = []
        for _ in range(repeats):
            run = _train(cluster, dataset, TrainConfig(model=model, n_devices=DEVICES, batch_size=BATCH_SIZE))
            runs.append({**round_costs(run), "analytic_link_ms": 1e3 * analytic_link_s(run, rate_bytes_per_s)})
        out[model] = {
            "runs": runs,
            **{k: statistics.median(r[k] for r in runs) for k in ("round_ms", "compute_ms", "mb_per_round")},
            "analytic_link_ms": statistics.median(r["analytic_link_ms"] for r in runs),
        }
    return out


def run_benchmark(*, samples: int, repeats: int) -> dict[str, Any]:
    """Loopback first, then the shaped hosts; every number with the host's description."""
    shaped_hosts.check_machine()
    profile = get_profile("pi3b")
    rate = profile.link_bytes_per_s
    dataset = load_dataset("mnist", sample_limit=samples, test_limit=64)
    host = host_info()
    t0 = time.perf_counter()
    with connect(DEVICES, dashboard_address="127.0.0.1:0") as cluster:
        loopback = measure(cluster, dataset, repeats=repeats, rate_bytes_per_s=rate)
    with tempfile.TemporaryDirectory(prefix="edgelab-shaped-bench-") as folder:
        spec = shaped_hosts.HostsSpec(devices=DEVICES, prefix="elb", subnet=SUBNET)
        hosts = shaped_hosts.up(spec, folder=Path(folder))
        try:
            with connect(DEVICES, scheduler_address=hosts.scheduler_address) as cluster:
                shaped = measure(cluster, dataset, repeats=repeats, rate_bytes_per_s=rate)
        finally:
            shaped_hosts.down(folder=Path(folder))
    models = {}
    for m in MODELS:
        real_ms = shaped[m]["round_ms"] - loopback[m]["round_ms"]
        models[m] = {
            "mb_per_round": loopback[m]["mb_per_round"],
            "loopback_round_ms": loopback[m]["round_ms"],
            "shaped_round_ms": shaped[m]["round_ms"],
            "real_link_ms": real_ms,
            "analytic_link_ms": loopback[m]["analytic_link_ms"],
            "analytic_over_real": loopback[m]["analytic_link_ms"] / real_ms if real_ms > 0 else float("nan"),
        }
    host["loadavg_end"] = list(os.getloadavg())
    host["benchmark_wall_s"] = time.perf_counter() - t0
    return {
        "config": {
            "samples": samples,
            "repeats": repeats,
            "devices": DEVICES,
            "batch_size": BATCH_SIZE,
            "link_mbps": profile.link_mbps,
        },
        "dataset": dataset.provenance(),
        "host": host,
        "loopback": loopback,
        "shaped": shaped,
        "models": models,
    }


def render_markdown(results: dict[str, Any]) -> str:
    """The table of the headline numbers."""
    c = results["config"]
    lines = [
        "# The emulated link against a real shaped one",
        "",
        f"LeNet on MNIST, {c['devices']} devices, batch {c['batch_size']}, a synchronous round per batch, "
        f"{c['samples']:,} samples, medians of {c['repeats']} runs; links {c['link_mbps']:g} Mbit/s "
        f"(tc tbf on each host's veth, both directions). Host: {results['host'].get('cpu_count')} CPUs, load "
        f"{results['host'].get('loadavg_start')} -> {results['host'].get('loadavg_end')}.",
        "",
        "| model | MB per round | loopback round ms | shaped round ms | real link ms | analytic link ms | "
        "analytic / real |",
        "|---|---|---|---|---|---|---|",
    ]
    for m, r in results["models"].items():
        lines.append(
            f"| {m} | {r['mb_per_round']:.3f} | {r['loopback_round_ms']:.1f} | {r['shaped_round_ms']:.1f} | "
            f"{r['real_link_ms']:.1f} | {r['analytic_link_ms']:.1f} | {r['analytic_over_real']:.2f} |"
        )
    lines += [
        "",
        "Real link ms = shaped round - loopback round. Analytic = the slower device's payload bytes pulled and "
        "pushed over its link, as the emulated clock charges them, latency left out (the shaped links have none).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=3840, help="training samples: 30 rounds of 2 x 64 (default)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per model and side (default %(default)s)")
    parser.add_argument("--out-dir", type=Path, default=None, help="default: reports/benchmarks/")
    args = parser.parse_args(argv)
    end_on_sigterm()
    if args.samples < 2 * BATCH_SIZE * DEVICES or args.repeats < 1:
        parser.error(f"--samples must be >= {2 * BATCH_SIZE * DEVICES} and --repeats >= 1")
    results = run_benchmark(samples=args.samples, repeats=args.repeats)
    folder = args.out_dir or reports_dir() / "benchmarks"
    md = render_markdown(results)
    atomic_write_text(folder / "shaped_link.json", json.dumps(results, indent=1, sort_keys=True, default=str) + "\n")
    atomic_write_text(folder / "shaped_link.md", md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
