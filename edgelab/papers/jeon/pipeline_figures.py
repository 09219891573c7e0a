"""Jeon et al.: Table 1, the pipeline (Figure 3), the ensemble (Figure 11) and the stated arithmetic.

Times are emulated Pi 4B device time (``edgelab.papers.jeon.summary``),
one device model for every mode, nothing fitted to the paper. Each item gets
its verdict from ``edgelab.report.verdict``; ``render_all`` also renders the cluster
listings (``jeon_cluster``) and the data and training items (``jeon_data``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from edgelab.emulation.stream_clock import speedup_bound
from edgelab.models.mobilenet import layer_count_check
from edgelab.papers.jeon import cluster_figures as jeon_cluster
from edgelab.papers.jeon import data_figures as jeon_data
from edgelab.papers.jeon.pipeline import ENSEMBLE_PAIRS, Plan
from edgelab.papers.jeon.summary import JEON_IDS, JeonSummary
from edgelab.pipeline.partition import JEON_STAGE_SIZES
from edgelab.report import verdict as policy
from edgelab.report.manifest import ReportItem
from edgelab.report.reference import load_reference
from edgelab.report.style import markdown_table, save_figure, save_table
from edgelab.report.verdict import Basis, Check, Noise, decide, noise_of

#: Every id of the jeon catalog.
CLOCK = (
    "emulated Pi 4B device time (CPU time x speed factor, host contention divided out, + bytes / 1 Gbit/s), "
    "nothing fitted"
)
LABEL = {"pipeline": "KCS (5-stage pipeline)", "ensemble": "ensemble (5 binary)", "single": "single processor"}
_ROW = {"pipeline": "KCS", "ensemble": "ensemble", "single": "single processor"}  # Table 1's row names
#: Keras' MobileNetV2 input size: the catalog's 224 px (the paper does not state its size, P14).
KERAS_SIZE = 224


def paper_times() -> dict[str, float]:
    """Table 1's processing time of each mode, in seconds (from the reference values)."""
    ref = load_reference("jeon/table1")
    times = ref[ref["column"] == "Processing Time"].set_index("row")["value"].astype(float)
    return {mode: float(times[row]) for mode, row in _ROW.items()}


def _noise(summary: JeonSummary) -> Noise:
    """The spread of each mode's processing time over its repeated streams."""
    return noise_of(summary.streams.set_index("mode")["processing_s"], axis="mode")


def stream_choices(plan: Plan) -> list[str]:
    """What the paper leaves open about its streams and its three configurations, as this run chose it."""
    p = plan.params
    return [
        f"workload: the {plan.dataset.n_test:,} validation images in micro-batches of {p.micro_batch}, timed from "
        "the first input sent to the last prediction received (Table 1's workload is not stated, P14)",
        f"input {p.image_size} px (not stated, P14)",
        f"at most {p.max_in_flight} micro-batches in flight; Dask worker-to-worker transfers stand for SSH over "
        f"the {plan.profile.name}'s {plan.profile.link_mbps:g} Mbit/s link",
        f"ensemble: class pairs {list(ENSEMBLE_PAIRS)}, its answer the argmax of the ten sigmoid scores (P7); "
        "labels never used at inference (P8)",
        "single processor: the KCS model whole, with the same weights, on one device (P5)",
        "host contention (five device processes on two cores) divided out of each stage's CPU time",
    ]


def training_choices(plan: Plan) -> list[str]:
    """What the paper leaves open about its training (P12, P14), as this run chose it."""
    p = plan.params
    return [
        f"input {p.image_size} px",
        f"dropout {p.dropout:g}",
        f"phase-1 learning rate {p.phase1_learning_rate:g} (Keras' Adam default)",
        f"{p.phase2_epochs} fine-tuning epoch(s), the whole base unfrozen",
        f"validation split {p.validation_fraction:g}, stratified and seeded, before augmentation (P13)",
        "augmentation settings of edgelab.papers.jeon.augment (the paper names the layers only)",
        "F1 averaging: macro and weighted both shown",
    ]


def _item(item_id: str, files: list[Path], verdict: policy.Verdict, shown: bool, common: dict[str, Any]) -> ReportItem:
    fields = {k: common[k] for k in ("data_source", "notebook", "parameters")}
    return ReportItem.from_verdict(
        item_id, files, verdict, paper_values_shown=shown, clock=common.get("clock", CLOCK), **fields
    )


def time_order_checks(time: pd.Series, noise: Noise) -> list[Check]:
    """C16's time order, KCS < ensemble < single: each gap at least ``MIN_EFFECT`` and beyond the repeats' noise.

    Emulated times: judged with ``MIN_REPEATS`` runs per mode (``noise.runs``);
    with fewer, ``decide`` leaves them undecided and says what they would be.
    One run per mode cannot tell the ensemble from the single board: their
    true ratio is about 1 (0.88-1.06 measured in smoke runs of the same code).
    """
    nearest = "ensemble" if time["ensemble"] <= time["single"] else "single"
    kcs = policy.effect(
        pd.Series({nearest: time[nearest], "pipeline": time["pipeline"]}),
        -1,
        noise,
        claim="KCS faster than both others (C16; against the faster of them)",
        basis=Basis.EMULATED_TIME,
        axis="mode",
        name="time: KCS fastest",
    )
    ensemble = policy.effect(
        pd.Series({"single": time["single"], "ensemble": time["ensemble"]}),
        -1,
        noise,
        claim="ensemble faster than single (C16)",
        basis=Basis.EMULATED_TIME,
        axis="mode",
        name="time: ensemble faster than single",
    )
    times = f"KCS {time['pipeline']:.3f} s, ensemble {time['ensemble']:.3f} s, single {time['single']:.3f} s"
    why_equal = (
        "each ensemble member runs a whole MobileNetV2 on every image: five boards in parallel cannot beat one "
        "board running one"
    )
    return [
        replace(kcs, measured=f"{kcs.measured} ({times})"),
        replace(ensemble, note="; ".join(n for n in (ensemble.note, why_equal) if n)),
    ]


def accuracy_checks(summary: JeonSummary, plan: Plan) -> list[Check]:
    """C16's accuracy order, ensemble > KCS > single: what the runs can say of each half.

    KCS and the single board run the same trained weights (the catalog's
    "same weights as KCS" row, P5), and the pipeline computes the unsplit
    model's function (fig3's correctness check): they agree on every
    prediction, so the paper's KCS above single cannot come from the pipeline,
    whatever the training. The ensemble against KCS is a trained accuracy of one
    training run per model, and needs the paper's data and ImageNet weights.
    """
    t = summary.table1
    same = bool(summary.agreement["same_predictions"])
    images = plan.dataset.n_train + plan.dataset.n_test
    sample = "" if plan.dataset.notes.get("full_set") else " (the offline sample, not the paper's)"
    data = f"weights: {plan.weights_source}; data: {images:,} images{sample}"
    comparable = plan.weights is not None and bool(plan.dataset.notes.get("full_set"))
    ensemble_kcs = policy.holds(
        "accuracy: ensemble above KCS",
        bool(t.loc["ensemble", "accuracy"] > t.loc["pipeline", "accuracy"]) if comparable else None,
        f"ensemble {t.loc['ensemble', 'accuracy']:.3f}, KCS {t.loc['pipeline', 'accuracy']:.3f}",
        "the paper's accuracy order, ensemble above KCS (C16)",
        basis=Basis.TRAINED,
        runs=1,  # one training run per model: the stream repeats reuse its weights
        note="" if comparable else f"{data}: accuracies are not the paper's",
        undecided="" if comparable else "data missing",
    )
    kcs_single = policy.holds(
        "accuracy: KCS above single",
        False if same else None,
        f"KCS {t.loc['pipeline', 'accuracy']:.3f}, single {t.loc['single', 'accuracy']:.3f}; the two agree on "
        f"every prediction: {same}",
        "the paper's accuracy order, KCS above the single processor (95% vs 92%, C16)",
        basis=Basis.CONFIGURED,
        note=(
            "cause: the run gives the single board the KCS model's weights, and a pipeline computes its unsplit "
            "model's function, so the two cannot differ in accuracy; the paper's 3-point gap must come from a "
            "different model, training or evaluation of its single-processor row (P5)"
            if same
            else "KCS and single disagree on some prediction: the correctness check of jeon/fig3 decides"
        ),
        undecided="" if same else "qualitative",
    )
    return [ensemble_kcs, kcs_single]


def render_table1(summary: JeonSummary, plan: Plan, **common: Any) -> ReportItem:
    """jeon/table1: accuracy, F1 and processing time of pipeline, ensemble and single, beside the paper's."""
    paper = load_reference("jeon/table1")
    paper_s = paper_times()
    t = summary.table1
    rows = []
    for mode in t.index:
        rows.append(
            {
                "model": LABEL[mode],
                "val_accuracy": round(t.loc[mode, "accuracy"], 3),
                "f1_macro": round(t.loc[mode, "f1_macro"], 3),
                "f1_weighted": round(t.loc[mode, "f1_weighted"], 3),
                "processing_s": round(t.loc[mode, "processing_s"], 3),
                "range_s": f"{t.loc[mode, 'processing_min_s']:.3f}-{t.loc[mode, 'processing_max_s']:.3f}",
                "uncorrected_s": round(t.loc[mode, "uncorrected_s"], 3),
                "vs_kcs_time_ratio": round(t.loc[mode, "processing_s"] / t.loc["pipeline", "processing_s"], 2),
                "host_wall_s": round(t.loc[mode, "host_wall_s"], 2),
                "paper_time_s": paper_s[mode],
                "paper_ratio": round(paper_s[mode] / paper_s["pipeline"], 2),
            }
        )
    table = pd.DataFrame(rows)
    noise = _noise(summary)
    checks = [*time_order_checks(t["processing_s"], noise), *accuracy_checks(summary, plan)]
    verdict = decide(
        checks,
        fitted=[],
        predicted=["processing time of KCS, ensemble, single (emulated)", "accuracy of the ensemble and KCS"],
        noise=noise,
        choices=stream_choices(plan),
    )
    md = [
        "# jeon/table1: pipeline (KCS), ensemble and single processor",
        "",
        f"Workload: the {int(summary.streams['images'].iloc[0])} validation images, micro-batches of "
        f"{plan.params.micro_batch}, from the first input sent to the last prediction received; "
        f"{int(t['repeats'].min())} runs per mode (median; range beside). Clock: {CLOCK}; "
        f"speed factor {summary.speed_factor:.2f} (host {summary.calibration['host_gflops']} GFLOPS measured / "
        f"Pi 4B {summary.calibration['device_gflops']} GFLOPS assumed). Host contention per stage (CPU in the "
        f"streams over CPU with no other device computing), divided out: "
        f"{', '.join(f'{k} {v:.2f}' for k, v in sorted(summary.contention.items()))}; `uncorrected_s` keeps it.",
        "",
        markdown_table(table),
        "",
        "Paper (Table 1):",
        "",
        markdown_table(paper.pivot_table(index="row", columns="column", values="value", aggfunc="first").reset_index()),
        "",
        "The paper does not say which workload its times measure; compare ratios, not seconds. "
        "The ensemble's answer is the argmax of its ten per-class sigmoid scores (two per member, pairs "
        f"{list(ENSEMBLE_PAIRS)}); labels are never used at inference (P7, P8).",
        "",
        verdict.markdown(),
    ]
    files = save_table(table, "\n".join(md), "jeon/table1", root=common["root"])
    return _item("jeon/table1", files, verdict, True, common)


def render_fig3(summary: JeonSummary, plan: Plan, **common: Any) -> ReportItem:
    """jeon/fig3: the pipeline as it ran (Gantt on the emulated clock), per-stage costs, throughput and latency."""
    emu = summary.pipeline
    assert emu is not None
    timeline, stages = emu.timeline, summary.stages
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.2), gridspec_kw={"width_ratios": [2.2, 1]})
    names = list(dict.fromkeys(timeline["stage"]))
    for row, name in enumerate(names):
        part = timeline[timeline["stage"] == name]
        axes[0].broken_barh(
            list(zip(part["start"], part["compute_s"], strict=True)), (row - 0.4, 0.8), color=f"C{row}", alpha=0.8
        )
    axes[0].set_yticks(range(len(names)), [f"{n} ({d})" for n, d in zip(names, stages["device"], strict=True)])
    axes[0].invert_yaxis()
    axes[0].set_xlabel("emulated Pi 4B time (s)")
    axes[0].set_title("micro-batches through the stages: fill, steady state, drain")
    axes[1].bar(stages["stage"].astype(str), stages["compute_s_per_micro_batch"], color="C0")
    axes[1].set_xlabel("stage")
    axes[1].set_ylabel("compute per micro-batch (s, emulated)")
    png = save_figure(fig, "jeon/fig3", root=common["root"])
    # Every pipeline stream's mean concurrency on the emulated clock: stage-seconds over elapsed seconds.
    busy = summary.streams.loc[summary.streams["mode"] == "pipeline", "concurrency"]
    overlap = Noise.of_runs(busy, cell="pipeline")
    diff = summary.agreement["max_abs_difference"]
    checks = [
        policy.holds(
            "C12 stages overlap",
            bool(busy.min() > 1),
            f"{busy.median():.2f} stages busy on average (median of {len(busy)} run(s), lowest {busy.min():.2f})",
            "the stages compute at the same time: mean concurrency > 1 in every run",
            basis=Basis.EMULATED_TIME,
            runs=overlap.runs,
        ),
        policy.holds(
            "outputs equal the unsplit model",
            policy.within(diff, policy.FLOAT32_TOLERANCE),
            f"max |difference| {diff:.2e} over {emu.images} images; same predictions: "
            f"{summary.agreement['same_predictions']}",
            f"the five stages compute the whole model's outputs: max |difference| <= {policy.FLOAT32_TOLERANCE:g} "
            "(probabilities, at most 1: no looser than relative to the largest)",
            basis=Basis.CORRECTNESS,
        ),
    ]
    verdict = decide(
        checks,
        fitted=[],
        predicted=["stage overlap on the emulated clock"],
        noise=overlap,
        choices=stream_choices(plan),
    )
    latency = summary.latency
    table = stages
    md = [
        "# jeon/fig3: the five-stage pipeline as it ran",
        "",
        f"One stage per device worker; activations go worker to worker (Dask transfers stand for the paper's SSH; "
        f"P1: what passes between stages is the activation tensor, not weights). {emu.images} images in "
        f"micro-batches of {plan.params.micro_batch}, at most {plan.params.max_in_flight} in flight.",
        "",
        markdown_table(table.round(4)),
        "",
        f"Throughput (emulated): {emu.throughput:.1f} images/s overall, {emu.steady_throughput:.1f} in steady state; "
        f"bound {emu.bound_throughput:.1f} (slowest resource: {emu.bottleneck}).",
        "",
        "One image at a time (per-image latency, first in to first out):",
        "",
        markdown_table(latency.round(4)) if not latency.empty else "(not run)",
        "",
        verdict.markdown(),
    ]
    files = [*save_table(table, "\n".join(md), "jeon/fig3", root=common["root"]), png]
    return _item("jeon/fig3", files, verdict, False, common)


def render_fig11(summary: JeonSummary, plan: Plan, **common: Any) -> ReportItem:
    """jeon/fig11: the ensemble as it ran: broadcast, five classifiers, combine (with measured per-node times)."""
    emu = summary.ensemble
    assert emu is not None
    t = emu.timeline
    per = t.groupby(["branch", "device"])["compute_s"].median().reset_index()
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.axis("off")
    ax.text(0.05, 0.5, "master\n(input)", ha="center", va="center", bbox={"boxstyle": "round", "fc": "#ddd"})
    ax.text(0.95, 0.5, "combine:\nargmax of 10\nsigmoid scores", ha="center", va="center", bbox={"boxstyle": "round"})
    for i, row in per.iterrows():
        y = 0.9 - i * 0.2
        pair = ENSEMBLE_PAIRS[int(row["branch"])]
        ax.text(0.5, y, f"{row['device']}: classes {pair}", ha="center", va="center", bbox={"boxstyle": "round"})
        ax.annotate("", (0.38, y), (0.12, 0.5), arrowprops={"arrowstyle": "->"})
        ax.annotate("", (0.85, 0.5), (0.62, y), arrowprops={"arrowstyle": "->"})
        ax.text(0.25, (y + 0.5) / 2, f"{row['compute_s']:.3f} s", fontsize=8)
    ax.set_title("ensemble: the same micro-batch to five members (median compute per micro-batch, emulated)")
    png = save_figure(fig, "jeon/fig11", root=common["root"])
    sends = t.groupby("micro_batch")["branch"].nunique()
    checks = [
        policy.holds(
            "every input to all members",
            bool((sends == len(ENSEMBLE_PAIRS)).all()),
            f"{int(sends.min())}-{int(sends.max())} members per micro-batch",
            f"each micro-batch reaches all {len(ENSEMBLE_PAIRS)} members",
            basis=Basis.CONFIGURED,
            note="structural: the code sends every micro-batch to every member; not a prediction",
        )
    ]
    verdict = decide(
        checks,
        fitted=[],
        predicted=[],
        noise=Noise.none("which members received each micro-batch is counted, not timed"),
        choices=stream_choices(plan),
    )
    md = [
        "# jeon/fig11: the ensemble as it ran",
        "",
        f"Class pairs per member (not stated in the paper, P7): {list(ENSEMBLE_PAIRS)}. Combination: argmax over "
        "the ten per-class sigmoid scores (the catalog's reading of 'the model with the highest performance'); "
        "labels are never used at inference (P8).",
        "",
        markdown_table(per.round(4)),
        "",
        verdict.markdown(),
    ]
    files = [*save_table(per, "\n".join(md), "jeon/fig11", root=common["root"]), png]
    return _item("jeon/fig11", files, verdict, False, common)


def render_eq_layer_split(summary: JeonSummary, plan: Plan, **common: Any) -> ReportItem:
    """jeon/eq-layer-split: 157 layers as 27/27/36/53/14, mapped onto Keras' MobileNetV2, per stage."""
    counts = layer_count_check()
    stages = summary.stages
    sizes = tuple(int(n) for n in stages["layers"])
    paper_layers = sum(JEON_STAGE_SIZES)  # the paper's 157 (l.163)
    checks = [
        policy.holds(
            "157 layers",
            counts["flat"]["layers"] == paper_layers,
            f"flat base + head: {counts['flat']['layers']}",
            f"the built model has the paper's {paper_layers} layers",
            basis=Basis.STRUCTURE,
        ),
        policy.holds(
            "split",
            sizes == JEON_STAGE_SIZES,
            "/".join(map(str, sizes)),
            f"the stages hold the paper's {'/'.join(map(str, JEON_STAGE_SIZES))} layers",
            basis=Basis.STRUCTURE,
        ),
        replace(
            policy.balanced(
                "balanced by computation (C11)", list(stages["mac_share"]), basis=Basis.COUNTED, what="MACs"
            ),
            note="MACs counted per layer of the built model, against the paper's 'considering the amount of "
            "computation'; P6: the cuts fall on residual-block boundaries; balancing by MACs puts the largest at ~23%",
        ),
    ]
    verdict = decide(
        checks,
        fitted=[],
        predicted=["MAC shares of the stages"],
        noise=Noise.none("layers and MACs are counted from the built model, not timed"),
        choices=[f"input {plan.params.image_size} px for the MACs (not stated, P14)"],
    )
    table = stages
    md = [
        "# jeon/eq-layer-split: 157 = 27 + 27 + 36 + 53 + 14",
        "",
        f"Keras MobileNetV2: include_top=False {counts['include_top_false']['layers']} layers "
        f"({counts['include_top_false']['params']:,} parameters), include_top=True "
        f"{counts['include_top_true']['layers']} ({counts['include_top_true']['params']:,}); the flat model with the "
        f"paper's head (GAP, dropout, dense 10) {counts['flat']['layers']} ({counts['flat']['params']:,}): the "
        f"paper's 157 (P2). MACs at {plan.params.image_size} px; each cut passes one tensor.",
        "",
        markdown_table(table.round(4)),
        "",
        verdict.markdown(),
    ]
    files = save_table(table, "\n".join(md), "jeon/eq-layer-split", root=common["root"])
    return _item("jeon/eq-layer-split", files, verdict, True, {**common, "clock": "none (structure)"})


def _speedups(summary: JeonSummary) -> dict[str, float]:
    t = summary.table1["processing_s"]
    return {m: float(t[m] / t["pipeline"]) for m in ("ensemble", "single")}


def _stated_faster() -> dict[str, float]:
    """The prose's "about 70%" and "90%" faster (l.189), as fractions, by the mode KCS is compared with."""
    ref = load_reference("jeon/prose-compare").set_index("row")["value"]
    return {
        "ensemble": float(ref["KCS vs ensemble processing time"]) / 100,
        "single": float(ref["KCS vs single processor processing time"]) / 100,
    }


def render_eq_speedup(summary: JeonSummary, plan: Plan, **common: Any) -> ReportItem:
    """jeon/eq-speedup: 'about 70%' and '90%' faster, read both ways, beside the measured ratios."""
    ratios = _speedups(summary)
    paper_s, stated = paper_times(), _stated_faster()
    noise = _noise(summary)
    rows, checks = [], []
    for mode, ratio in ratios.items():
        paper_ratio = paper_s[mode] / paper_s["pipeline"]
        rows.append(
            {
                "against": mode,
                "measured_time_reduction": round(1 - 1 / ratio, 3),
                "measured_speed_ratio": round(ratio, 2),
                "paper_stated": stated[mode],
                "paper_time_reduction": round(1 - 1 / paper_ratio, 3),
                "paper_speed_ratio": round(paper_ratio, 2),
            }
        )
        checks.append(
            policy.close(
                f"KCS vs {mode}",
                ratio,
                paper_ratio,
                basis=Basis.EMULATED_TIME,
                runs=noise.runs,
                text=f"speed ratio {ratio:.2f}x vs the paper's {paper_ratio:.2f}x ({ratio / paper_ratio - 1:+.0%})",
            )
        )
    table = pd.DataFrame(rows)
    verdict = decide(
        checks, fitted=[], predicted=["speed ratios (emulated)"], noise=noise, choices=stream_choices(plan)
    )
    md = [
        "# jeon/eq-speedup: how much faster is KCS?",
        "",
        "Both readings of 'x% faster': the time saved (1 - t_KCS/t_other) and the speed ratio (t_other/t_KCS). "
        "The paper's 90% matches the time-saved reading of 580 s vs 60 s (89.7%); its 'about 70%' is low for "
        "260 s vs 60 s (76.9%) (P4).",
        "",
        markdown_table(table),
        "",
        verdict.markdown(),
    ]
    files = save_table(table, "\n".join(md), "jeon/eq-speedup", root=common["root"])
    return _item("jeon/eq-speedup", files, verdict, True, common)


def render_eq_pipeline_bound(summary: JeonSummary, plan: Plan, **common: Any) -> ReportItem:
    """jeon/eq-pipeline-bound: the measured KCS/single speed-up beside the bounds from stage shares."""
    measured = _speedups(summary)["single"]
    stages = summary.stages
    time_bound = speedup_bound(list(stages["compute_s_per_micro_batch"]))
    mac_bound = float(1 / stages["mac_share"].max())
    paper_s = paper_times()
    paper_ratio = paper_s["single"] / paper_s["pipeline"]
    noise = _noise(summary)
    slack = noise.relative if noise.measured else 0.0
    table = pd.DataFrame(
        [
            {"what": "measured KCS/single speed-up (emulated)", "value": round(measured, 2)},
            {"what": "bound from measured stage times (sum/max)", "value": round(time_bound, 2)},
            {"what": "bound from MAC shares (1/largest share)", "value": round(mac_bound, 2)},
            {"what": f"ideal for {len(stages)} stages", "value": float(len(stages))},
            {"what": f"paper: {paper_s['single']:g} s / {paper_s['pipeline']:g} s", "value": round(paper_ratio, 2)},
        ]
    )
    checks = [
        policy.holds(
            "measured within its bound",
            policy.within(measured, time_bound * (1 + slack)),
            f"{measured:.2f}x <= {time_bound:.2f}x",
            "speed-up <= sum/max of the stage times (+ the repeats' noise)",
            basis=Basis.EMULATED_TIME,
            runs=noise.runs,
        ),
        replace(
            policy.close(
                "paper's speed-up",
                measured,
                paper_ratio,
                basis=Basis.EMULATED_TIME,
                runs=noise.runs,
                text=f"{measured:.2f}x vs the paper's {paper_ratio:.2f}x",
            ),
            note=f"{paper_ratio:.2f}x exceeds the {len(stages)}x ideal of {len(stages)} stages: the paper's "
            "single-processor row must differ in more than the split (workload, loading, memory; P5)",
        ),
    ]
    verdict = decide(
        checks, fitted=[], predicted=["KCS/single speed-up (emulated)"], noise=noise, choices=stream_choices(plan)
    )
    md = [
        "# jeon/eq-pipeline-bound: how much can five stages gain?",
        "",
        "A pipeline's steady throughput is limited by its slowest stage: against one identical device running "
        "the whole model it gains at most sum/max of the stage times (<= 5 for five stages).",
        "",
        markdown_table(table),
        "",
        verdict.markdown(),
    ]
    files = save_table(table, "\n".join(md), "jeon/eq-pipeline-bound", root=common["root"])
    return _item("jeon/eq-pipeline-bound", files, verdict, True, common)


def render_report(
    root: Path, plan: Plan, summary: JeonSummary, *, notebook: str, parameters: dict[str, Any]
) -> list[ReportItem]:
    """The notebook's items (``edgelab.papers.notebook.report``): ``render_all``, the data and weights recorded."""
    data_source = plan.dataset.provenance() | {"weights": plan.weights_source}
    common = {"root": root, "notebook": notebook, "parameters": parameters, "data_source": data_source}
    return render_all(summary, plan, summary.view, **common)


def render_all(summary: JeonSummary, plan: Plan, view: Any, **common: Any) -> list[ReportItem]:
    """Every jeon item: experiment items here, cluster listings and data/training items from their modules."""
    data = {k: common[k] for k in ("root", "notebook", "parameters", "data_source")}
    names = list(plan.dataset.class_names)
    full = bool(plan.dataset.notes.get("full_set"))
    raw = jeon_data.class_counts(
        pd.concat([pd.Series(plan.dataset.y_train), pd.Series(plan.dataset.y_test)]).to_numpy(), names
    )
    per_class = summary.per_class.assign(class_name=lambda f: [names[int(c)] for c in f["class"]])
    target = plan.params.augment_per_class
    items = [
        jeon_data.render_fig1(image_size=KERAS_SIZE, **data),
        jeon_data.render_fig7(raw, full_set=full, **data),
        jeon_data.render_fig8(per_class, target=target, settings=plan_settings(), **data),
        jeon_data.render_eq_augmentation(
            per_class, target=target, n_raw_total=plan.dataset.n_train, full_set=full, **data
        ),
        jeon_data.render_fig9(
            summary.history,
            summary.y_true,
            summary.y_pred,
            names,
            weights_source="imagenet" if plan.weights else "none",
            full_data=full,
            choices=training_choices(plan),
            **data,
        ),
    ]
    items += [r(summary, plan, **common) for r in (render_table1, render_fig3, render_fig11)]
    items += [r(summary, plan, **common) for r in (render_eq_layer_split, render_eq_speedup, render_eq_pipeline_bound)]
    items += jeon_cluster.render_cluster_items(
        view,
        root=common["root"],
        notebook=common["notebook"],
        parameters=common["parameters"],
        data_source=common["data_source"],
        expected_workers=_paper_slaves(),
        fault=summary.fault,
    )
    smaller = reductions(plan)
    for item in items:
        item.reduction = smaller.get(item.id, "")
    return sorted(items, key=lambda i: JEON_IDS.index(i.id))


def _paper_slaves() -> int:
    """The paper's five slave boards (l.65, 90): the workers claim C1 wants."""
    cluster = load_reference("jeon/prose-cluster").set_index("row")["value"]
    return int(cluster["slave nodes"])


def reductions(plan: Plan) -> dict[str, str]:
    """How this run is smaller than the paper's, per item id (one line; "" where it is the paper's size).

    Parameters
    ----------
    plan
        The run's plan (its data, weights and parameters).

    Returns
    -------
    dict
        Item id -> the reduction line, for every id whose values depend on the run's size.
    """
    p, d = plan.params, plan.dataset
    data = load_reference("jeon/prose-data").set_index("row")["value"]
    train = load_reference("jeon/prose-train").drop_duplicates("row").set_index("row")["value"]
    paper_raw, paper_per_class = (
        int(data["tomato images before preprocessing"]),
        int(data["images per class after augmentation"]),
    )
    paper_frozen = int(train["phase 1 epochs (base frozen)"])
    parts = {
        "images": ""
        if d.notes.get("full_set")
        else f"{d.n_train + d.n_test:,} of the paper's {paper_raw:,} images (the offline sample; "
        f"{d.n_test:,} validation images streamed)",
        "augment": ""
        if p.augment_per_class >= paper_per_class
        else f"{p.augment_per_class:,} of {paper_per_class:,} images per class after augmentation",
        "epochs": "; ".join(
            t
            for t in (
                "" if p.phase1_epochs >= paper_frozen else f"{p.phase1_epochs} of {paper_frozen} frozen epochs",
                "" if p.phase2_epochs else "no fine-tuning epoch (the paper's count is not stated)",
            )
            if t
        ),
        "weights": "" if plan.weights is not None else "a random base, not ImageNet's weights (not here)",
        "size": "" if p.image_size >= KERAS_SIZE else f"{p.image_size} px input, not Keras' {KERAS_SIZE} (unstated)",
        "repeats": "" if p.repeats >= policy.MIN_REPEATS else f"{p.repeats} run(s) per mode, not {policy.MIN_REPEATS}",
    }
    wanted = {
        "jeon/fig7": ("images",),
        "jeon/fig8": ("images", "augment"),
        "jeon/eq-augmentation": ("images", "augment"),
        "jeon/fig9": ("images", "augment", "epochs", "weights", "size"),
        "jeon/table1": ("images", "augment", "epochs", "weights", "size", "repeats"),
        "jeon/fig3": ("images", "size", "repeats"),
        "jeon/fig11": ("images", "size", "repeats"),
        "jeon/eq-speedup": ("images", "size", "repeats"),
        "jeon/eq-pipeline-bound": ("images", "size", "repeats"),
        "jeon/eq-layer-split": ("size",),
    }
    return {i: "; ".join(parts[k] for k in keys if parts[k]) for i, keys in wanted.items()}


def plan_settings() -> dict[str, Any]:
    """The augmentation settings every run records."""
    from edgelab.papers.jeon.augment import AUGMENTATION

    return dict(AUGMENTATION)
