"""Benchmark: a federated round as the devices grow from 10 to 10,000, edgelab beside Flower's simulation engine.

The same work on every side: federated averaging of the seeded LeNet-MLP
(SGD 0.05) over the 60,000 MNIST training digits cut into iid shards, one
shard per device, one local epoch of batch 32 per round, samples-weighted
averaging, ``--rounds`` rounds. The total work of a round is the same at
every size (60,000 digits): what grows with the devices is the cost of
having them. Each side runs in a fresh process of its own, one at a time
(nothing of one side alive while the other is timed), in interleaved order:

* ``edgelab-virtual``: ``sides/edgelab_fedavg.py --hosting virtual
  --workers 2``: two worker processes (one per core), each hosting half the
  devices (``edgelab.runtime.virtual_host``);
* ``edgelab-process``: a worker process per device (the isolation kills and
  memory limits need); only where the host has the memory (``--process-max``);
* ``flower-compiled``: Flower's simulation engine with one CPU per client
  (two actors on two cores), each client training its round in the compiled
  loop edgelab's devices run, on the batches edgelab's device of the same
  index trains (``sides/flower_fedavg.py --client-loop compiled``);
* ``flower-fit``: the same with Keras ``fit`` per round, as Flower's own
  examples train.

Every side's processes run one TensorFlow thread each under the default
scheduling policy. Reported per side and size: seconds per round (median of
rounds 2..R: steady state), start-up (process start to the end of round 1:
with set-up), the peak memory of the side's whole process tree (sampled
every 0.2 s) and the final accuracy on the 10,000 test digits.

    EDGELAB_DATA_DIR=../shared/data python benchmarks/bench_scale.py     # 10, 100, 1,000, 10,000 devices
    python benchmarks/bench_scale.py --devices 10 100 --repeats 1 --out-dir /tmp/x
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
import importlib.util  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import psutil  # noqa: E402
from bench_sync import weights_accuracy  # noqa: E402
from bench_training import host_info  # noqa: E402

from edgelab.common.errors import ConfigError  # noqa: E402
from edgelab.common.paths import reports_dir  # noqa: E402
from edgelab.common.results import atomic_write_text  # noqa: E402
from edgelab.data import Dataset, load_dataset  # noqa: E402

SIDES_DIR = Path(__file__).resolve().parent / "sides"
SIDES = ("edgelab-virtual", "edgelab-process", "flower-compiled", "flower-fit")
DEVICES = (10, 100, 1000, 10000)
SAMPLES = 60000
BATCH = 32
MEMORY_SAMPLE_S = 0.2


def check_sides(sides: list[str]) -> None:
    """Fail before any run when a side is unknown or Flower is asked for and not installed."""
    for side in sides:
        if side not in SIDES:
            raise ConfigError("sides", side, f"any of {', '.join(SIDES)}")
        if side.startswith("flower") and importlib.util.find_spec("flwr") is None:
            raise ConfigError(
                "sides", side, "a side whose package is installed: flwr is missing (pip install -e '.[bench]')"
            )


def batch_for(devices: int) -> int:
    """Batch 32, or a device's whole shard where it is smaller (10,000 devices hold 6 digits each)."""
    return min(BATCH, SAMPLES // devices)


def _command(side: str, devices: int, rounds: int, out: str) -> list[str]:
    batch = batch_for(devices)
    common = ["--clients", str(devices), "--samples", str(SAMPLES), "--rounds", str(rounds), "--batch", str(batch)]
    if side.startswith("edgelab"):
        hosting = ["--hosting", "virtual", "--workers", "2"] if side == "edgelab-virtual" else []
        return [sys.executable, str(SIDES_DIR / "edgelab_fedavg.py"), *common, *hosting, "--out", out]
    loop = side.removeprefix("flower-")
    return [sys.executable, str(SIDES_DIR / "flower_fedavg.py"), *common, "--client-loop", loop, "--out", out]


def _tree_rss(root: psutil.Process) -> int:
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            total += proc.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


def run_side(side: str, devices: int, rounds: int, eval_data: Dataset, timeout_s: float) -> dict[str, Any]:
    """One side's run in a fresh process: its round times, start-up, peak memory of its processes, accuracy."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "weights.npz")
        proc = subprocess.Popen(  # noqa: S603 - our own scripts
            _command(side, devices, rounds, out), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        peak = [0]
        done = threading.Event()

        def sample() -> None:
            root = psutil.Process(proc.pid)
            while not done.wait(MEMORY_SAMPLE_S):
                try:
                    peak[0] = max(peak[0], _tree_rss(root))
                except psutil.NoSuchProcess:
                    return

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        finally:
            done.set()
            if proc.poll() is None:
                proc.kill()
        sampler.join()
        if proc.returncode:
            raise RuntimeError(f"{side} at {devices} devices failed ({proc.returncode}):\n{stderr[-3000:]}")
        lines = [line for line in stdout.splitlines() if line.startswith("{")]
        if not lines or not os.path.exists(out):
            raise RuntimeError(f"{side} at {devices} devices left no result:\n{stderr[-3000:]}")
        result = json.loads(lines[-1])
        result["accuracy"] = weights_accuracy(out, eval_data)
    result.update(
        side=side,
        devices=devices,
        batch=batch_for(devices),
        round1_s=result["round_s"][0],
        later_round_s=statistics.median(result["round_s"][1:]),
        peak_memory_gb=peak[0] / 1e9,
    )
    return result


def run_benchmark(
    sides: list[str], devices: list[int], *, rounds: int, repeats: int, process_max: int, timeout_s: float
) -> dict[str, Any]:
    """Every (side, devices) cell ``repeats`` times, the sides' order reversed every other repeat."""
    check_sides(sides)
    # Every side loads the same digits (EDGELAB_DATA_DIR): refused here, before any run, when they are not there.
    eval_data = load_dataset("mnist", sample_limit=SAMPLES)
    runs: list[dict[str, Any]] = []
    for n in devices:
        cell_sides = [s for s in sides if s != "edgelab-process" or n <= process_max]
        for rep in range(repeats):
            for side in cell_sides if rep % 2 == 0 else cell_sides[::-1]:
                try:
                    result = run_side(side, n, rounds, eval_data, timeout_s)
                except (RuntimeError, subprocess.TimeoutExpired) as exc:
                    result = {"side": side, "devices": n, "error": str(exc).splitlines()[0]}
                    print(f"[scale] {n} devices, {side}: {result['error']}", flush=True)
                else:
                    print(
                        f"[scale] {n} devices, {side} (repeat {rep + 1}/{repeats}): "
                        f"{result['later_round_s']:.2f} s/round, "
                        f"start-up {result['to_round1_end_s']:.1f} s, peak {result['peak_memory_gb']:.2f} GB, "
                        f"accuracy {result['accuracy']:.4f}",
                        flush=True,
                    )
                runs.append(result)
    return {"host": host_info(), "rounds": rounds, "repeats": repeats, "samples": SAMPLES, "batch": BATCH, "runs": runs}


def summarize(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Medians over repeats per (devices, side); failed runs counted apart."""
    rows = []
    cells = sorted({(r["devices"], r["side"]) for r in results["runs"]}, key=lambda c: (c[0], SIDES.index(c[1])))
    for n, side in cells:
        ok = [r for r in results["runs"] if r["devices"] == n and r["side"] == side and "error" not in r]
        failed = [r for r in results["runs"] if r["devices"] == n and r["side"] == side and "error" in r]
        row: dict[str, Any] = {"devices": n, "side": side, "batch": batch_for(n)}
        row |= {"runs": len(ok), "failed": len(failed)}
        if failed:
            row["error"] = failed[0]["error"]
        for key in ("later_round_s", "round1_s", "to_round1_end_s", "peak_memory_gb", "accuracy"):
            row[key] = statistics.median(r[key] for r in ok) if ok else float("nan")
        rows.append(row)
    by = {(r["devices"], r["side"]): r for r in rows}
    for row in rows:
        peer = by.get((row["devices"], "flower-compiled"))
        if row["side"] == "edgelab-virtual" and peer and peer["runs"] and row["runs"]:
            row["flower_compiled_over_edgelab"] = peer["later_round_s"] / row["later_round_s"]
            row["startup_ratio"] = peer["to_round1_end_s"] / row["to_round1_end_s"]
    return rows


def write_results(results: dict[str, Any], out_dir: Path | None = None) -> Path:
    """``scale.json``, ``scale.md`` and ``scale.png`` under ``reports/benchmarks`` (or ``out_dir``)."""
    out_dir = out_dir or reports_dir() / "benchmarks"
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = summarize(results)
    results = {**results, "summary": rows}
    atomic_write_text(out_dir / "scale.json", json.dumps(results, indent=1, default=str) + "\n")
    _plot(rows, out_dir / "scale.png")
    host = results["host"]
    lines = [
        "# A federated round as the devices grow (`benchmarks/bench_scale.py`)",
        "",
        f"FedAvg, LeNet-MLP, {results['samples']:,} MNIST digits in iid shards, batch {results['batch']} (or the "
        "whole shard where smaller), one local "
        f"epoch per round, {results['rounds']} rounds, median of {results['repeats']} interleaved repeat(s) per cell; "
        f"host: {host.get('cpu_count', '?')} cores, 1-minute load at the start {host['loadavg_start'][0]:.1f}. "
        "s/round = median of rounds 2..R (steady state); start-up = process start to the end of round 1 "
        "(with set-up); memory = peak RSS of the side's whole "
        "process tree. ![scale](scale.png)",
        "",
        "| devices | batch | side | s/round | round 1 s | start-up s | peak GB | accuracy | Flower compiled / edgelab "
        "|",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        ratio = r.get("flower_compiled_over_edgelab")
        if r["runs"] == 0:
            lines.append(f"| {r['devices']:,} | {r['batch']} | {r['side']} | failed: {r.get('error', '')} | | | | | |")
            continue
        lines.append(
            f"| {r['devices']:,} | {r['batch']} | {r['side']} | {r['later_round_s']:.2f} | {r['round1_s']:.2f} | "
            f"{r['to_round1_end_s']:.1f} | {r['peak_memory_gb']:.2f} | {r['accuracy']:.4f} | "
            f"{'' if ratio is None else f'{ratio:.2f}x'} |"
        )
    atomic_write_text(out_dir / "scale.md", "\n".join(lines) + "\n")
    return out_dir / "scale.md"


def _plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from edgelab.report.style import save_png

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for side in SIDES:
        mine = [r for r in rows if r["side"] == side and r["runs"]]
        if not mine:
            continue
        n = [r["devices"] for r in mine]
        for ax, key in zip(axes, ("later_round_s", "to_round1_end_s", "peak_memory_gb"), strict=True):
            ax.plot(n, [r[key] for r in mine], marker="o", label=side)
    for ax, label in zip(
        axes, ("s per round (rounds 2..R)", "start-up to round 1's end, s", "peak memory, GB"), strict=True
    ):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("devices")
        ax.set_ylabel(label)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sides", nargs="+", default=list(SIDES), choices=SIDES)
    parser.add_argument("--devices", nargs="+", type=int, default=list(DEVICES))
    parser.add_argument("--rounds", type=int, default=4, help="rounds per run (default %(default)s)")
    parser.add_argument("--repeats", type=int, default=2, help="interleaved repeats (default %(default)s)")
    parser.add_argument("--process-max", type=int, default=10, help="most devices edgelab-process runs (memory)")
    parser.add_argument("--timeout-s", type=float, default=1800.0, help="longest one run may take")
    parser.add_argument("--out-dir", type=Path, default=None, help="default: reports/benchmarks")
    args = parser.parse_args(argv)
    for name in ("rounds", "repeats"):
        if getattr(args, name) < (2 if name == "rounds" else 1):
            raise ConfigError(name, getattr(args, name), "at least 2 rounds (round 1 is set-up) / 1 repeat")
    results = run_benchmark(
        args.sides,
        args.devices,
        rounds=args.rounds,
        repeats=args.repeats,
        process_max=args.process_max,
        timeout_s=args.timeout_s,
    )
    print(write_results(results, args.out_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
