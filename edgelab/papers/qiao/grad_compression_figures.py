"""Gradient quantisation and sparsification in Sync-SGD (qiao/method-grad-quant, qiao/method-grad-sparsify).

Each id: accuracy of the global model against the bytes all devices uploaded
(one curve per scheme), the serialized bytes one device sends per step, and
the emulated time per step behind a slow link; sparsification adds the
measured density of real fp32 deltas per layer and random-k's unbiasedness
over many draws. The survey states only 1 bit and {-1, 0, 1}; the payload
sizes those imply are checked on the encoders as built (``STRUCTURE``). The
claims C23-C25 on accuracy and density are trained values (``TRAINED``),
judged when the runs are long enough and with three runs of each scheme; the
bytes the runs sent are counted (``COUNTED``); random-k's unbiasedness (C26)
is the estimator's correctness (``CORRECTNESS``), true by construction.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from edgelab.papers.qiao import grad_compression as exp
from edgelab.report.manifest import ReportItem
from edgelab.report.reference import load_reference
from edgelab.report.style import apply_style, data_source, markdown_table, save_figure, save_table
from edgelab.report.verdict import (
    ACCURACY_TOLERANCE,
    MIN_TRAINING_ROUNDS,
    SPARSE_SHARE,
    Basis,
    Check,
    Noise,
    Verdict,
    accuracy_gap,
    close,
    decide,
    effect,
    holds,
    noise_of,
    unbiased,
    within,
)

QUANT_ID = "qiao/method-grad-quant"
SPARSIFY_ID = "qiao/method-grad-sparsify"
#: What the survey leaves open and the runs chose.
CHOICES = [
    "Sync-SGD (ps_sync, the server averages every batch) of LeNet-MLP on MNIST",
    "the parameter server is a machine of its own: every device's pull and push cross the shared slow link",
    "only uploads are compressed: the server broadcasts dense fp32 weights",
    "error feedback keeps each device's residual on the device",
    "QSGD's levels bit-packed at bit_length(s) bits plus a sign bit (not the paper's Elias coding)",
]
CLOCK = (
    "emulated per step (edgelab.emulation.timeline): each device's measured CPU time of the round (training and "
    "compression) times the calibrated speed factor, plus the serialized bytes it pulled and pushed over a "
    "shared {link:g} Mbit/s link to a separate parameter server"
)


def _label(scheme: str) -> str:
    return "fp32" if scheme == "none" else scheme


def _curves_panel(ax: Any, curves: pd.DataFrame, schemes: tuple[str, ...], budget: float) -> None:
    for k, scheme in enumerate(s for s in schemes if s in set(curves["scheme"])):
        c = curves[curves["scheme"] == scheme]
        style = {"color": "black", "linewidth": 2.2} if scheme == "none" else {"color": f"C{k % 10}"}
        ax.semilogx(c["uploaded_bytes"] / 1e6, c["accuracy"], "-o", markersize=4, label=_label(scheme), **style)
    ax.axvline(budget / 1e6, color="grey", linestyle=":", label="byte budget")
    ax.set(xlabel="uploaded by all devices (MB, log)", ylabel="test accuracy", title="accuracy against bytes")
    ax.legend(fontsize=7, ncol=2)


def _cost_panel(ax: Any, summary: pd.DataFrame, link_mbps: float) -> None:
    x = np.arange(len(summary))
    ax.bar(x, summary["compute_s"], color="C0", label="compute (slowest device)")
    ax.bar(x, summary["comm_s"], bottom=summary["compute_s"], color="C7", label=f"pull + push at {link_mbps:g} Mbit/s")
    for i, b in enumerate(summary["bytes_per_step"]):
        ax.text(i, summary["step_s"].iloc[i], f"{b / 1e3:,.0f} KB", ha="center", va="bottom", fontsize=6, rotation=90)
    ax.set_xticks(x, [_label(s) for s in summary["scheme"]], rotation=60, fontsize=7)
    ax.set(ylabel="emulated time per step (s)", title="time per step (label: bytes one device sends)")
    ax.legend(fontsize=7, loc="lower right")


def draw_quant(summary: pd.DataFrame, curves: pd.DataFrame, plan: exp.Plan, budget: float) -> Any:
    """Accuracy against bytes and time per step of the quantisation schemes."""
    import matplotlib.pyplot as plt

    apply_style()
    p = plan.params
    rows = summary[summary["scheme"].isin(exp.QUANT)]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.6))
    _curves_panel(left, curves, exp.QUANT, budget)
    _cost_panel(right, rows, p.link_mbps)
    fig.suptitle(f"qiao/method-grad-quant: Sync-SGD, LeNet-MLP, N={p.n_devices} emulated {plan.profile.name}")
    fig.tight_layout()
    return fig


def draw_sparsify(
    summary: pd.DataFrame, curves: pd.DataFrame, density: pd.DataFrame, check: pd.DataFrame, plan: exp.Plan,
    budget: float,
) -> Any:  # fmt: skip
    """Accuracy against bytes, time per step, density per layer and random-k's unbiasedness."""
    import matplotlib.pyplot as plt

    apply_style()
    p = plan.params
    rows = summary[summary["scheme"].isin(exp.SPARSIFY)]
    fig, axes = plt.subplots(2, 2, figsize=(13, 8.6))
    _curves_panel(axes[0, 0], curves, exp.SPARSIFY, budget)
    _cost_panel(axes[0, 1], rows, p.link_mbps)
    layers = density[density["layer"] != "all"]
    x = np.arange(len(layers))
    axes[1, 0].bar(x - 0.2, layers["for_99"], 0.4, color="C2", label="share of coordinates for 99% of ||g||²")
    axes[1, 0].bar(x + 0.2, layers["zero"], 0.4, color="C4", label="share exactly 0")
    axes[1, 0].set_xticks(x, layers["layer"], rotation=30, fontsize=7)
    axes[1, 0].set(ylabel="share of the layer's coordinates", ylim=(0, 1),
                   title=f"density of {p.gradient_batches} real fp32 deltas (mean)")  # fmt: skip
    axes[1, 0].legend(fontsize=7)
    y = np.arange(len(check))
    axes[1, 1].barh(y + 0.2, check["relative_error"], 0.4, color="C1", label="measured")
    axes[1, 1].barh(y - 0.2, check["expected"], 0.4, color="grey", label="expected: variance only / bias 1-p")
    axes[1, 1].set_yticks(y, check["estimator"], fontsize=7)
    axes[1, 1].set(xlabel="||mean of draws - g|| / ||g||", title=f"random-k, p={p.randomk_density:g}, {p.draws} draws")
    axes[1, 1].legend(fontsize=7)
    fig.suptitle(f"qiao/method-grad-sparsify: Sync-SGD, LeNet-MLP, N={p.n_devices} emulated {plan.profile.name}")
    fig.tight_layout()
    return fig


# ------------------------------------------------------------- verdicts ----


def _trainings(summary: pd.DataFrame, accuracies: pd.DataFrame | None) -> pd.DataFrame:
    """Every training run's final accuracy (scheme, repeat, rounds, accuracy); one per scheme without repeats."""
    if accuracies is not None and len(accuracies):
        return accuracies
    return summary[["scheme", "rounds", "accuracy"]].assign(repeat=0)


def _median(runs: pd.DataFrame, scheme: str) -> tuple[float, int]:
    """A scheme's median final accuracy over its runs, and how many runs."""
    mine = runs[runs["scheme"] == scheme]["accuracy"]
    return (float(mine.median()) if len(mine) else float("nan")), len(mine)


def _too_short(runs: pd.DataFrame) -> bool:
    return bool(runs["rounds"].min() < MIN_TRAINING_ROUNDS)


def _shown(scheme: str, accuracy: float, runs: int) -> str:
    return f"{scheme} {accuracy:.3f}" + (f" (median of {runs})" if runs > 1 else "")


def _gap_check(name: str, runs: pd.DataFrame, scheme: str, note: str = "") -> Check:
    """``scheme``'s final accuracy within ``ACCURACY_TOLERANCE`` of fp32's after the same steps (medians of runs)."""
    (fp32, n_fp32), (acc, n_acc) = _median(runs, "none"), _median(runs, scheme)
    n = min(n_fp32, n_acc)
    measured = (
        f"{_shown(scheme, acc, n_acc)} vs {_shown('fp32', fp32, n_fp32)} after {int(runs['rounds'].min())} rounds"
    )
    rule = f"fp32 - {scheme} <= {ACCURACY_TOLERANCE} after the same steps, runs of >= {MIN_TRAINING_ROUNDS} rounds"
    if np.isnan(acc) or _too_short(runs):
        why = "; ".join(filter(None, ["the run is too short to decide", note]))
        return holds(name, None, measured, rule, basis=Basis.TRAINED, runs=n, note=why, undecided="too small")
    gap = accuracy_gap(name, fp32, acc, runs=n, claim=f"fp32 - {scheme}", at_least=False)
    return holds(name, gap.passed, measured, rule, basis=Basis.TRAINED, runs=n, note=note)


def _direction_check(name: str, runs: pd.DataFrame, better: str, worse: str) -> Check:
    """``better`` ends above ``worse`` by more than ``ACCURACY_TOLERANCE``; within it nothing is decided."""
    (hi, n_hi), (lo, n_lo) = _median(runs, better), _median(runs, worse)
    n = min(n_hi, n_lo)
    measured = f"{_shown(better, hi, n_hi)} vs {_shown(worse, lo, n_lo)}"
    rule = f"{better} - {worse} > {ACCURACY_TOLERANCE} holds, < -{ACCURACY_TOLERANCE} fails"
    if np.isnan(hi) or np.isnan(lo) or _too_short(runs):
        note = "the run is too short to decide"
        return holds(name, None, measured, rule, basis=Basis.TRAINED, runs=n, note=note, undecided="too small")
    if within(abs(hi - lo), ACCURACY_TOLERANCE):
        note = "the difference is within the accuracy tolerance"
        return holds(name, None, measured, rule, basis=Basis.TRAINED, runs=n, note=note, undecided="noisy")
    gap = accuracy_gap(name, hi, lo, runs=n, claim=f"{better} - {worse}")
    return holds(name, gap.passed, measured, rule, basis=Basis.TRAINED, runs=n)


def _noise(runs: pd.DataFrame) -> Noise:
    """The spread of each scheme's final accuracy over its runs."""
    return noise_of(runs.set_index("scheme")["accuracy"], axis="scheme")


def quant_verdict(summary: pd.DataFrame, ratios: pd.DataFrame, accuracies: pd.DataFrame | None = None) -> Verdict:
    """The payload sizes the survey implies (the encoders as built), and C23, C24 on the runs.

    ``accuracies``: every training run's final accuracy (``exp.final_accuracies``), repeats included.
    """
    runs = _trainings(summary, accuracies)
    paper = float(load_reference("qiao/derived-quant")["value"].iloc[0])
    sign = float(ratios.loc[ratios["scheme"] == "sign", "smaller_before_scales"].iloc[0])
    ternary = float(ratios.loc[ratios["scheme"] == "terngrad", "smaller_before_scales"].iloc[0])
    n = sum(math.prod(s) for s in exp.LENET_MLP)
    two_bits = 4 * n / math.ceil(2 * n / 8)  # fp32 over 2 bits a value, in whole bytes
    qsgd = (
        summary[summary["scheme"].str.startswith("qsgd:")]
        .assign(s=lambda f: f["scheme"].str[5:].astype(int))
        .sort_values("s")
    )
    checks = [
        close("1 bit vs fp32 (qiao/derived-quant)", sign, paper, basis=Basis.STRUCTURE,
              text=f"{sign:.3f}x smaller before the scales vs {paper:g}x"),
        holds("ternary in <= 2 bits", ternary >= two_bits, f"{ternary:.3f}x smaller before the scales",
              f">= {two_bits:.3f}x (2 bits a value, whole bytes)", basis=Basis.STRUCTURE),
        _gap_check("C23 sign with error feedback trains like fp32", runs, "sign_ef",
                   f"without feedback: {_shown('sign', *_median(runs, 'sign'))}"),
        _direction_check("C24 TernGrad's clipping helps", runs, "terngrad", "terngrad_noclip"),
        holds("C24 QSGD's bytes grow with its levels", bool(qsgd["bytes_per_step"].is_monotonic_increasing
              and qsgd["bytes_per_step"].is_unique), ", ".join(f"s={s}: {b:,.0f} B" for s, b in
              zip(qsgd["s"], qsgd["bytes_per_step"], strict=True)), "strictly increasing in s", basis=Basis.COUNTED),
    ]  # fmt: skip
    if len(qsgd) > 1:
        lo, hi = qsgd["scheme"].iloc[0], qsgd["scheme"].iloc[-1]
        checks.append(_direction_check("C24 more QSGD levels converge faster", runs, hi, lo))
    return decide(checks, fitted=[], predicted=list(summary["scheme"]), noise=_noise(runs), choices=CHOICES)


def sparsify_verdict(
    summary: pd.DataFrame,
    density: pd.DataFrame,
    check: pd.DataFrame,
    accuracies: pd.DataFrame | None = None,
    sparsity: pd.DataFrame | None = None,
) -> Verdict:
    """C25 (density, bytes, accuracy of top-k with accumulation) and C26 (random-k's unbiasedness).

    ``accuracies``: every training run's final accuracy; ``sparsity``: every gradient sample's whole-delta
    density (``exp.sparsity_runs``), repeats included. Without them, the first run's.
    """
    runs = _trainings(summary, accuracies)
    whole = density[density["layer"] == "all"].iloc[0]
    samples = sparsity if sparsity is not None and len(sparsity) else pd.DataFrame([whole])
    share = float(samples["for_99"].median())
    dense = float(summary.loc[summary["scheme"] == "none", "bytes_per_step"].iloc[0])
    topk = summary[summary["scheme"] == "topk:0.01"]
    unbiased_, plain = check.iloc[0], check.iloc[1]
    errors = [r["relative_error"] / r["expected"] - 1 for r in (unbiased_, plain)]
    samples_text = f" (median of {len(samples)} samples)" if len(samples) > 1 else ""
    checks = [
        holds("C25 gradients are sparse", within(share, SPARSE_SHARE),
              f"{share:.1%} of the coordinates hold 99% of ||g||^2{samples_text} ({whole['zero']:.1%} exactly 0; "
              f"the largest 1% hold {whole['top_0.01']:.1%})", f"<= {SPARSE_SHARE:.0%} of the coordinates",
              basis=Basis.TRAINED, runs=len(samples)),
        _gap_check("C25 top-k 1% with accumulation trains like fp32", runs, "topk:0.01"),
        unbiased("C26 rescaled random-k is unbiased", errors, basis=Basis.CORRECTNESS,
                 text=f"mean of {int(unbiased_['draws'])} draws off by {unbiased_['relative_error']:.4f} (variance "
                 f"alone: {unbiased_['expected']:.4f}); not rescaled: {plain['relative_error']:.4f} (bias 1-p = "
                 f"{plain['expected']:.4f})"),
    ]  # fmt: skip
    if len(topk):
        sent = pd.Series([dense, float(topk["bytes_per_step"].iloc[0])], index=["fp32", "topk:0.01"])
        cut = effect(sent, -1, Noise.none("bytes are counted"), claim="top-k 1% cuts the bytes sent per step",
                     basis=Basis.COUNTED, axis="scheme", name="C25 top-k 1% cuts the bytes sent")  # fmt: skip
        text = f"{dense / sent['topk:0.01']:.1f}x fewer bytes per step ({cut.measured})"
        checks.insert(1, holds(cut.name, cut.passed, text, cut.rule, basis=Basis.COUNTED))
    density_noise = Noise.of_runs(samples["for_99"], cell="for_99")
    noise = Noise({**_noise(runs).cells, **density_noise.cells}, axis="scheme")
    return decide(checks, fitted=[], predicted=list(summary["scheme"]), noise=noise, choices=CHOICES)


def reduction(plan: exp.Plan) -> str:
    """How the run is smaller than the full profile's (the survey gives no size)."""
    p, d, full = plan.params, plan.dataset, exp.FULL_PROFILE
    parts = []
    if p.sample_limit is not None:
        parts.append(f"{d.n_train:,} training and {d.n_test:,} test digits of all MNIST")
    if p.steps is not None:
        parts.append(f"{p.steps} batches per device of a whole shard")
    if p.gradient_batches < full["gradient_batches"] or p.draws < full["draws"]:
        parts.append(f"{p.gradient_batches} sampled deltas and {p.draws} random-k draws of "
                     f"{full['gradient_batches']} and {full['draws']}")  # fmt: skip
    if p.repeats < full["repeats"]:
        parts.append(f"{p.repeats} run(s) of each scheme of {full['repeats']}")
    return "; ".join(parts)


# -------------------------------------------------------------- render ----


def _scheme_table(summary: pd.DataFrame, schemes: tuple[str, ...]) -> pd.DataFrame:
    rows = summary[summary["scheme"].isin(schemes)]
    return rows.assign(
        scheme=rows["scheme"].map(_label),
        bytes_per_step=rows["bytes_per_step"].round(0).astype(int),
        smaller=rows["smaller"].round(2),
        accuracy=rows["accuracy"].round(4),
        accuracy_at_budget=rows["accuracy_at_budget"].round(4),
        step_s=rows["step_s"].round(3),
        compute_s=rows["compute_s"].round(3),
        comm_s=rows["comm_s"].round(3),
        device_cpu_ms=rows["device_cpu_ms"].round(2),
    )


def _setup(plan: exp.Plan, budget: float) -> str:
    p, d = plan.params, plan.dataset
    calibration = "a calibrated speed factor (edgelab.emulation.profiles.calibrate)"
    return (
        f"Sync-SGD (`ps_sync`, the server averages every batch) of LeNet-MLP on {d.n_train} MNIST digits "
        f"({d.source}) split over N={p.n_devices} emulated {plan.profile.name} devices, batch {p.batch_size}, "
        f"learning rate {p.learning_rate:g}, {p.steps or 'all'} batches per device; accuracy of the global model on "
        f"{d.n_test} test digits every {p.eval_every} rounds. Each device compresses its round delta "
        "(edgelab.sync.compress, its residual kept on the device under error feedback) and the server decodes before "
        f"it averages. `bytes_per_step`: serialized bytes one device sends per step (Dask's serialization, framing "
        f"included); `accuracy_at_budget`: the last evaluation within {budget / 1e6:.2f} MB uploaded by all devices "
        f"(what fp32 uploads in {p.budget_rounds} rounds); `step_s`: emulated time per step with every device "
        f"behind a {p.link_mbps:g} Mbit/s link, CPU time scaled by {calibration}. Only uploads are compressed: "
        "the server broadcasts the dense fp32 weights, which stay in every step's time."
    )


def render_report(
    root: Path, plan: exp.Plan, stored: list[Any], *, notebook: str, parameters: dict[str, Any]
) -> list[ReportItem]:
    """The notebook's items (``edgelab.papers.notebook.report``): ``render``."""
    return render(root, plan, stored, notebook=notebook, parameters=parameters)


def render(
    root: Path, plan: exp.Plan, stored: list[Any], *, notebook: str, parameters: dict[str, Any]
) -> list[ReportItem]:
    """Write both ids' figures and tables; return their manifest entries."""
    p = plan.params
    summary, curves = exp.summarize(plan, stored), exp.curves(plan, stored)
    density, check, ratios = exp.density(plan, stored), exp.randomk_check(plan, stored), exp.payload_ratios(plan)
    budget = exp.byte_budget(plan, stored)
    source = data_source(plan.dataset.provenance())
    clock = CLOCK.format(link=p.link_mbps)
    items = []
    accuracies, sparsity = exp.final_accuracies(plan, stored), exp.sparsity_runs(plan, stored)
    quant = quant_verdict(summary, ratios, accuracies)
    table = _scheme_table(summary, exp.QUANT)
    md = [
        f"# {QUANT_ID}: 1-bit, ternary and QSGD gradients in Sync-SGD",
        "",
        "The survey (l. 293): 1-bit quantisation with error feedback [74], TernGrad's {-1, 0, 1} with layer-wise "
        "scaling and clipping [75], QSGD's choice of bits [76]; values: 1 bit, {-1, 0, 1}.",
        "",
        _setup(plan, budget),
        "",
        markdown_table(table),
        "",
        "Payload of one LeNet-MLP delta before the pickle's framing (`smaller_before_scales`: against fp32 without "
        "the float32 scale per tensor; the catalog derives 32x for 1 bit and >= 16x for ternary). QSGD's levels are "
        "bit-packed at bit_length(s) bits plus a sign bit (the paper's Elias coding would be smaller):",
        "",
        markdown_table(ratios[ratios["scheme"].isin(exp.QUANT)].round(3)),
        "",
        quant.markdown(),
    ]
    png = save_figure(draw_quant(summary, curves, plan, budget), QUANT_ID, root=root)
    files = [png, *save_table(table, "\n".join(md) + "\n", QUANT_ID, root=root)]
    rest = {"data_source": source, "clock": clock, "notebook": notebook, "parameters": parameters,
            "reduction": reduction(plan)}  # fmt: skip
    items.append(ReportItem.from_verdict(QUANT_ID, files, quant, paper_values_shown=True, **rest))
    sparse = sparsify_verdict(summary, density, check, accuracies, sparsity)
    table = _scheme_table(summary, exp.SPARSIFY)
    md = [
        f"# {SPARSIFY_ID}: top-k with local accumulation, DGC, an eSGD-like rule and random-k in Sync-SGD",
        "",
        "The survey (l. 297): gradients are sparse, so only significant ones need sending (DGC [78] sends those "
        "above a threshold and accumulates the rest locally); ESGD [77] keeps its coordinates while the loss falls "
        "and otherwise draws them at random by weight value; [79] drops gradients at random and scales the kept ones "
        "up to stay unbiased. No values. Here top-k keeps the ceil(density x n) largest |x| of each tensor and "
        "accumulates the rest in the device's residual; `dgc` adds DGC's momentum correction and momentum factor "
        "masking (momentum on the devices; no warm-up); `esgd` keeps last round's coordinates while the device's "
        "loss falls, else draws as many by |weight|, the rest in its residual; random-k keeps each coordinate with "
        "probability p and sends x/p (the mask travels as a seed).",
        "",
        _setup(plan, budget),
        "",
        markdown_table(table),
        "",
        f"Density of {p.gradient_batches} real fp32 deltas, one device's first batches from the seeded initial "
        "weights (`zero`: share exactly 0, e.g. weights of MNIST's always-blank border pixels; `for_99`: share of "
        "coordinates holding 99% of the squared norm; `top_q`: share of the squared norm the largest q hold):",
        "",
        markdown_table(density.round(4)),
        "",
        f"Random-k over {p.draws} seeded draws of the first of those deltas:",
        "",
        markdown_table(check.round(4)),
        "",
        sparse.markdown(),
    ]
    png = save_figure(draw_sparsify(summary, curves, density, check, plan, budget), SPARSIFY_ID, root=root)
    files = [png, *save_table(table, "\n".join(md) + "\n", SPARSIFY_ID, root=root)]
    items.append(ReportItem.from_verdict(SPARSIFY_ID, files, sparse, paper_values_shown=False, **rest))
    return items
