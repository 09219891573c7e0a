"""The survey's model compression (qiao/method-compression): bytes, accuracy and latency stage by stage.

Left: a waterfall of the model's bytes through Deep Compression's three
stages at the headline sparsity, each bar labelled with the stage's test
accuracy and its latency per image on the emulated Pi. Middle and right: the
sparsity sweep, bytes and accuracy of each stage against the fraction of
weights pruned. The survey gives no numbers: its one value, that Deep
Compression is a 3-stage pipeline, is checked on the pipeline as built
(``STRUCTURE``), so the item is at best "consistent"; bytes, accuracy and
latency show what each stage buys here, and are not judged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from edgelab.papers.qiao import compression as exp
from edgelab.report.manifest import ReportItem
from edgelab.report.reference import load_reference
from edgelab.report.style import data_source, markdown_table, save_figure, save_table
from edgelab.report.verdict import Basis, Noise, Verdict, decide, holds

ID = "qiao/method-compression"
CLOCK = (
    "emulated device time: each model run in the device's Dask worker by a one-thread interpreter, one image per "
    "invoke; the thread's CPU time per image after warm-up times the calibration's speed factor (host single-thread "
    "float32 GEMM rate / the device's assumed rate; int8 kernels are scaled by the same float factor)"
)
STAGE_COLOURS = {"float32": "C7", "pruned": "C0", "int8": "C2", "entropy": "C3"}


def draw(stages: pd.DataFrame, sweep: pd.DataFrame, plan: exp.Plan) -> Any:
    """The waterfall of bytes at the headline sparsity and the sweep's bytes and accuracy."""
    import matplotlib.pyplot as plt

    p = plan.params
    fig, (fall, size, acc) = plt.subplots(1, 3, figsize=(16, 4.8), gridspec_kw={"width_ratios": [1.5, 1, 1]})
    kb = stages["bytes"] / 1000
    previous = kb.shift(fill_value=kb.iloc[0])
    for i, (row, top, before) in enumerate(zip(stages.itertuples(), kb, previous, strict=True)):
        fall.bar(i, top, color=STAGE_COLOURS[row.stage], width=0.6)
        if top < before:  # what the stage removed, hatched above the bar
            fall.bar(i, before - top, bottom=top, color="none", edgecolor="grey", hatch="//", width=0.6)
        fall.annotate(
            f"{top:,.0f} kB ({row.smaller:.1f}x)\nacc {row.accuracy:.1%}\n{row.device_ms_per_image:.2f} ms/image",
            (i, max(top, before)), ha="center", va="bottom", fontsize=8, xytext=(0, 3), textcoords="offset points",
        )  # fmt: skip
    fall.set_xticks(range(len(stages)), [exp.STAGE_LABELS[s].replace(", ", ",\n").replace(" + ", " +\n")
                                         for s in stages["stage"]], fontsize=7)  # fmt: skip
    fall.set(ylabel="model bytes (kB)", title=f"stage by stage, sparsity {p.headline_sparsity:g}")
    fall.set_ylim(0, kb.max() * 1.3)
    for stage in ("pruned", "int8", "entropy"):
        if f"{stage}_bytes" in sweep:
            size.semilogy(sweep["sparsity"], sweep[f"{stage}_bytes"] / 1000, "-o", color=STAGE_COLOURS[stage],
                          label=exp.STAGE_LABELS[stage])  # fmt: skip
            acc.plot(sweep["sparsity"], sweep[f"{stage}_accuracy"], "-o", color=STAGE_COLOURS[stage],
                     label=exp.STAGE_LABELS[stage])  # fmt: skip
    for axis in (size, acc):
        base = sweep["float32_bytes"] / 1000 if axis is size else sweep["float32_accuracy"]
        axis.axhline(base.iloc[0], color=STAGE_COLOURS["float32"], linestyle="--", label="float32, unpruned")
        axis.set_xlabel("sparsity (fraction of kernel weights zeroed)")
        axis.legend(fontsize=7)
    size.set(ylabel="model bytes (kB, log)", title="sparsity sweep: bytes")
    acc.set(ylabel="test accuracy", title="sparsity sweep: accuracy")
    fig.suptitle(
        f"qiao/method-compression: LeNet-5 on MNIST ({plan.dataset.source}), latency on an emulated {p.device}"
    )
    fig.tight_layout()
    return fig


def compression_verdict(plan: exp.Plan, n_stages: int) -> Verdict:
    """The survey's "3-stage pipeline" against the stages run after the float model (structural)."""
    p = plan.params
    ran = [s for s in p.stages if s != "float32"]
    names = ", ".join(exp.STAGE_LABELS[s] for s in ran) or "none"
    rule = f"the pipeline has the survey's {n_stages} stages: pruning, quantization, Huffman (entropy) coding"
    if len(ran) < n_stages:
        check = holds(
            f"{n_stages} stages",
            None,
            f"{len(ran)} stage(s) run: {names}",
            rule,
            basis=Basis.STRUCTURE,
            note="the run stopped before the last stage (`stages` is a first part of the pipeline)",
            undecided="too small",
        )
    else:
        check = holds(f"{n_stages} stages", len(ran) == n_stages, f"{len(ran)} stages run: {names}", rule,
                      basis=Basis.STRUCTURE)  # fmt: skip
    choices = [
        f"the model: edgelab's LeNet-5 on MNIST, {p.epochs} epoch(s) of SGD at {p.learning_rate}",
        f"pruning: by magnitude, every Conv2D and Dense kernel, fine-tuned {p.fine_tune_epochs} epoch(s) with the "
        "mask held",
        "quantization: full-int8 post-training by the TensorFlow Lite converter (not Han et al.'s k-means "
        "weight sharing and retraining)",
        "entropy coding: DEFLATE (zlib level 9: LZ77, then Huffman) of the int8 flatbuffer",
        f"latency: one image per invoke on an emulated {p.device}, one thread",
    ]
    noise = Noise.none("the one check is on the pipeline as built; bytes, accuracy and latency are not judged")
    return decide([check], fitted=[], predicted=[], noise=noise, choices=choices)


def reduction(plan: exp.Plan) -> str:
    """How the run is smaller than the full profile's (the survey gives no size)."""
    p, d, full = plan.params, plan.dataset, exp.FULL_PROFILE
    parts = []
    if p.train_samples is not None:
        parts.append(f"{d.n_train:,} training and {d.n_test:,} test digits of all MNIST")
    if p.epochs < full["epochs"] or p.fine_tune_epochs < full["fine_tune_epochs"]:
        parts.append(f"{p.epochs} epoch(s) and {p.fine_tune_epochs} of fine-tuning of {full['epochs']} and "
                     f"{full['fine_tune_epochs']}")  # fmt: skip
    if len(p.sparsities) < len(full["sparsities"]):
        parts.append(f"sparsities {list(p.sparsities)} of {full['sparsities']}")
    if p.latency_images < full["latency_images"] or p.latency_repeats < full["latency_repeats"]:
        parts.append(f"{p.latency_repeats} timings of {p.latency_images} images of {full['latency_repeats']} of "
                     f"{full['latency_images']}")  # fmt: skip
    return "; ".join(parts)


def render_report(
    root: Path, plan: exp.Plan, summary: exp.CompressionSummary, *, notebook: str, parameters: dict[str, Any]
) -> list[ReportItem]:
    """The notebook's items (``edgelab.papers.notebook.report``): ``render``."""
    return render(root, plan, summary.stages, summary.sweep, summary.stored, notebook=notebook, parameters=parameters)


def render(
    root: Path,
    plan: exp.Plan,
    stages: pd.DataFrame,
    sweep: pd.DataFrame,
    runs: list[Any],
    *,
    notebook: str,
    parameters: dict[str, Any],
) -> list[ReportItem]:
    """Write the figure and its tables; return the manifest entry."""
    p = plan.params
    png = save_figure(draw(stages, sweep, plan), ID, root=root)
    summary = runs[0].summary
    calibration, data = summary["calibration"], plan.dataset.provenance()
    paper = load_reference("qiao/prose-compression")
    n_stages = int(paper["value"].iloc[0])
    shown = stages.assign(
        accuracy=stages["accuracy"].round(4),
        smaller=stages["smaller"].round(2),
        device_ms_per_image=stages["device_ms_per_image"].round(3),
        spread_ms=stages["spread_ms"].round(3),
        device_load_ms=stages["device_load_ms"].round(2),
    )
    md = [
        f"# {ID}: Deep Compression's {n_stages} stages on LeNet-5",
        "",
        f"The survey's only value: Deep Compression is a {n_stages}-stage pipeline (pruning, quantization, Huffman "
        f"coding; `qiao/prose-compression`). Here: edgelab's LeNet-5 trained {p.epochs} epoch(s) on "
        f"{plan.dataset.n_train} MNIST digits ({data['source']}), scored on {plan.dataset.n_test} test digits; "
        f"every Conv2D and Dense kernel pruned by magnitude and fine-tuned {p.fine_tune_epochs} epoch(s) with the "
        f"mask held; full-int8 post-training quantization by the TensorFlow Lite converter (activation ranges from "
        f"{p.representative_samples} training images); the int8 flatbuffer coded by DEFLATE (zlib level "
        "9: LZ77, then Huffman). Not Han et al.'s recipe: their quantization shares weights by k-means and retrains.",
        "",
        f"Stage by stage at sparsity {p.headline_sparsity:g} (`smaller`: times fewer bytes than float32; "
        f"latency on an emulated {p.device}, median of {p.latency_repeats} timings of {p.latency_images} images; "
        f"runtime: {summary['runtime']}, one thread):",
        "",
        markdown_table(shown),
        "",
        "Pruned weights are still stored and computed densely: the pruned stage's bytes fall only once zipped, and "
        "its latency is the float model's. The entropy-coded model is decoded once when loaded (in its load time); "
        "it then runs as the int8 model.",
        "",
        "The sweep (each stage's bytes and accuracy at each sparsity; the int8 weight symbols' Shannon bound, an "
        "optimal Huffman code of them, and DEFLATE of them alone):",
        "",
        markdown_table(sweep.round(4).astype(object)),
        "",
        f"Calibration: host {calibration['host_gflops']} GFLOPS against {calibration['device_gflops']} for the "
        f"{p.device} ({calibration['device_gflops_source']}), speed factor "
        f"{calibration['speed_factor']:.1f}. The float factor also scales the int8 kernels: int8 speed-ups on a "
        "Cortex-A53's NEON and on this host's AVX2 need not match.",
    ]
    first, last = stages.iloc[0], stages.iloc[-1]
    byte_chain = " -> ".join(f"{b:,}" for b in stages["bytes"])
    accuracy_chain = " -> ".join(f"{a:.3f}" for a in stages["accuracy"])
    result = compression_verdict(plan, n_stages)
    md += [
        "",
        f"Measured on LeNet-5 at sparsity {p.headline_sparsity:g} (the survey gives no sizes or accuracies: not "
        f"judged): bytes {byte_chain} ({last['smaller']:.1f}x smaller), accuracy {accuracy_chain}, {p.device} "
        f"latency {first['device_ms_per_image']:.2f} -> {last['device_ms_per_image']:.2f} ms/image.",
        "",
        result.markdown(),
    ]
    files = [png, *save_table(sweep, "\n".join(md) + "\n", ID, root=root)]
    return [
        ReportItem.from_verdict(
            ID,
            files,
            result,
            data_source=data_source(data),
            clock=CLOCK,
            paper_values_shown=True,
            notebook=notebook,
            parameters=parameters,
            reduction=reduction(plan),
        )
    ]
