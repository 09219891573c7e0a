"""DDNN early exits (qiao/fig3-7) and the normalized entropy that drives them (qiao/eq-normalized-entropy).

fig3-7: the accuracy / communication trade-off of the threshold sweep, one
line per aggregation, each point labelled with its T (T = 0: everything goes
to the cloud; T = 1: everything exits locally), the share exiting locally and
the emulated latency against T, and the architecture drawn from the
instantiated model with the measured exit shares on its edges. The survey
gives no numbers; qiao/C20 is judged with the rule stated on the page, on
trained accuracies (``TRAINED``: judged with three trainings per aggregation),
and the passes routed for real must equal the sweep derived from the all-cloud
pass (``CORRECTNESS``).

eq-normalized-entropy: a definition (from the DDNN paper, not the survey's
text), checked on hand-made vectors and against scipy's entropy on every
local-exit softmax of the runs: the implementation's correctness, so the item
is at best "consistent"; its distribution for right and wrong local answers
is shown.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from edgelab.common.results import StoredRun
from edgelab.hierarchy import early_exit as ee
from edgelab.papers.qiao import early_exits as exp
from edgelab.report import verdict
from edgelab.report.manifest import ReportItem
from edgelab.report.style import apply_style, data_source, markdown_table, save_figure, save_table
from edgelab.report.verdict import ROUNDING_TOLERANCE, Basis, Noise

FIG_ID, EQ_ID = "qiao/fig3-7", "qiao/eq-normalized-entropy"
CLOCK = (
    "emulated (edgelab.hierarchy.early_exit_routing): each task's CPU time on its worker times its tier's speed factor "
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
    aggregation = plan.runs[-1].aggregation
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


def c20_verdict(
    judged: pd.DataFrame, table: pd.DataFrame | None = None, plan: exp.Plan | None = None
) -> verdict.Verdict:
    """qiao/C20 per aggregation on the trained accuracies, and the routed passes against the derived sweep.

    ``table`` is the sweep of every run (its ``repeat`` column counts the
    trainings behind each aggregation); ``plan`` lists the modelling choices.
    """
    rule = (
        f"some T > 0 sends <= {1 - exp.MIN_BYTES_CUT:.0%} of T=0's bytes upward with overall accuracy >= T=0's "
        f"- {exp.MAX_ACCURACY_DROP * 100:g} point; undecided if a drop beyond that is within 2 paired standard "
        "errors; tested only where the cloud exit beats the local one (acc T=0 > T=1); the median of the trainings"
    )
    table = table if table is not None else judged.assign(repeat=0)
    trainings = table.groupby("aggregation")["repeat"].nunique() if "repeat" in table else pd.Series(dtype=int)
    checks = []
    for _, r in judged.iterrows():
        runs = int(trainings.get(r["aggregation"], 1))
        base = f"{r['aggregation']}: accuracy {r['accuracy_T0']:.3f} at T=0 (all cloud), {r['accuracy_T1']:.3f} at T=1"
        if not r["judgeable"]:
            checks.append(
                verdict.holds(
                    f"C20 {r['aggregation']}",
                    None,
                    base,
                    rule,
                    basis=Basis.TRAINED,
                    runs=runs,
                    note="the cloud exit is no more accurate than the local one: nothing to keep, so the claim "
                    "cannot be tested on this training",
                    undecided="too small",
                )
            )
            continue
        found = (
            f"; T={r['threshold']:g} cuts {r['bytes_cut_pct']:.0f}% at accuracy {r['accuracy']:.3f}"
            if r["holds"]
            else ""
        )
        holds = None if pd.isna(r["holds"]) else bool(r["holds"])
        checks.append(
            verdict.holds(
                f"C20 {r['aggregation']}",
                holds,
                base + found,
                rule,
                basis=Basis.TRAINED,
                runs=runs,
                note="a larger drop is within the paired noise" if holds is None else "",
                undecided="noisy" if holds is None else "",
            )
        )
    if "agrees" in table and table["routed"].astype(bool).any():
        routed = table[table["routed"].astype(bool)]
        same = routed["agrees"].astype(bool)
        checks.append(
            verdict.holds(
                "routed equals derived",
                bool(same.all()),
                f"{int(same.sum())} of {len(routed)} routed (aggregation, repeat, T) passes",
                "every pass routed for real on the cluster exits, answers, sends up and counts the bytes exactly as "
                "derived from the all-cloud pass",
                basis=Basis.CORRECTNESS,
            )
        )
    at_zero = table[table["threshold"] == 0.0]
    noise = verdict.noise_of(at_zero.set_index("aggregation")["accuracy"], axis="aggregation")
    return verdict.decide(
        checks, fitted=[], predicted=list(judged["aggregation"]), noise=noise, choices=_choices(plan) if plan else []
    )


def _choices(plan: exp.Plan) -> list[str]:
    """What the survey leaves open and the run chose."""
    p = plan.params
    return [
        f"each of {p.devices} end devices sees its own noisy copy (Gaussian, sigma {p.noise}) of MNIST",
        f"the parts: a conv block of {p.filters} filters per device, a local exit at the edge aggregator, a conv "
        "and dense cloud exit; trained jointly on the sum of both exits' losses",
        f"the links: {p.device_mbps:g} Mbit/s, {p.device_latency_s * 1e3:g} ms round trip to the aggregator; an "
        f"assumed WAN uplink of {p.cloud_mbps:g} Mbit/s, {p.cloud_latency_s * 1e3:g} ms to the cloud",
        "the exit rule: eta <= T (qiao/P4: low entropy is high confidence)",
    ]


def reduction(plan: exp.Plan) -> str:
    """How the run is smaller than the full profile's (the survey gives no size)."""
    p, full = plan.params, exp.FULL_PROFILE
    parts = []
    if p.devices < full["devices"]:
        parts.append(f"{p.devices} end devices of {full['devices']}")
    if p.train_samples < full["train_samples"] or p.test_samples < full["test_samples"]:
        parts.append(f"{p.train_samples:,} training and {p.test_samples:,} test images of {full['train_samples']:,} "
                     f"and {full['test_samples']:,}")  # fmt: skip
    if p.epochs < full["epochs"]:
        parts.append(f"{p.epochs} epoch(s) of {full['epochs']}")
    if p.repeats < full["repeats"]:
        parts.append(f"{p.repeats} training(s) per aggregation of {full['repeats']}")
    if len(set(p.routed_thresholds) | {0.0}) < len(full["routed_thresholds"]):
        parts.append(f"T routed for real: {sorted(set(p.routed_thresholds) | {0.0})} (the rest derived)")
    return "; ".join(parts)


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
    """The unit checks of eta: hand-made vectors, and the runs' local softmaxes against scipy's entropy.

    ``holds``: equal to ``ROUNDING_TOLERANCE`` (float64 arithmetic on both sides).
    """
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
            "holds": verdict.within(abs(float(ee.normalized_entropy(v)) - e), ROUNDING_TOLERANCE),
        }
        for name, v, e in cases
    ]
    worst = float(np.max(np.abs(samples["eta_renormalized"] - samples["scipy_eta"])))
    rows.append(
        {
            "check": f"{len(samples)} local softmaxes vs scipy.stats.entropy(base = classes), max abs diff",
            "eta": worst,
            "expected": 0.0,
            "holds": verdict.within(worst, ROUNDING_TOLERANCE),
        }
    )
    return pd.DataFrame(rows)


def render_report(
    root: Path, plan: exp.Plan, stored: list[StoredRun], *, notebook: str, parameters: dict[str, Any]
) -> list[ReportItem]:
    """The notebook's items (``edgelab.papers.notebook.report``): ``render``."""
    return render(root, plan, stored, notebook=notebook, parameters=parameters)


def render(
    root: Path, plan: exp.Plan, stored: list[StoredRun], *, notebook: str, parameters: dict[str, Any]
) -> list[ReportItem]:
    """Write both items' figures and tables; return their manifest entries."""
    from scipy.stats import entropy

    runs = exp.first_runs(plan, stored)
    every = exp.sweep(plan, stored)
    table = every[every["repeat"] == 0].drop(columns="repeat").reset_index(drop=True)
    judged = exp.judge_c20(every)
    result = c20_verdict(judged, every, plan)
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
        "thresholds not routed is modelled (the cloud's compute in proportion to the samples sent up). The table "
        f"is the first of {p.repeats} training(s) per aggregation; qiao/C20 is judged on their median.",
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
        f"{_short_why(judged)}.",
        "",
        result.markdown(),
    ]
    files = [png, *save_table(shown, "\n".join(md) + "\n", FIG_ID, root=root)]
    rest = {"notebook": notebook, "parameters": parameters, "reduction": reduction(plan)}
    items = [
        ReportItem.from_verdict(
            FIG_ID, files, result, data_source=source, clock=CLOCK, paper_values_shown=False, **rest
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
    items.append(_render_eta(root, everything, checks, source, rest))
    return items


def _render_eta(
    root: Path,
    samples: pd.DataFrame,
    checks: pd.DataFrame,
    source: dict[str, Any],
    rest: dict[str, Any],
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
        "definition: the implementation meets it or not (uniform -> 1, one-hot -> 0, a hand-computed value, and "
        "scipy's entropy on every local softmax of the runs), a check of correctness that predicts nothing, so the "
        "item is at best consistent.",
        "",
        markdown_table(checks),
        "",
        "Mean eta of the local exit's right and wrong answers (observation, not judged):",
        "",
        markdown_table(means.mean().round(4).reset_index()),
    ]
    result = eta_verdict(checks)
    md += ["", result.markdown()]
    files = [png, *save_table(checks, "\n".join(md) + "\n", EQ_ID, root=root)]
    return ReportItem.from_verdict(
        EQ_ID, files, result, data_source=source, clock="none (a definition checked on values)",
        paper_values_shown=False, **rest,
    )  # fmt: skip


def eta_verdict(checks: pd.DataFrame) -> verdict.Verdict:
    """The unit checks of eta as correctness checks: the definition implemented, nothing predicted."""
    rule = f"eta equals the expected value to {ROUNDING_TOLERANCE:g} (float64)"
    found = [
        verdict.holds(
            str(r["check"]),
            bool(r["holds"]),
            f"eta {r['eta']:.6g}, expected {r['expected']:.6g}",
            rule,
            basis=Basis.CORRECTNESS,
        )
        for _, r in checks.iterrows()
    ]
    noise = Noise.none("eta is computed, not measured")
    return verdict.decide(found, fitted=[], predicted=[], noise=noise)
