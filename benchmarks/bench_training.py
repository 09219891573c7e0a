"""Benchmark: edgelab synchronous training against plain Keras, and what synchronization costs.

A. Throughput on one emulated device. edgelab trains with ``sync_every="epoch"``
   (one Dask round per epoch) and with ``sync_every="batch"`` (one round per
   batch); the baseline is ``model.fit`` on the same samples in this process.
   Target: edgelab epoch-sync throughput >= 0.9 x Keras.
B. Per-round synchronization cost on two devices with ``sync_every="batch"``:
   host wall time per round minus the slowest device's compute, against the
   bytes the round moved, next to what the emulated link would take.

Run ``python benchmarks/bench_training.py --help``; ``benchmarks/README.md``
says what each number means.
"""

from __future__ import annotations

import os
import sys

# Device workers run TensorFlow with one intra-op and one inter-op thread and
# its oneDNN kernels (edgelab.cluster.device_cluster); the baseline here gets the same, read only at TF import.
THREAD_CAP = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1", "OMP_NUM_THREADS": "1"}
if "tensorflow" not in sys.modules:
    os.environ.update(THREAD_CAP)
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from edgelab.cluster.device_cluster import MALLOC_TRIM, DeviceCluster, start_environ  # noqa: E402
from edgelab.common.paths import reports_dir  # noqa: E402
from edgelab.common.results import atomic_write_text  # noqa: E402
from edgelab.data import Dataset, load_dataset  # noqa: E402
from edgelab.models.builtin import MODELS, ModelSpec, build_model, prepare_images  # noqa: E402
from edgelab.runtime.devices import connect  # noqa: E402
from edgelab.training.data_parallel import TrainConfig, TrainRun, train  # noqa: E402

TARGET_RATIO = 0.9  # edgelab epoch-sync samples/s over Keras fit samples/s
BATCH_SIZE = 64  # the paper's batch size
DEFAULT_SAMPLES = 12800  # 200 batches of 64
DEFAULT_TEST_SAMPLES = 1000  # only the per-epoch evaluation uses them; its wall is excluded
DEFAULT_REPEATS = 3
WARMUP_SAMPLES = 256  # unmeasured run per model: traces the 64-sample train step
MB = 1e6  # bytes; decimal, like the link's Mbit/s


def _tf_threads_check() -> dict[str, float]:
    """CPU seconds per wall second of a large matmul: ~1.0 when TF computes on one thread."""
    import tensorflow as tf

    x = tf.random.normal((1024, 1024))
    tf.matmul(x, x).numpy()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(8):
        tf.matmul(x, x).numpy()
    return {"cpu_per_wall": (time.process_time() - cpu0) / (time.perf_counter() - wall0)}


def _worker_env_check() -> dict[str, str | None]:
    return {k: os.environ.get(k) for k in THREAD_CAP} | {MALLOC_TRIM: start_environ(MALLOC_TRIM)}


def _worker_threads_check(cluster: DeviceCluster) -> dict[str, Any]:
    env = cluster.client.run(_worker_env_check)
    ratio = cluster.client.run(_tf_threads_check)
    return {a: {"env": env[a], **ratio[a]} for a in env}


def keras_fit_throughput(model: Any, x: np.ndarray, y: np.ndarray, *, batch_size: int = BATCH_SIZE) -> dict[str, float]:
    """Samples per wall second of one ``model.fit`` epoch over ``x, y`` in this process.

    The model must already have been fitted once (``warm_keras``) so that the
    wall time holds no tracing.
    """
    cpu0, start = time.process_time(), time.perf_counter()
    model.fit(x, y, batch_size=batch_size, epochs=1, shuffle=False, verbose=0)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
    return {
        "samples": int(len(y)),
        "train_s": wall,
        "samples_per_s": len(y) / wall,
        "cpu_s": cpu,
        "samples_per_cpu_s": len(y) / cpu,
    }


def warm_keras(name: str, x: np.ndarray, y: np.ndarray, *, batch_size: int = BATCH_SIZE) -> Any:
    """Build the model edgelab's devices build, and trace its train step with one small fit."""
    model = build_model(ModelSpec(name))
    model.fit(x[: 2 * batch_size], y[: 2 * batch_size], batch_size=batch_size, epochs=1, shuffle=False, verbose=0)
    return model


def edgelab_throughput(cluster: DeviceCluster, dataset: Dataset, cfg: TrainConfig) -> dict[str, Any]:
    """Train once and return samples per host wall second of training, evaluation excluded."""
    run = _train(cluster, dataset, cfg)
    summary = round_costs(run)
    return {
        **summary,
        "samples_per_s": summary["samples"] / summary["train_s"],
        # CPU time of the worker inside its tasks: stretches less than wall when cores are shared.
        "samples_per_cpu_s": summary["samples"] / summary["cpu_s"],
        "total_wall_s": run.host["total_wall_s"],
    }


def round_costs(run: TrainRun) -> dict[str, Any]:
    """Host wall per round, the slowest device's compute wall, and the bytes moved.

    ``overhead_ms`` = (train wall - evaluation wall) / rounds - mean over rounds
    of the slowest task's compute wall (``wall_s``, measured inside the task):
    what the Dask round trip, (de)serialization, scatter, aggregation and the
    worker's set/get of weights add to each round.
    """
    records = run.records
    per_round = records.groupby("round").agg(
        compute_s=("wall_s", "max"),
        bytes_sent=("bytes_sent", "sum"),
        bytes_received=("bytes_received", "sum"),
    )
    rounds = len(per_round)
    train_s = run.host["train_wall_s"] - float(run.evaluations["eval_wall_s"].sum())
    round_ms = 1e3 * train_s / rounds
    compute_ms = 1e3 * float(per_round["compute_s"].mean())
    mb = float((per_round["bytes_sent"] + per_round["bytes_received"]).mean()) / MB
    return {
        "samples": int(records["samples"].sum()),
        "rounds": rounds,
        "train_s": train_s,
        "eval_s": float(run.evaluations["eval_wall_s"].sum()),
        "round_ms": round_ms,
        "compute_ms": compute_ms,
        "overhead_ms": round_ms - compute_ms,
        "mb_per_round": mb,
        "cpu_s": float(records["cpu_s"].sum()),
    }


def _scheduler_task_count(dask_scheduler: Any) -> int:
    return len(dask_scheduler.tasks)


def _train(cluster: DeviceCluster, dataset: Dataset, cfg: TrainConfig, *, timeout_s: float = 30.0) -> TrainRun:
    """``edgelab.training.data_parallel.train``, then wait until the scheduler has forgotten the run's keys.

    So the next measured run does not share the cluster with the release of
    this one's data.
    """
    run = train(cluster, dataset, cfg)
    deadline = time.monotonic() + timeout_s
    while cluster.client.run_on_scheduler(_scheduler_task_count) and time.monotonic() < deadline:
        time.sleep(0.02)
    return run


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in runs))


def _warm_edgelab(
    cluster: DeviceCluster, dataset: Dataset, n_devices: int, models: tuple[str, ...]
) -> dict[str, float]:
    small = dataset.limited(sample_limit=WARMUP_SAMPLES * n_devices, test_limit=WARMUP_SAMPLES)
    walls = {}
    for name in models:
        run = _train(cluster, small, TrainConfig(model=name, n_devices=n_devices, sync_every="epoch"))
        walls[name] = run.host["total_wall_s"]
    return walls


def bench_throughput(dataset: Dataset, *, repeats: int, models: tuple[str, ...] = MODELS) -> dict[str, Any]:
    """Part A: one device, edgelab epoch- and batch-sync against Keras fit, interleaved."""
    x = {m: prepare_images(m, dataset.x_train) for m in models}
    y = np.asarray(dataset.y_train, dtype=np.int64)
    keras_models = {m: warm_keras(m, x[m], y) for m in models}  # type: ignore[arg-type]
    out: dict[str, Any] = {m: {"edgelab_epoch": [], "keras_fit": [], "edgelab_batch": []} for m in models}
    with connect(1, dashboard_address="127.0.0.1:0") as cluster:
        workers = _worker_threads_check(cluster)
        warmup = _warm_edgelab(cluster, dataset, 1, models)
        for rep in range(repeats):
            for m in models:
                epoch_cfg = TrainConfig(model=m, n_devices=1, sync_every="epoch", batch_size=BATCH_SIZE)
                batch_cfg = TrainConfig(model=m, n_devices=1, sync_every="batch", batch_size=BATCH_SIZE)
                # Alternate which side goes first, so drift in host load hits both alike.
                if rep % 2 == 0:
                    out[m]["edgelab_epoch"].append(edgelab_throughput(cluster, dataset, epoch_cfg))
                    out[m]["keras_fit"].append(keras_fit_throughput(keras_models[m], x[m], y))  # type: ignore[arg-type]
                else:
                    out[m]["keras_fit"].append(keras_fit_throughput(keras_models[m], x[m], y))  # type: ignore[arg-type]
                    out[m]["edgelab_epoch"].append(edgelab_throughput(cluster, dataset, epoch_cfg))
                out[m]["edgelab_batch"].append(edgelab_throughput(cluster, dataset, batch_cfg))
                print(
                    f"[A] repeat {rep + 1}/{repeats} {m}: edgelab epoch "
                    f"{out[m]['edgelab_epoch'][-1]['samples_per_s']:.0f}/s, keras "
                    f"{out[m]['keras_fit'][-1]['samples_per_s']:.0f}/s, edgelab batch "
                    f"{out[m]['edgelab_batch'][-1]['samples_per_s']:.0f}/s",
                    flush=True,
                )
    for m in models:
        runs = out[m]
        summary = {k: _median(runs[k], "samples_per_s") for k in ("edgelab_epoch", "keras_fit", "edgelab_batch")}
        ratio = summary["edgelab_epoch"] / summary["keras_fit"]
        paired = [
            e["samples_per_s"] / k["samples_per_s"]
            for e, k in zip(runs["edgelab_epoch"], runs["keras_fit"], strict=True)
        ]
        runs["median_samples_per_s"] = summary
        runs["median_samples_per_cpu_s"] = {
            k: _median(runs[k], "samples_per_cpu_s") for k in ("edgelab_epoch", "keras_fit", "edgelab_batch")
        }
        runs["cpu_ratio"] = (
            runs["median_samples_per_cpu_s"]["edgelab_epoch"] / runs["median_samples_per_cpu_s"]["keras_fit"]
        )
        runs["ratio"] = ratio
        runs["paired_ratios"] = paired
        runs["target_met"] = ratio >= TARGET_RATIO
        runs["batch_sync_overhead_ms_median"] = _median(runs["edgelab_batch"], "overhead_ms")
    return {"models": out, "worker_threads": workers, "warmup_wall_s": warmup}


def bench_sync_cost(dataset: Dataset, *, repeats: int, models: tuple[str, ...] = MODELS) -> dict[str, Any]:
    """Part B: two devices, per-batch sync; overhead per round against bytes per round."""
    out: dict[str, Any] = {m: {"runs": []} for m in models}
    with connect(2, dashboard_address="127.0.0.1:0") as cluster:
        link_bytes_per_s = cluster.profile.link_bytes_per_s
        warmup = _warm_edgelab(cluster, dataset, 2, models)
        for rep in range(repeats):
            for m in models:
                cfg = TrainConfig(model=m, n_devices=2, sync_every="batch", batch_size=BATCH_SIZE)
                out[m]["runs"].append(round_costs(_train(cluster, dataset, cfg)))
                last = out[m]["runs"][-1]
                print(
                    f"[B] repeat {rep + 1}/{repeats} {m}: {last['overhead_ms']:.2f} ms overhead/round, "
                    f"{last['mb_per_round']:.3f} MB/round",
                    flush=True,
                )
    for m in models:
        runs = out[m]["runs"]
        overhead_ms = _median(runs, "overhead_ms")
        mb = _median(runs, "mb_per_round")
        out[m].update(
            overhead_ms=overhead_ms,
            round_ms=_median(runs, "round_ms"),
            compute_ms=_median(runs, "compute_ms"),
            mb_per_round=mb,
            effective_mb_per_s=mb / (overhead_ms / 1e3),
            link_ms=1e3 * mb * MB / link_bytes_per_s,
        )
    fit: dict[str, float] = {}
    if len(models) == 2:
        # Two points: a fixed cost per round plus a cost per MB moved.
        (m0, m1) = models
        slope = (out[m1]["overhead_ms"] - out[m0]["overhead_ms"]) / (out[m1]["mb_per_round"] - out[m0]["mb_per_round"])
        fit = {"ms_per_mb": slope, "fixed_ms": out[m0]["overhead_ms"] - slope * out[m0]["mb_per_round"]}
    return {"models": out, "fit": fit, "link_mbps": link_bytes_per_s * 8 / 1e6, "warmup_wall_s": warmup}


def end_on_sigterm() -> None:
    """Let SIGTERM (``kill``, ``timeout``) end the benchmark as Ctrl-C does: through its ``finally`` blocks.

    Python's default for SIGTERM exits at once, leaving a shaped-host benchmark's namespaces, cgroups and
    processes behind; a background job started by a shell also ignores SIGINT, so SIGTERM is its only stop.
    """

    def _stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _stop)


def host_info() -> dict[str, Any]:
    """Where and when the benchmark ran."""
    import dask
    import distributed
    import keras
    import tensorflow as tf

    return {
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "loadavg_start": list(os.getloadavg()),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "dask": dask.__version__,
        "distributed": distributed.__version__,
        "numpy": np.__version__,
        "thread_cap_env": {k: os.environ.get(k) for k in (*THREAD_CAP, "TF_ENABLE_ONEDNN_OPTS")},
        # Any value of it slows TensorFlow's allocations (see edgelab.cluster.device_cluster): unset on both sides.
        "malloc_trim_threshold": start_environ(MALLOC_TRIM),
        "benchmark_process_tf": _tf_threads_check(),
    }


def _malloc_trim_summary(results: dict[str, Any]) -> str:
    workers = {w["env"].get(MALLOC_TRIM) for w in results["throughput"]["worker_threads"].values()}
    baseline = results["host"].get("malloc_trim_threshold")
    shown = ", ".join(str(v or "unset") for v in sorted(workers, key=str))
    return f"workers {shown}, Keras baseline {baseline or 'unset'}"


def render_markdown(results: dict[str, Any]) -> str:
    """The short report: throughput table, then the sync-cost table."""
    cfg, a, b = results["config"], results["throughput"]["models"], results["sync_cost"]
    prov = results["dataset"]
    lines = [
        "# Training benchmark",
        "",
        f"{results['host']['date_utc']}, {results['host']['processor']}, {results['host']['cpu_count']} CPUs, "
        f"TF {results['host']['tensorflow']}; {cfg['samples']} training samples of {prov['name']} "
        f"(source {prov['source']}), batch {cfg['batch_size']}, median of {cfg['repeats']} runs. "
        "TF capped to 1 intra-op and 1 inter-op thread in the workers and in the Keras baseline. "
        f"{MALLOC_TRIM}: {_malloc_trim_summary(results)}.",
        "",
        "## A. One device: edgelab vs Keras fit (samples/s, host wall of training)",
        "",
        f"| model | edgelab epoch-sync | keras fit | ratio | target >= {TARGET_RATIO} | edgelab batch-sync "
        "| CPU-time ratio |",
        "|---|---:|---:|---:|---|---:|---:|",
    ]
    for m, r in a.items():
        s = r["median_samples_per_s"]
        lines.append(
            f"| {m} | {s['edgelab_epoch']:.0f} | {s['keras_fit']:.0f} | {r['ratio']:.2f} | "
            f"{'yes' if r['target_met'] else 'no'} | {s['edgelab_batch']:.0f} | {r['cpu_ratio']:.2f} |"
        )
    lines += [
        "",
        "CPU-time ratio: the same ratio on samples per CPU second (edgelab: worker CPU inside its "
        "tasks; Keras: this process during fit), which shared cores stretch less than wall time. "
        f"Load average {results['host']['loadavg_start'][0]:.1f} at start, "
        f"{results['host']['loadavg_end'][0]:.1f} at end.",
    ]
    lines += [
        "",
        f"## B. Two devices, per-batch sync: cost per round (link: {b['link_mbps']:.0f} Mbit/s emulated)",
        "",
        "| model | round ms | slowest compute ms | sync overhead ms | MB/round | host MB/s | emulated link ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for m, r in b["models"].items():
        lines.append(
            f"| {m} | {r['round_ms']:.2f} | {r['compute_ms']:.2f} | {r['overhead_ms']:.2f} | "
            f"{r['mb_per_round']:.3f} | {r['effective_mb_per_s']:.0f} | {r['link_ms']:.1f} |"
        )
    if b["fit"]:
        lines += [
            "",
            f"Two-point fit: overhead = {b['fit']['fixed_ms']:.2f} ms + {b['fit']['ms_per_mb']:.2f} ms/MB.",
        ]
    return "\n".join(lines) + "\n"


def run_benchmark(*, samples: int, repeats: int, test_samples: int = DEFAULT_TEST_SAMPLES) -> dict[str, Any]:
    """Run parts A and B and return every number, with provenance and host info."""
    if samples < 2 * BATCH_SIZE:
        raise ValueError(f"samples must be >= {2 * BATCH_SIZE}; received samples={samples}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1; received repeats={repeats}")
    dataset = load_dataset("mnist", sample_limit=samples, test_limit=test_samples)
    host = host_info()
    t0 = time.perf_counter()
    throughput = bench_throughput(dataset, repeats=repeats)
    sync_cost = bench_sync_cost(dataset, repeats=repeats)
    host["loadavg_end"] = list(os.getloadavg())
    host["benchmark_wall_s"] = time.perf_counter() - t0
    return {
        "config": {"samples": samples, "test_samples": test_samples, "repeats": repeats, "batch_size": BATCH_SIZE},
        "dataset": dataset.provenance(),
        "host": host,
        "throughput": throughput,
        "sync_cost": sync_cost,
    }


def write_results(results: dict[str, Any], out_dir: Path | None = None) -> tuple[Path, Path, str]:
    """Write ``training.json`` and ``training.md`` atomically; return their paths and the markdown."""
    folder = out_dir or reports_dir() / "benchmarks"
    md = render_markdown(results)
    json_path, md_path = folder / "training.json", folder / "training.md"
    atomic_write_text(json_path, json.dumps(results, indent=1, sort_keys=True, default=str) + "\n")
    atomic_write_text(md_path, md)
    return json_path, md_path, md


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=DEFAULT_SAMPLES, help="training samples (default %(default)s)")
    parser.add_argument(
        "--repeats", type=int, default=DEFAULT_REPEATS, help="runs per measurement (default %(default)s)"
    )
    parser.add_argument(
        "--test-samples",
        type=int,
        default=DEFAULT_TEST_SAMPLES,
        help="test samples for the excluded per-epoch evaluation",
    )
    parser.add_argument(
        "--out-dir", type=Path, default=None, help="default: $EDGELAB_REPORTS_DIR or reports/, then benchmarks/"
    )
    args = parser.parse_args(argv)
    results = run_benchmark(samples=args.samples, repeats=args.repeats, test_samples=args.test_samples)
    json_path, md_path, md = write_results(results, args.out_dir)
    print(md)
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
