"""Jeon et al.: every stored run read on the emulated clock of its device profile.

Streams are composed by ``edgelab.emulation.stream_clock`` from their measured
stage records with the speed factor of the calibration the runs recorded (the
Pi 4B's assumed nominal rate against this host's measured GEMM rate): one
device model for every mode, nothing fitted to the paper. Accuracy and F1 are
computed from the outputs the devices returned.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from sklearn.metrics import f1_score

from edgelab.common.paths import reports_dir as default_reports_dir
from edgelab.common.results import StoredRun
from edgelab.emulation.profiles import DeviceProfile
from edgelab.emulation.stream_clock import EmulatedStream, compose, stage_contention, without_contention
from edgelab.papers.harness import by_run
from edgelab.papers.jeon.pipeline import ENSEMBLE_PAIRS, MODES, Plan
from edgelab.report import catalog

#: Every id of the document: the notebook renders them all.
JEON_IDS = [i for i in catalog.IDS if i.startswith("jeon/")]


@dataclass
class JeonSummary:
    """What the figures of the jeon items need."""

    streams: pd.DataFrame  # one row per stream run: mode, repeat, emulated and host times, accuracy, F1
    table1: pd.DataFrame  # per mode: medians and ranges over the repeats
    stages: pd.DataFrame  # the partition, with each stage's measured time on the emulated clock
    pipeline: EmulatedStream | None  # the first pipeline stream on the emulated clock (the Gantt chart)
    ensemble: EmulatedStream | None
    latency: pd.DataFrame  # per mode: per-image latency and throughput, one image at a time
    fault: dict[str, Any]
    agreement: dict[str, float]  # pipeline vs single outputs
    speed_factor: float
    calibration: dict[str, Any]
    per_class: pd.DataFrame
    history: pd.DataFrame
    y_true: np.ndarray
    y_pred: np.ndarray
    # Per stage: its CPU per micro-batch in the streams over its CPU with no other device computing.
    contention: dict[str, float] = field(default_factory=dict)
    view: Any = None  # edgelab.papers.jeon.cluster_figures.ClusterView of the cluster the runs used


def _emulate(
    run: StoredRun, profile: DeviceProfile, factor: float, contention: dict[str, float] | None = None
) -> EmulatedStream:
    records = run.tables["records"]
    if contention:
        records = without_contention(records, contention)
    return compose(
        records,
        run.tables["sends"],
        [[tuple(x) for x in chain] for chain in run.summary["branches"]],
        profile=profile,
        speed_factor=factor,
        max_in_flight=int(run.summary["max_in_flight"]),
    )


def predictions(mode: str, run: StoredRun) -> np.ndarray:
    """Predicted classes of a stream: argmax of the softmax, or of the ensemble's ten sigmoid scores."""
    if mode != "ensemble":
        return np.argmax(run.arrays["out0"], axis=1)
    scores = np.zeros((len(run.arrays["out0"]), 10), np.float32)
    for b, pair in enumerate(ENSEMBLE_PAIRS):
        scores[:, list(pair)] = run.arrays[f"out{b}"]
    return np.argmax(scores, axis=1)


def summarize(plan: Plan, runs: list[StoredRun]) -> JeonSummary:
    """Read every stored run of ``plan`` (see the module docstring)."""
    get: dict[tuple[Any, ...], StoredRun | None] = dict(by_run(plan, runs))
    any_stream = next(r for k, r in get.items() if r is not None and k[0] == "stream")
    calibration = any_stream.summary["calibration"]
    factor = float(calibration["speed_factor"])
    profile = plan.profile
    y_true = plan.dataset.y_test
    contention = host_contention(get)
    rows, emulated = [], {}
    for run_id, stored in get.items():
        if stored is None or run_id[0] != "stream":
            continue
        _, mode, repeat = run_id
        emu = _emulate(stored, profile, factor, contention)
        emulated[(mode, repeat)] = emu
        pred = predictions(mode, stored)
        rows.append(
            {
                "mode": mode,
                "repeat": repeat,
                "processing_s": emu.processing_s,
                "uncorrected_s": _emulate(stored, profile, factor).processing_s,
                "host_wall_s": stored.summary["wall_s"],
                "images": emu.images,
                "throughput": emu.throughput,
                "steady_throughput": emu.steady_throughput,
                "bound_throughput": emu.bound_throughput,
                "bottleneck": emu.bottleneck,
                # Mean stages computing at once on the emulated clock (jeon/fig3's C12, judged over the repeats).
                "concurrency": float(emu.timeline["compute_s"].sum() / emu.processing_s),
                "host_cpu_s": float(stored.tables["records"]["cpu_s"].sum()),
                "accuracy": float((pred == y_true).mean()),
                "f1_macro": float(f1_score(y_true, pred, average="macro")),
                "f1_weighted": float(f1_score(y_true, pred, average="weighted")),
            }
        )
    streams = pd.DataFrame(rows)
    table1 = _table1(streams)
    first = get[("stream", "pipeline", 0)]
    pipeline = emulated.get(("pipeline", 0))
    single = get[("stream", "single", 0)]
    stages = _stages(plan, pipeline, first)
    kcs = get[("train", "kcs")]
    return JeonSummary(
        streams=streams,
        table1=table1,
        stages=stages,
        pipeline=pipeline,
        ensemble=emulated.get(("ensemble", 0)),
        latency=_latency(get, profile, factor, contention),
        contention=contention,
        view=_view(get.get(("cluster",))),
        fault=_fault(get.get(("fault",)), first),
        agreement={
            "max_abs_difference": float(np.abs(first.arrays["out0"] - single.arrays["out0"]).max()),
            "same_predictions": bool((predictions("pipeline", first) == predictions("single", single)).all()),
        },
        speed_factor=factor,
        calibration=calibration,
        per_class=get[("augment",)].tables["per_class"],
        history=kcs.tables["history"],
        y_true=y_true,
        y_pred=np.argmax(kcs.arrays["scores"], axis=1),
    )


def _table1(streams: pd.DataFrame) -> pd.DataFrame:
    grouped = streams.groupby("mode")
    out = grouped[
        ["processing_s", "uncorrected_s", "host_wall_s", "throughput", "accuracy", "f1_macro", "f1_weighted"]
    ].median()
    out["processing_min_s"] = grouped["processing_s"].min()
    out["processing_max_s"] = grouped["processing_s"].max()
    out["repeats"] = grouped.size()
    return out.reindex([m for m in MODES if m in out.index])


def _stages(plan: Plan, emu: EmulatedStream | None, run: StoredRun) -> pd.DataFrame:
    frame = plan.cut.to_frame()
    if emu is None:
        return frame
    timeline = emu.timeline
    per_mb = timeline.groupby("stage")["compute_s"].median()
    queue = timeline.groupby("stage")["queue_s"].median()
    records = run.tables["records"]
    cpu = records.groupby("stage")["cpu_s"].median()
    names = [f"stage-{s}" for s in frame["stage"]]
    frame["device"] = [timeline[timeline["stage"] == n]["device"].iloc[0] for n in names]
    frame["compute_s_per_micro_batch"] = [per_mb[n] for n in names]
    frame["time_share"] = frame["compute_s_per_micro_batch"] / frame["compute_s_per_micro_batch"].sum()
    frame["queue_s_median"] = [queue[n] for n in names]
    frame["host_cpu_s_per_micro_batch"] = [cpu[n] for n in names]
    frame["bytes_out_per_micro_batch"] = [float(records[records["stage"] == n]["bytes_out"].median()) for n in names]
    return frame


def host_contention(get: dict[tuple[Any, ...], StoredRun | None]) -> dict[str, float]:
    """Per stage: median CPU per micro-batch in the streams over the same work with no other device computing.

    Separate boards do not share caches; five worker processes on this host's
    two cores do, and their CPU time grows with it (as edgelab.emulation.projection
    measures for Park et al.). A pipeline stage's own cost is measured by the
    ``solo`` run (one micro-batch in flight); an ensemble member's by the
    single-device run of the same network (a member differs only in its last
    layer's width). The clock divides each stage's CPU by its factor; the
    uncorrected times are reported beside.
    """
    streams = pd.concat([r.tables["records"] for k, r in get.items() if r is not None and k[0] == "stream"])
    cpu = streams.groupby("stage")["cpu_s"].median()
    factors: dict[str, float] = {}
    solo = get.get(("solo", "pipeline"))
    if solo is not None:
        factors |= stage_contention(streams, solo.tables["records"])
    if "whole" in cpu.index:
        factors |= {s: float(cpu[s] / cpu["whole"]) for s in cpu.index if s.startswith("member-")}
        factors["whole"] = 1.0
    return factors


def _latency(
    get: dict[tuple[Any, ...], StoredRun | None], profile: DeviceProfile, factor: float, contention: dict[str, float]
) -> pd.DataFrame:
    rows = []
    for mode in ("pipeline", "single"):
        stored = get.get(("latency", mode))
        if stored is None:
            continue
        emu = _emulate(stored, profile, factor, contention)
        t = emu.timeline
        start = t.groupby("micro_batch")["arrive"].min()
        end = t.groupby("micro_batch")["end"].max()
        rows.append(
            {
                "mode": mode,
                "images": emu.images,
                "latency_s_median": float((end - start).median()),
                "throughput": emu.throughput,
                "processing_s": emu.processing_s,
                "host_wall_s": stored.summary["wall_s"],
            }
        )
    return pd.DataFrame(rows)


def _fault(stored: StoredRun | None, reference: StoredRun) -> dict[str, Any]:
    if stored is None:
        return {}
    recoveries = stored.tables["recoveries"]
    return {
        "kills": stored.tables["kills"].to_dict("records"),
        "recoveries": recoveries.to_dict("records"),
        "replayed_micro_batches": stored.summary["replayed"],
        "host_wall_s": stored.summary["wall_s"],
        "outputs_equal_undisturbed": bool(np.array_equal(stored.arrays["out0"], reference.arrays["out0"])),
    }


def _view(stored: StoredRun | None) -> Any:
    """The cluster listings read while the runs ran (``Plan._listing``), as a ``ClusterView``."""
    if stored is None:
        return None
    from edgelab.papers.jeon.cluster_figures import ClusterView

    frames = {k: pd.DataFrame(v) for k, v in stored.summary["frames"].items()}
    return ClusterView(**frames, data_dir=stored.summary["data_dir"], collected=stored.summary["collected"])


def measurements(summary: JeonSummary) -> list[Any]:
    """What the notebook shows of the runs, all of it varying from run to run.

    The clock's speed factor and the host contention divided out; processing time (emulated, median of the
    repeats), accuracy and F1 per mode; the pipeline's stages on the emulated clock; per-image latency; the
    pipeline's outputs against the single device's; the fault run.
    """
    contention = ", ".join(f"{k} {v:.2f}" for k, v in sorted(summary.contention.items()))
    return [
        f"speed factor {summary.speed_factor:.2f}; contention divided out: {contention}",
        summary.table1.round(3),
        summary.stages.round(4),
        summary.latency.round(4),
        f"pipeline vs single outputs: {summary.agreement}",
        f"fault run: { {k: v for k, v in summary.fault.items() if k != 'recoveries'} }",
    ]


def self_check(summary: JeonSummary, reports_dir: str | None = None) -> str:
    """What every run of the notebook must show, whatever its timings (printed in a cell nbval checks).

    Read from the manifest in ``reports_dir`` (default: ``edgelab.common.paths.reports_dir``): every id
    rendered with a verdict (its checks, or why there are none), its files written and its data source; the
    paper's values beside the items that have some; the pipeline's outputs equal to the unsplit model's; and,
    when a fault run was asked for, a stage's device lost mid-stream and recovered with the undisturbed run's
    outputs.
    """
    import json
    from pathlib import Path

    root = Path(reports_dir) if reports_dir else default_reports_dir()
    manifest = json.loads((root / "manifest.json").read_text())["items"]
    entries = {i: manifest[i] for i in JEON_IDS if i in manifest}
    complete = [
        i
        for i, e in entries.items()
        if e["status"] in ("reproduced", "consistent", "differs", "not judged")
        and (e["status"] == "reproduced" or e["why"])
        and (e["verdict"].get("checks") or (e["status"] == "not judged" and e["verdict"].get("reason")))
        and e["files"]
        and all((root / f).is_file() for f in e["files"])
        and e["data_source"].get("source") in ("data_dir", "data_dir_tree", "kaggle_download")
    ]
    shown = all(
        entries.get(i, {}).get("paper_values_shown") for i in ("jeon/table1", "jeon/fig4", "jeon/fig5", "jeon/fig6")
    )
    checks = {c["name"]: c["outcome"] for c in entries.get("jeon/fig3", {}).get("verdict", {}).get("checks", [])}
    lines = [
        f"ids rendered with a verdict, their files and data source: {len(complete)} of {len(JEON_IDS)}",
        f"paper values beside table1, fig4, fig5, fig6: {shown}",
        f"pipeline outputs equal the unsplit model's: {checks.get('outputs equal the unsplit model', 'missing')}",
    ]
    return "\n".join([*lines, _fault_line(summary.fault)])


def _fault_line(fault: dict[str, Any]) -> str:
    if not fault:
        return "fault run: not asked for"
    lost = any(r.get("phase") == "stream" and r.get("resumed") for r in fault["recoveries"])
    resumed = lost and bool(fault["kills"])
    return (
        f"fault run: a stage's device killed, lost mid-stream and the stream resumed: {resumed}; "
        f"outputs equal the undisturbed run's: {fault['outputs_equal_undisturbed']}"
    )
