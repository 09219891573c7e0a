"""Gradient quantisation and sparsification in Sync-SGD (qiao/method-grad-quant, qiao/method-grad-sparsify).

Each id: accuracy of the global model against the bytes all devices uploaded
(one curve per scheme), the serialized bytes one device sends per step, and
the emulated time per step behind a slow link; sparsification adds the
measured density of real fp32 deltas per layer and random-k's unbiasedness
over many draws. The survey states only 1 bit and {-1, 0, 1}; the payload
sizes those imply are checked exactly, the claims C23-C26 on accuracy only
when the runs are long enough to decide them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from edgelab.experiments import qiao_grad_compression as exp
from edgelab.figures.style import apply_style, data_source, markdown_table, save_figure, save_table
from edgelab.reference import load_reference
from edgelab.report import ReportItem
from edgelab.verdict import ACCURACY_TOLERANCE, LEVEL_TOLERANCE, Check, Verdict, decide

QUANT_ID = "qiao/method-grad-quant"
SPARSIFY_ID = "qiao/method-grad-sparsify"
#: Rounds a run needs before its accuracy can decide a claim (the smoke profile's few rounds cannot).
MIN_ROUNDS = 100
#: A delta is called sparse when at most this share of its coordinates holds 99% of its squared norm.
SPARSE_FOR_99 = 0.5
#: Random-k's measured error of the mean may differ this much (relative) from the error its variance predicts.
UNBIASED_TOLERANCE = 0.1
CLOCK = (
    "emulated per step (edgelab.timeline.compose): each device's measured CPU time of the round (training and "
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


def _long_enough(summary: pd.DataFrame) -> bool:
    return bool(summary["rounds"].min() >= MIN_ROUNDS)


def _accuracy(summary: pd.DataFrame, scheme: str) -> float:
    row = summary[summary["scheme"] == scheme]
    return float(row["accuracy"].iloc[0]) if len(row) else float("nan")


def _gap_check(name: str, summary: pd.DataFrame, scheme: str, note: str = "") -> Check:
    """``scheme``'s final accuracy within ``ACCURACY_TOLERANCE`` of fp32's after the same steps."""
    fp32, acc = _accuracy(summary, "none"), _accuracy(summary, scheme)
    measured = f"{scheme} {acc:.3f} vs fp32 {fp32:.3f} after {int(summary['rounds'].min())} rounds"
    rule = f"fp32 - {scheme} <= {ACCURACY_TOLERANCE} after the same steps, runs of >= {MIN_ROUNDS} rounds"
    if np.isnan(acc) or not _long_enough(summary):
        return Check(name, None, measured, rule, "; ".join(filter(None, ["the run is too short to decide", note])))
    return Check(name, bool(fp32 - acc <= ACCURACY_TOLERANCE), measured, rule, note)


def _direction_check(name: str, summary: pd.DataFrame, better: str, worse: str) -> Check:
    """``better`` ends above ``worse`` by more than ``ACCURACY_TOLERANCE``; within it nothing is decided."""
    hi, lo = _accuracy(summary, better), _accuracy(summary, worse)
    measured = f"{better} {hi:.3f} vs {worse} {lo:.3f}"
    rule = f"{better} - {worse} > {ACCURACY_TOLERANCE} holds, < -{ACCURACY_TOLERANCE} fails (one run each)"
    if np.isnan(hi) or np.isnan(lo) or not _long_enough(summary):
        return Check(name, None, measured, rule, "the run is too short to decide")
    gap = hi - lo
    passed = True if gap > ACCURACY_TOLERANCE else False if gap < -ACCURACY_TOLERANCE else None
    return Check(name, passed, measured, rule, "" if passed is not None else "the difference is within one run's noise")


def quant_verdict(summary: pd.DataFrame, ratios: pd.DataFrame) -> Verdict:
    """The payload sizes the survey implies (exact), and C23, C24 on the runs."""
    paper = float(load_reference("qiao/derived-quant")["value"].iloc[0])
    sign = float(ratios.loc[ratios["scheme"] == "sign", "smaller_before_scales"].iloc[0])
    ternary = float(ratios.loc[ratios["scheme"] == "terngrad", "smaller_before_scales"].iloc[0])
    qsgd = (
        summary[summary["scheme"].str.startswith("qsgd:")]
        .assign(s=lambda f: f["scheme"].str[5:].astype(int))
        .sort_values("s")
    )
    checks = [
        Check("1 bit vs fp32 (qiao/derived-quant)", abs(sign / paper - 1) <= LEVEL_TOLERANCE,
              f"{sign:.3f}x smaller before the scales vs {paper:g}x", f"|error| <= {LEVEL_TOLERANCE:.0%}"),
        Check("ternary in <= 2 bits", ternary >= 16 * (1 - 1e-3), f"{ternary:.3f}x smaller before the scales",
              ">= 16x (up to one byte of padding)"),
        _gap_check("C23 sign with error feedback trains like fp32", summary, "sign_ef",
                   f"without feedback: sign {_accuracy(summary, 'sign'):.3f}"),
        _direction_check("C24 TernGrad's clipping helps", summary, "terngrad", "terngrad_noclip"),
        Check("C24 QSGD's bytes grow with its levels", bool(qsgd["bytes_per_step"].is_monotonic_increasing
              and qsgd["bytes_per_step"].is_unique), ", ".join(f"s={s}: {b:,.0f} B" for s, b in
              zip(qsgd["s"], qsgd["bytes_per_step"], strict=True)), "strictly increasing in s"),
    ]  # fmt: skip
    if len(qsgd) > 1:
        lo, hi = qsgd["scheme"].iloc[0], qsgd["scheme"].iloc[-1]
        checks.append(_direction_check("C24 more QSGD levels converge faster", summary, hi, lo))
    return decide(checks, fitted=[], predicted=list(summary["scheme"]), noise="not measured (one run per scheme)")


def sparsify_verdict(summary: pd.DataFrame, density: pd.DataFrame, check: pd.DataFrame) -> Verdict:
    """C25 (density, bytes, accuracy of top-k with accumulation) and C26 (random-k's unbiasedness)."""
    whole = density[density["layer"] == "all"].iloc[0]
    dense = float(summary.loc[summary["scheme"] == "none", "bytes_per_step"].iloc[0])
    topk = summary[summary["scheme"] == "topk:0.01"]
    unbiased, plain = check.iloc[0], check.iloc[1]
    errors = [abs(r["relative_error"] / r["expected"] - 1) for r in (unbiased, plain)]
    checks = [
        Check("C25 gradients are sparse", bool(whole["for_99"] <= SPARSE_FOR_99),
              f"{whole['for_99']:.1%} of the coordinates hold 99% of ||g||^2 ({whole['zero']:.1%} exactly 0; the "
              f"largest 1% hold {whole['top_0.01']:.1%})", f"<= {SPARSE_FOR_99:.0%} of the coordinates"),
        Check("C25 top-k 1% cuts the bytes sent", bool(len(topk) and dense / topk["bytes_per_step"].iloc[0] >= 10),
              f"{dense / topk['bytes_per_step'].iloc[0]:.1f}x fewer bytes per step" if len(topk) else "not run",
              ">= 10x fewer than fp32"),
        _gap_check("C25 top-k 1% with accumulation trains like fp32", summary, "topk:0.01"),
        Check("C26 rescaled random-k is unbiased", bool(max(errors) <= UNBIASED_TOLERANCE),
              f"mean of {int(unbiased['draws'])} draws off by {unbiased['relative_error']:.4f} (variance alone: "
              f"{unbiased['expected']:.4f}); not rescaled: {plain['relative_error']:.4f} (bias 1-p = "
              f"{plain['expected']:.4f})", f"both within {UNBIASED_TOLERANCE:.0%} of the prediction"),
    ]  # fmt: skip
    return decide(checks, fitted=[], predicted=list(summary["scheme"]), noise="not measured (one run per scheme)")


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
    calibration = "a calibrated speed factor (edgelab.devices.calibrate)"
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
    quant = quant_verdict(summary, ratios)
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
    rest = {"data_source": source, "clock": clock, "notebook": notebook, "parameters": parameters}
    items.append(ReportItem.from_verdict(QUANT_ID, files, quant, paper_values_shown=True, **rest))
    sparse = sparsify_verdict(summary, density, check)
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
