"""DDNN early exits (qiao/fig3-7) and the normalized entropy that drives them (qiao/eq-normalized-entropy).

fig3-7: the accuracy / communication trade-off of the threshold sweep, one
line per aggregation, each point labelled with its T (T = 0: everything goes
to the cloud; T = 1: everything exits locally), the share exiting locally and
the emulated latency against T, and the architecture drawn from the
instantiated model with the measured exit shares on its edges. The survey
gives no numbers; qiao/C20 is judged with the rule stated on the page.

eq-normalized-entropy: a definition (from the DDNN paper, not the survey's
text), checked on hand-made vectors and against scipy's entropy on every
local-exit softmax of the runs; its distribution for right and wrong local
answers is shown.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from edgelab import early_exit as ee
from edgelab import verdict
from edgelab.experiments import harness
from edgelab.experiments import qiao_early_exits as exp
from edgelab.figures.style import apply_style, data_source, markdown_table, save_figure, save_table
from edgelab.report import ReportItem
from edgelab.results import StoredRun

FIG_ID, EQ_ID = "qiao/fig3-7", "qiao/eq-normalized-entropy"
CLOCK = (
    "emulated (edgelab.early_exit_routing): each task's CPU time on its worker times its tier's speed factor "
    "(end: pi3b, edge aggregator: pi4b, cloud: this host), plus link latency and serialized bytes over the link rate"
)
COLOURS = {"max": "C0", "average": "C1", "concat": "C2"}


def _architecture(ax: Any, plan: exp.Plan, summary: dict[str, Any], row: pd.Series, aggregation: str) -> None:
    """Boxes for the devices, the aggregator with its local exit and the cloud; measured shares on the edges."""
    from matplotlib.patches import FancyBboxPatch

    p = plan.params
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 6)
    ax.axis("off")

    def box(x: float, y: float, w: float, h: float, text: str, colour: str) -> None:
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.05", fc=colour, ec="black", alpha=0.9))
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=7.5)

    def arrow(start: tuple[float, float], end: tuple[float, float]) -> None:
        ax.annotate("", end, start, arrowprops={"arrowstyle": "->", "lw": 0.9, "color": "black"})

    shown = min(p.devices, 6)  # the first six devices at most
    step = 5.4 / shown
    device = f"{summary['parameters']['device']} params -> {tuple(summary['device_output_shape'])}"
    for i in range(shown):
        box(0.2, 0.3 + i * step, 2.0, step * 0.75, f"end-{i}: conv block\n{device}", "#dbe9f6")
        arrow((2.25, 0.3 + i * step + step * 0.37), (3.4, 3.0))
    ax.text(2.5, 5.75, f"{summary['device_bytes_per_sample'] / p.devices:.0f} B/sample each", fontsize=7)
    local = f"local exit (flatten, dense)\n{summary['parameters']['aggregator']} params"
    box(
        3.4,
        2.2,
        2.4,
        1.6,
        f"edge-0: {aggregation} of {p.devices}\n-> {tuple(summary['upward_shape'])}\n{local}",
        "#fde3c8",
    )
    arrow((5.85, 3.4), (7.0, 4.6))
    up = f"{100 - row['local_exit_pct']:.0f}% up\n{row['bytes_per_sample']:.0f} B/sample"
    ax.text(6.0, 4.6, up, fontsize=7.5, color="C3")
    arrow((5.85, 2.6), (7.0, 1.4))
    ax.text(
        6.0, 1.0, f"{row['local_exit_pct']:.0f}% exit locally\n(eta <= {row['threshold']:g})", fontsize=7.5, color="C2"
    )
    box(7.0, 4.1, 2.7, 1.3, f"cloud-0: conv, dense\nfinal exit\n{summary['parameters']['cloud']} params", "#e0e0e0")
    box(7.0, 0.8, 2.7, 1.0, "answer at the edge", "#d9f2d9")
    how = "routed on the cluster" if row["routed"] else "derived from the all-cloud pass"
    ax.set_title(f"DDNN as deployed ({aggregation}), exit shares at T = {row['threshold']:g} ({how})", fontsize=9)


def draw(table: pd.DataFrame, plan: exp.Plan, stored: dict[str, StoredRun]) -> Any:
    """Trade-off, exits and latency against T, and the architecture drawing."""
    import matplotlib.pyplot as plt

    apply_style()
    fig = plt.figure(figsize=(15, 9.5))
    grid = fig.add_gridspec(2, 3, height_ratios=[1, 1.05])
    trade, exits, latency = (fig.add_subplot(grid[0, i]) for i in range(3))
    for aggregation, rows in table.groupby("aggregation", sort=False):
        colour = COLOURS.get(str(aggregation), "C4")
        trade.plot(
            rows["bytes_per_sample"] / 1000, 100 * rows["accuracy"], "-o", color=colour, label=aggregation, markersize=4
        )
        for _, r in rows.iterrows():
            trade.annotate(
                f"{r['threshold']:g}",
                (r["bytes_per_sample"] / 1000, 100 * r["accuracy"]),
                fontsize=6.5,
                xytext=(3, 3),
                textcoords="offset points",
                color=colour,
            )
        routed = rows[rows["routed"]]
        trade.plot(
            routed["routed_bytes_per_sample"] / 1000,
            100 * routed["routed_accuracy"],
            "s",
            color=colour,
            fillstyle="none",
            markersize=9,
        )
        exits.plot(
            rows["threshold"],
            rows["local_exit_pct"],
            "-o",
            color=colour,
            markersize=4,
            label=f"{aggregation}: exit locally",
        )
        exits.plot(
            rows["threshold"],
            100 * rows["local_accuracy"],
            ":",
            color=colour,
            label=f"{aggregation}: local-exit accuracy",
        )
        latency.plot(rows["threshold"], rows["latency_ms"], "-o", color=colour, markersize=4, label=aggregation)
        latency.plot(
            routed["threshold"], routed["routed_latency_ms"], "s", color=colour, fillstyle="none", markersize=9
        )
    trade.set(
        xlabel="bytes sent edge -> cloud per sample (KB)",
        ylabel="overall accuracy (%)",
        title="accuracy / communication (labels: T; squares: routed)",
    )
    trade.set_xscale("symlog", linthresh=0.1)  # T = 1 sends 0 bytes; the all-cloud end is far to the right
    trade.legend(fontsize=8)
    exits.set(
        xlabel="threshold T (exit when eta <= T)", ylabel="%", title="samples exiting locally, local-exit accuracy"
    )
    exits.legend(fontsize=6.5)
    latency.set(
        xlabel="threshold T",
        ylabel="mean emulated latency per sample (ms)",
        title="latency (lines: derived; squares: routed)",
    )
    latency.legend(fontsize=8)
    # The drawing: the last aggregation, at the T qiao/C20's rule found, else the middle of the sweep.
    aggregation = plan.runs[-1]
    rows = table[table["aggregation"] == aggregation].reset_index(drop=True)
    judged = exp.judge_c20(rows).iloc[0]
    row = rows[rows["threshold"] == judged["threshold"]].iloc[0] if judged["holds"] else rows.iloc[len(rows) // 2]
    _architecture(fig.add_subplot(grid[1, :]), plan, stored[aggregation].summary, row, aggregation)
    p = plan.params
    fig.suptitle(
        f"qiao/fig3-7: DDNN, {p.devices} end devices with noisy views (sigma {p.noise}), "
        f"{plan.dataset.n_test} MNIST test images ({plan.dataset.source})"
    )
    fig.tight_layout()
    return fig


def c20_verdict(judged: pd.DataFrame) -> verdict.Verdict:
    """qiao/C20 per aggregation: reproduced where a T > 0 cuts bytes and keeps accuracy; not judged where untestable."""
    rule = (
        f"some T > 0 sends <= {1 - exp.MIN_BYTES_CUT:.0%} of T=0's bytes upward with overall accuracy >= T=0's "
        f"- {exp.MAX_ACCURACY_DROP * 100:g} point; undecided if a drop beyond that is within 2 paired standard "
        "errors; tested only where the cloud exit beats the local one (acc T=0 > T=1)"
    )
    checks = []
    for _, r in judged.iterrows():
        base = f"{r['aggregation']}: accuracy {r['accuracy_T0']:.3f} at T=0 (all cloud), {r['accuracy_T1']:.3f} at T=1"
        if not r["judgeable"]:
            checks.append(
                verdict.Check(
                    f"C20 {r['aggregation']}",
                    None,
                    base,
                    rule,
                    "the cloud exit is no more accurate than the local one: nothing to keep",
                )
            )
            continue
        found = (
            f"; T={r['threshold']:g} cuts {r['bytes_cut_pct']:.0f}% at accuracy {r['accuracy']:.3f}"
            if r["holds"]
            else ""
        )
        note = "a larger drop is within the paired noise" if r["holds"] is None else ""
        checks.append(verdict.Check(f"C20 {r['aggregation']}", r["holds"], base + found, rule, note))
    noise = "paired: sqrt(samples whose correctness changes from T=0) / samples, per T (column accuracy_se_vs_T0)"
    return verdict.decide(checks, fitted=[], predicted=list(judged["aggregation"]), noise=noise)


def _short_why(judged: pd.DataFrame) -> str:
    """One line: per aggregation, the T that cuts bytes with accuracy kept, or why it is not tested."""
    parts = []
    for _, r in judged.iterrows():
        if not r["judgeable"]:
            parts.append(
                f"{r['aggregation']}: not tested, the cloud exit ({r['accuracy_T0']:.3f}) is no more accurate "
                f"than the local one ({r['accuracy_T1']:.3f})"
            )
        elif r["holds"]:
            parts.append(
                f"{r['aggregation']}: T={r['threshold']:g} cuts upward bytes {r['bytes_cut_pct']:.0f}% at "
                f"accuracy {r['accuracy']:.3f} (all-cloud {r['accuracy_T0']:.3f})"
            )
        elif r["holds"] is None:
            parts.append(
                f"{r['aggregation']}: undecided, no T > 0 halves the bytes within 1 point of all-cloud accuracy "
                f"{r['accuracy_T0']:.3f}, but a T does within 2 paired standard errors more"
            )
        else:
            parts.append(
                f"{r['aggregation']}: no T > 0 halves the bytes within 1 point (+ 2 paired standard errors) of "
                f"all-cloud accuracy {r['accuracy_T0']:.3f}"
            )
    rule = "survey gives no numbers; C20 rule (bytes <= 50% of T=0, accuracy >= T=0's - 1 point): "
    return rule + "; ".join(parts)


def eta_checks(samples: pd.DataFrame) -> pd.DataFrame:
    """The unit checks of eta: hand-made vectors, and the runs' local softmaxes against scipy's entropy."""
    cases = [(f"uniform over {c}", np.full(c, 1 / c), 1.0) for c in (2, 10, 100)]
    cases += [
        ("one-hot over 10", np.eye(10)[3], 0.0),
        ("(0.9, 0.1)", np.array([0.9, 0.1]), -(0.9 * math.log(0.9) + 0.1 * math.log(0.1)) / math.log(2)),
    ]
    rows = [
        {
            "check": name,
            "eta": float(ee.normalized_entropy(v)),
            "expected": e,
            "holds": abs(float(ee.normalized_entropy(v)) - e) <= 1e-12,
        }
        for name, v, e in cases
    ]
    worst = float(np.max(np.abs(samples["eta_renormalized"] - samples["scipy_eta"])))
    rows.append(
        {
            "check": f"{len(samples)} local softmaxes vs scipy.stats.entropy(base = classes), max abs diff",
            "eta": worst,
            "expected": 0.0,
            "holds": worst <= 1e-12,
        }
    )
    return pd.DataFrame(rows)


def render(
    root: Path, plan: exp.Plan, stored: list[StoredRun], *, notebook: str, parameters: dict[str, Any]
) -> list[ReportItem]:
    """Write both items' figures and tables; return their manifest entries."""
    from scipy.stats import entropy

    runs = harness.by_run(plan, stored)
    table = exp.sweep(plan, stored)
    judged = exp.judge_c20(table)
    result = c20_verdict(judged)
    source = data_source(plan.dataset.provenance())
    p = plan.params
    png = save_figure(draw(table, plan, runs), FIG_ID, root=root)
    shown = table.drop(columns=["upward_bytes"]).round(4)
    agree = bool(table.loc[table["routed"], "agrees"].astype(bool).all())
    notes = {a: r.summary for a, r in runs.items()}
    md = [
        f"# {FIG_ID}: DDNN early exits, the threshold sweep",
        "",
        f"{p.devices} end devices each see their own noisy copy (Gaussian, sigma {p.noise}) of {plan.dataset.n_test} "
        f"MNIST test images and run a conv block; the edge aggregator combines their features (max, average or "
        "concatenation), classifies them at the local exit, and sends only the samples with eta > T (their ids and "
        "the combined tensor, the very tensor its local exit saw) to the cloud worker. Trained jointly on the sum of "
        f"both exits' losses in the client process: {p.train_samples} images, {p.epochs} epochs. Exit rule: "
        "eta <= T (qiao/P4: low entropy is high confidence); T = 0 keeps nothing local.",
        "",
        f"Derived from the all-cloud pass for every T; routed for real at T in {sorted(set(p.routed_thresholds))} "
        f"(columns routed_*): exits, predictions, cloud ids and upward bytes "
        f"{'agree exactly with the derivation' if agree else 'DO NOT all agree with the derivation'}. Latency of "
        "thresholds not routed is modelled (the cloud's compute in proportion to the samples sent up).",
        "",
        markdown_table(shown),
        "",
        "Devices to the aggregator, per sample (every T): "
        + ", ".join(f"{a} {s['device_bytes_per_sample']:.0f} B" for a, s in notes.items())
        + ". Client-side model and workers agree on "
        + ", ".join(
            f"{a} {100 * s['local_agrees_with_client']:.1f}% / {100 * s['cloud_agrees_with_client']:.1f}%"
            for a, s in notes.items()
        )
        + " of local / cloud answers.",
        "",
        "## qiao/C20: communication drops a lot while accuracy stays",
        "",
        markdown_table(judged.round(4)),
        "",
        result.markdown(),
    ]
    files = [png, *save_table(shown, "\n".join(md) + "\n", FIG_ID, root=root)]
    items = [
        ReportItem(
            FIG_ID,
            [str(f) for f in files],
            data_source=source,
            clock=CLOCK,
            paper_values_shown=False,
            status=result.status,
            why=_short_why(judged),
            notebook=notebook,
            parameters=parameters,
            verdict=result.to_dict(),
        )
    ]
    # eq-normalized-entropy: every run's local softmax, checked against scipy.
    samples = []
    for aggregation, r in runs.items():
        s = r.tables["samples"]
        probs = r.arrays["local_probs"].astype(np.float64)
        # scipy renormalizes (a float32 softmax sums to 1 within ~1e-7): both sides see the renormalized vector.
        probs = probs / probs.sum(axis=1, keepdims=True)
        samples.append(
            s.assign(
                aggregation=aggregation,
                eta_renormalized=ee.normalized_entropy(probs),
                scipy_eta=entropy(probs, base=probs.shape[1], axis=1),
            )
        )
    everything = pd.concat(samples, ignore_index=True)
    checks = eta_checks(everything)
    items.append(_render_eta(root, everything, checks, source, notebook, parameters))
    return items


def _render_eta(
    root: Path,
    samples: pd.DataFrame,
    checks: pd.DataFrame,
    source: dict[str, Any],
    notebook: str,
    parameters: dict[str, Any],
) -> ReportItem:
    import matplotlib.pyplot as plt

    apply_style()
    fig, axes = plt.subplots(
        1, samples["aggregation"].nunique(), figsize=(4.5 * samples["aggregation"].nunique(), 3.6), squeeze=False
    )
    bins = np.linspace(0, 1, 21)
    for ax, (aggregation, s) in zip(axes[0], samples.groupby("aggregation", sort=False), strict=True):
        right = s["local"] == s["label"]
        ax.hist(s.loc[right, "eta"], bins, alpha=0.6, label=f"local exit right ({right.sum()})", color="C2")
        ax.hist(s.loc[~right, "eta"], bins, alpha=0.6, label=f"local exit wrong ({(~right).sum()})", color="C3")
        ax.set(xlabel="normalized entropy eta of the local exit", ylabel="samples", title=str(aggregation))
        ax.legend(fontsize=7)
    fig.suptitle(f"{EQ_ID}: eta = -sum x_i log x_i / log|C| of the local exit's softmax (exit when eta <= T)")
    fig.tight_layout()
    png = save_figure(fig, EQ_ID, root=root)
    means = samples.assign(right=samples["local"] == samples["label"]).groupby(["aggregation", "right"], sort=False)[
        "eta"
    ]
    md = [
        f"# {EQ_ID}: normalized entropy",
        "",
        "eta(x) = -sum_i x_i log x_i / log|C| over the softmax x of the local exit; the survey names the criterion "
        "(line 319) without a formula, which comes from the DDNN paper. A sample exits locally when eta <= T. It is a "
        "definition: 'reproduced' means the implementation meets it (uniform -> 1, one-hot -> 0, a hand-computed "
        "value, and scipy's entropy on every local softmax of the runs).",
        "",
        markdown_table(checks),
        "",
        "Mean eta of the local exit's right and wrong answers (observation, not judged):",
        "",
        markdown_table(means.mean().round(4).reset_index()),
    ]
    files = [png, *save_table(checks, "\n".join(md) + "\n", EQ_ID, root=root)]
    holds = bool(checks["holds"].all())
    return ReportItem(
        EQ_ID,
        [str(f) for f in files],
        data_source=source,
        clock="none (a definition checked on values)",
        paper_values_shown=False,
        status="reproduced" if holds else "differs",
        why="a definition (from the DDNN paper): "
        + (
            "every unit check holds"
            if holds
            else "unit checks fail: " + ", ".join(checks.loc[~checks["holds"], "check"])
        ),
        notebook=notebook,
        parameters=parameters,
    )
