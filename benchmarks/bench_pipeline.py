"""Benchmark: pipelined inference against its bound, and against plain single-process ``predict``.

Jeon's MobileNetV2 (157 layers, their 27/27/36/53/14 split) on 5 emulated
Pi 4B devices, the PlantVillage validation images in micro-batches of 32,
at most 8 in flight. Measured side by side, ``--repeats`` times interleaved:

* A. emulated time: the pipeline's steady-state throughput over the bound of
  its slowest resource (target >= 0.9);
* B. host wall time: images/s of the pipelined run (first input sent to last
  output received, five worker processes on this host's cores) over images/s
  of ``model.predict`` on the whole model in this process.

Written to ``reports/benchmarks/pipeline.json`` and ``pipeline.md``.
Run ``python benchmarks/bench_pipeline.py --help``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from edgelab.common.paths import reports_dir
from edgelab.common.results import atomic_write_text
from edgelab.data import load_dataset
from edgelab.emulation.profiles import calibrate, get_profile
from edgelab.emulation.stream_clock import compose
from edgelab.models.mobilenet import flat_mobilenet_v2
from edgelab.models.transfer import preprocess
from edgelab.pipeline.partition import jeon_cuts, partition, stage_model
from edgelab.pipeline.stream import Placement, stream
from edgelab.runtime.devices import connect

TARGET = 0.9


def run_benchmark(*, image_size: int, repeats: int, micro_batch: int, max_in_flight: int) -> dict[str, Any]:
    """Measure A and B side by side; every raw number in the result."""
    import keras

    data = load_dataset("plantvillage_tomato", image_size=image_size)
    x = preprocess(data.x_test)
    keras.utils.set_random_seed(0)
    model = flat_mobilenet_v2(10, image_size=image_size)
    cut = partition(model, cuts=list(jeon_cuts(model)))
    stages = {f"stage-{s.index}": stage_model(model, s) for s in cut.stages}
    profile = get_profile("pi4b")
    factor = calibrate(profile).speed_factor
    model.predict(x[:micro_batch], verbose=0)  # trace once, as the devices do when they load a stage
    rows = []
    with connect(5, profile="pi4b", dashboard_address="127.0.0.1:0") as cluster:
        placement = Placement.pipeline(list(stages), cluster.devices)
        for repeat in range(repeats):
            result = stream(cluster, placement, stages, x, micro_batch=micro_batch, max_in_flight=max_in_flight)
            chains = [list(c) for c in placement.branches]
            emu = compose(
                result.records, result.sends, chains, profile=profile, speed_factor=factor, max_in_flight=max_in_flight
            )
            start = time.perf_counter()
            model.predict(x, batch_size=micro_batch, verbose=0)
            predict_s = time.perf_counter() - start
            rows.append(
                {
                    "repeat": repeat,
                    **emu.to_dict(),
                    "pipeline_wall_s": result.wall_s,
                    "pipeline_wall_images_per_s": len(x) / result.wall_s,
                    "predict_wall_s": predict_s,
                    "predict_images_per_s": len(x) / predict_s,
                }
            )
    steady = statistics.median(r["steady_over_bound"] for r in rows)
    wall = statistics.median(r["pipeline_wall_images_per_s"] / r["predict_images_per_s"] for r in rows)
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "host": {"platform": platform.platform(), "cpus": os.cpu_count(), "load": os.getloadavg()},
        "dataset": data.provenance(),
        "images": len(x),
        "image_size": image_size,
        "micro_batch": micro_batch,
        "max_in_flight": max_in_flight,
        "speed_factor": factor,
        "partition": cut.to_dict(),
        "runs": rows,
        "A_steady_over_bound_median": steady,
        "A_target": TARGET,
        "A_met": steady >= TARGET,
        "B_wall_pipeline_over_predict_median": wall,
    }


def render_markdown(result: dict[str, Any]) -> str:
    """The benchmark's page."""
    lines = [
        "# Pipelined inference (Jeon's 5-stage MobileNetV2 on 5 emulated Pi 4B)",
        "",
        f"{result['images']} PlantVillage validation images at {result['image_size']} px, micro-batches of "
        f"{result['micro_batch']}, at most {result['max_in_flight']} in flight; {len(result['runs'])} repeats; "
        f"{result['date']}; host {result['host']['platform']}, {result['host']['cpus']} CPUs.",
        "",
        "| repeat | emulated steady img/s | bound img/s | steady/bound | bottleneck | pipeline wall img/s | "
        "predict wall img/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result["runs"]:
        lines.append(
            f"| {r['repeat']} | {r['steady_throughput']:.1f} | {r['bound_throughput']:.1f} | "
            f"{r['steady_over_bound']:.3f} | {r['bottleneck']} | {r['pipeline_wall_images_per_s']:.1f} | "
            f"{r['predict_images_per_s']:.1f} |"
        )
    met = "met" if result["A_met"] else "NOT met"
    lines += [
        "",
        f"- A. emulated steady-state throughput / bound: **{result['A_steady_over_bound_median']:.3f}** "
        f"(target >= {result['A_target']}: {met}).",
        f"- B. host wall throughput, pipeline / single-process predict: "
        f"**{result['B_wall_pipeline_over_predict_median']:.2f}**. The pipeline's five device processes (one "
        f"TensorFlow thread each) share this host's {result['host']['cpus']} cores, so at most that many stages "
        "compute at once, and every micro-batch crosses Dask five times; `predict` runs the whole model in one "
        "process on every core. On separate boards all five stages compute at once (A).",
        "- The bound divides by the slowest resource's *median* time per micro-batch, so a stream whose slow "
        "micro-batches are rare can come out slightly above it.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    """Parse arguments, run, write ``pipeline.json`` and ``pipeline.md``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image-size", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--micro-batch", type=int, default=32)
    parser.add_argument("--max-in-flight", type=int, default=8)
    parser.add_argument("--out-dir", type=Path, default=None)
    args = parser.parse_args()
    result = run_benchmark(
        image_size=args.image_size, repeats=args.repeats, micro_batch=args.micro_batch, max_in_flight=args.max_in_flight
    )
    out = args.out_dir or reports_dir() / "benchmarks"
    atomic_write_text(out / "pipeline.json", json.dumps(result, indent=1, default=str) + "\n")
    page = render_markdown(result)
    atomic_write_text(out / "pipeline.md", page)
    print(page)


if __name__ == "__main__":
    main()
