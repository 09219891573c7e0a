"""Zhang 2018's Table 5, Figure 4 and eq9: the job's duration as end devices fail, under each method.

Table 5 and Figure 4 hold the same values (the report: "the raw time data is
listed in Table 5"), so both items share one verdict: the report's claims
C30-C33 checked on the runs, and, when the runs are the report's job (200
tasks of 50 images on 8 devices, 0.5 s timeout), each value against the
report's. The durations are the fault-tolerance clock's, a model
(``Basis.MODELLED``): it charges Table 1's time, the link, the timeout and the
query interval, nothing measured; its repeats draw other failing devices. That
Without never finishes is the method's design (structural), and that every
answer delivered equals the undisturbed run's is correctness. eq9 (Reassign's
overhead = timeouts x t_comm) stands beside the clock's excess over no
failure, which charges the same timeouts: structural.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import kendalltau

from edgelab.common.results import StoredRun
from edgelab.papers.zhang2018 import faults as exp
from edgelab.report import verdict
from edgelab.report.manifest import ReportItem
from edgelab.report.style import data_source, markdown_table, save_figure, save_table
from edgelab.report.verdict import Basis, Check, Noise

CLOCK = (
    "the fault-tolerance clock (hierarchy.fault_tolerance): zhang2018/table1's end-device time per image for each "
    "answer, the end link for each send, the timeout for each send to a dead device, the monitor's query "
    "interval; every answer a real inference and every failure a real SIGKILL, taken in the clock's order"
)
COLOURS = {"Without": "C3", "Reassign": "C1", "Monitor": "C2", "Dask": "C0"}
FITTED = ["the end device's time per image (zhang2018/table1, the clock's calibration)"]
CHOICES = [
    "Monitor queries every device each heartbeat_s (the report does not say how often)",
    "a send to a dead device costs the timeout, whatever the device's state (on loopback a refusal is immediate)",
    "the end link of 1 Gbit/s (the report states no bandwidth)",
    "a failing device answers half its share, then its worker is SIGKILLed for good",
    "the failing devices are drawn from the seed, the same for every method at a number of failures and repeat",
]


def draw(table: pd.DataFrame, plan: exp.Plan) -> Any:
    """Duration against failed devices per method (markers), the report's Table 5 (dashed); ``x`` = never finished."""
    import matplotlib.pyplot as plt

    p = plan.params
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    finite = table.loc[np.isfinite(table["duration_s"]), "duration_s"]
    top = float(finite.max()) * 1.15 if len(finite) else 1.0
    for method, group in table.groupby("method", sort=False):
        colour = COLOURS.get(method, "C7")
        done = group[np.isfinite(group["duration_s"])]
        ax.plot(done["failures"], done["duration_s"], "-o", color=colour, label=f"{method} (this run)")
        never = group[~np.isfinite(group["duration_s"])]
        if len(never):
            ax.plot(never["failures"], [top] * len(never), "x", color=colour, markersize=9, label=f"{method}: never")
        paper = group[np.isfinite(group["report_s"])]
        if len(paper) and exp.is_report_job(plan):
            ax.plot(paper["failures"], paper["report_s"], "--", color=colour, alpha=0.6, label=f"{method} (report)")
    ax.set(
        xlabel="failed end devices",
        ylabel="time to finish the job (s, clock)",
        title=f"zhang2018/fig4: {p.tasks} tasks of {p.task_size} images on {p.end_devices} end devices, "
        f"timeout {p.timeout_s} s\n(x at the top: the job never finished)",
    )
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def checks(table: pd.DataFrame, plan: exp.Plan, summary: pd.DataFrame | None = None) -> list[Check]:
    """The report's claims C30-C33 on the runs, the values against Table 5 at the report's job, and the answers.

    ``summary`` (a row per run) adds the correctness check: every answer
    delivered under failures equals the undisturbed run's for its images.
    """
    p = plan.params
    d = table.pivot_table(index="failures", columns="method", values="duration_s", aggfunc="first")
    most = int(d.index.max())
    report_job = exp.is_report_job(plan)
    runs = int(table["repeats"].max()) if "repeats" in table and len(table) else 0
    found: list[Check] = []
    if "Without" in d:
        with_failures = d["Without"][d.index > 0]
        never = bool(np.isinf(with_failures).all() and np.isfinite(d["Without"].get(0, 0)))
        found.append(
            verdict.holds(
                "C30",
                None if with_failures.empty else never,
                ", ".join(f"{f} failed: {_s(v)}" for f, v in d["Without"].items()),
                "Without never finishes once a device fails, and finishes with none",
                basis=Basis.CONFIGURED,  # the method's design: it sends each task once
                note="no run with a failed device"
                if with_failures.empty
                else "Without sends a task once, by design: a dead device's tasks are never answered"
                if never
                else "",
                undecided="too small" if with_failures.empty else "",
            )
        )
    if "Reassign" in d and len(d) > 1:
        r = d["Reassign"]
        tau = kendalltau(r.index.to_numpy(float), r.to_numpy(float)).statistic
        growth = r.iloc[-1] / r.iloc[0]
        steep = bool(np.isfinite(r).all() and tau >= verdict.TREND_TAU and verdict.within(verdict.STEEP_FACTOR, growth))
        found.append(
            verdict.holds(
                "C31",
                steep,
                f"{_s(r.iloc[0])} -> {_s(r.iloc[-1])} ({growth:.1f}x) from {r.index[0]} to {most} failed, "
                f"tau {tau:+.2f}",
                f"Reassign always finishes and grows steeply: Kendall tau >= {verdict.TREND_TAU} and at least "
                f"{verdict.STEEP_FACTOR:g}x (the report: 8.8x from 0 to 6 failed)",
                basis=Basis.MODELLED,
                runs=runs,
            )
        )
    if {"Monitor", "Reassign"} <= set(d) and len(d) > 1:
        m, r = d["Monitor"], d["Reassign"]
        flat = m.iloc[-1] / m.iloc[0]
        faster = r.iloc[-1] / m.iloc[-1]
        holds = bool(
            np.isfinite(m).all()
            and verdict.within(flat, verdict.FLAT_FACTOR)
            and verdict.within(verdict.STEEP_FACTOR, faster)
        )
        found.append(
            verdict.holds(
                "C32",
                holds if report_job else None,
                f"Monitor {_s(m.iloc[0])} -> {_s(m.iloc[-1])} ({flat:.2f}x); Reassign / Monitor at {most} failed: "
                f"{faster:.1f}x",
                f"Monitor nearly flat (at most {verdict.FLAT_FACTOR:g}x from none to the most failures; the report: "
                f"1.45x) and at least {verdict.STEEP_FACTOR:g}x faster than Reassign at the most failures (the "
                "report: 5.9x at 6)",
                basis=Basis.MODELLED,
                runs=runs,
                note=""
                if report_job
                else f"{'would hold' if holds else 'would fail'} here; flatness is relative to the job: this one "
                f"takes {_s(m.iloc[0])} against a {p.heartbeat_s} s query interval; judged at the report's job",
                undecided="" if report_job else "too small",
            )
        )
    if 0 in d.index and "Without" in d:
        base = d.loc[0, "Without"]
        extra = {m: d.loc[0, m] / base - 1 for m in ("Reassign", "Monitor") if m in d}
        if extra:
            little = all(v > 0 and verdict.within(v, verdict.SMALL_OVERHEAD) for v in extra.values())
            found.append(
                verdict.holds(
                    "C33",
                    little,
                    ", ".join(f"{m} {v:+.1%}" for m, v in extra.items()) + " against Without, no failure",
                    "with no failure Reassign and Monitor cost a little more than Without (the report: +3.2%, "
                    f"+6.0%): each above 0% and at most {verdict.SMALL_OVERHEAD:.0%}",
                    basis=Basis.MODELLED,
                    runs=runs,
                    note="the clock charges the methods' bookkeeping nothing: with no failure all three send the "
                    "same tasks to the same devices"
                    if all(v == 0 for v in extra.values())
                    else "",
                )
            )
    paper = table[table["method"].isin(exp.PAPER_METHODS) & np.isfinite(table["report_s"])]
    if report_job and len(paper):
        keyed = paper.assign(cell=paper["method"] + " f=" + paper["failures"].astype(str)).set_index("cell")
        noise = _noise(summary) if summary is not None else Noise.none("no per-run table given")
        found.append(
            verdict.level(
                keyed["report_s"],
                keyed["duration_s"],
                list(keyed.index),
                noise,
                basis=Basis.MODELLED,
                unit=" s",
                axis="cell",
            )
        )
    else:
        found.append(
            verdict.holds(
                "level",
                None,
                f"this job is {p.tasks} tasks of {p.task_size} images on {p.end_devices} devices, timeout "
                f"{p.timeout_s} s",
                "each value within the tolerance of Table 5's, at the report's job (200 tasks of 50 on 8, 0.5 s)",
                basis=Basis.MODELLED,
                note="the seconds of another job are not the report's: run the full profile",
                undecided="too small",
            )
        )
    if summary is not None and len(summary):
        differ = summary[~summary["same_answers"]]
        found.append(
            verdict.holds(
                "answers",
                differ.empty,
                f"{int(summary['answered'].sum())} answers in {len(summary)} runs"
                + ("" if differ.empty else f"; {len(differ)} run(s) differ from the no-failure run"),
                "every answer delivered under failures equals the undisturbed run's for its images",
                basis=Basis.CORRECTNESS,
                note=""
                if differ.empty
                else "runs: " + ", ".join(f"{r.method} f={r.failures} repeat {r.repeat}" for r in differ.itertuples()),
            )
        )
    return found


def excess_table(table: pd.DataFrame) -> pd.DataFrame:
    """Seconds each method's failures add to its own no-failure time, measured and in the report."""
    rows = []
    for method, group in table[table["method"].isin(exp.PAPER_METHODS)].groupby("method", sort=False):
        base = group[group["failures"] == 0]
        if base.empty:
            continue
        for row in group[group["failures"] > 0].itertuples():
            rows.append(
                {
                    "method": method,
                    "failures": int(row.failures),
                    "added_s": _s(row.duration_s - float(base["duration_s"].iloc[0])),
                    "report_added_s": _s(row.report_s - float(base["report_s"].iloc[0])),
                }
            )
    return pd.DataFrame(rows)


def _s(value: float) -> str:
    return "never" if not math.isfinite(value) else f"{value:.2f} s"


def render_report(
    root: Path, plan: exp.Plan, stored: list[StoredRun], *, notebook: str, parameters: dict[str, Any]
) -> list[ReportItem]:
    """The notebook's items (``edgelab.papers.notebook.report``): ``render`` of the runs' summary."""
    return render(root, plan, exp.summarize(plan, stored), notebook=notebook, parameters=parameters)


def render(
    root: Path, plan: exp.Plan, summary: pd.DataFrame, *, notebook: str, parameters: dict[str, Any]
) -> list[ReportItem]:
    """Write Table 5, Figure 4 and eq9's items; return their manifest entries."""
    p = plan.params
    table = exp.table5(summary)
    found = checks(table, plan, summary)
    predicted = [f"{m} f={f}" for m, f in zip(table["method"], table["failures"], strict=True)]
    result = verdict.decide(found, fitted=FITTED, predicted=predicted, noise=_noise(summary), choices=CHOICES)
    data = plan.dataset.provenance()
    source = data_source(data)
    lost_answers = summary[~summary["same_answers"]]
    shown = table.assign(
        duration_s=[_s(v) for v in table["duration_s"]],
        report_s=[("Inf" if np.isinf(v) else f"{v:g}") if not np.isnan(v) else "-" for v in table["report_s"]],
        timeouts=table["timeouts"].round(1),
    )
    setup = (
        f"{p.tasks} tasks of {p.task_size} images on {p.end_devices} end devices ({p.network_name}); a failing device "
        f"answers {plan.fail_after} tasks, then its worker is SIGKILLed for good; timeout {p.timeout_s} s per send "
        f"to a dead device; Monitor queries every device each {p.heartbeat_s} s (the report does not say how "
        f"often); {p.repeats} repeat(s), the same failing devices for every method. The report's job is "
        f"{exp.REPORT_JOB['tasks']} tasks of {exp.REPORT_JOB['task_size']} images."
    )
    integrity = (
        f"Every answer delivered once: {int(summary['answered'].sum())} answers in {len(summary)} runs, each equal to "
        "the no-failure run's for its images"
        if lost_answers.empty
        else f"{len(lost_answers)} run(s) delivered answers that differ from the no-failure run's"
    )
    excess = excess_table(table)
    md = [
        "# zhang2018/table5: time to finish the job with failed devices, per fault-tolerance method",
        "",
        setup,
        "",
        markdown_table(shown),
        "",
        "What the failures add to each method's no-failure time, beside what they add in the report (its "
        "no-failure job takes 24.9 s where eq1 on its own Table 1 gives 6.5 s: the rest is its assigner's own "
        "cost, which this clock does not model, as claim C16 says of End):",
        "",
        markdown_table(excess) if len(excess) else "(no failure-free run to compare with)",
        "",
        f"{integrity}. `Dask` is Dask's own recovery (its scheduler moves a dead worker's tasks), beyond the report.",
        "",
        result.markdown(),
    ]
    png = save_figure(draw(table, plan), "zhang2018/fig4", root=root)
    t5 = save_table(shown, "\n".join(md) + "\n", "zhang2018/table5", root=root)
    fig_md = [
        "# zhang2018/fig4: time to finish the job against failed devices",
        "",
        setup,
        "",
        "The report plots Table 5's values; so does this figure (see zhang2018/table5 for the numbers).",
        "",
        result.markdown(),
    ]
    f4 = save_table(shown, "\n".join(fig_md) + "\n", "zhang2018/fig4", root=root)
    common = {
        "data_source": source,
        "clock": CLOCK,
        "notebook": notebook,
        "parameters": parameters,
        "reduction": exp.reduction(plan),
    }
    items = [
        ReportItem.from_verdict("zhang2018/table5", t5, result, paper_values_shown=True, **common),
        ReportItem.from_verdict("zhang2018/fig4", [png, *f4], result, paper_values_shown=True, **common),
    ]
    model = exp.eq9(plan, summary)
    if len(model):
        text = [
            "# zhang2018/eq9: Overhead = N_t x t_comm",
            "",
            "Reassign's timeouts (N_t: sends to dead devices, counted in each run) times t_comm "
            f"({p.timeout_s} s), beside its excess on the clock over the run with no failure. The excess also holds "
            "the dead devices' tasks done again on fewer devices. The catalog's derived model (not the report's) "
            "expects lost / (1 - f / n) timeouts; it counts every send of a lost task, the successful one too.",
            "",
            markdown_table(model.round(3)),
        ]
        result9 = verdict.decide(
            [eq9_check(model)],
            fitted=FITTED,
            predicted=[f"Reassign f={f}" for f in model.loc[model["failures"] > 0, "failures"]],
            noise=Noise.none("timeouts counted and the clock's excess of the same runs: nothing measured"),
            choices=CHOICES[1:3],
        )
        text += ["", result9.markdown()]
        files = save_table(model, "\n".join(text) + "\n", "zhang2018/eq9", root=root)
        items.append(ReportItem.from_verdict("zhang2018/eq9", files, result9, paper_values_shown=True, **common))
    return items


def eq9_check(model: pd.DataFrame) -> Check:
    """eq9 (counted timeouts x t_comm) against Reassign's excess on the clock, which charges each timeout too.

    The clock's excess also holds the lost tasks done again on fewer devices,
    so the check says how much of it eq9's term makes: structural, both sides
    charging the same timeouts.
    """
    failed = model[model["failures"] > 0].set_index("failures")
    if failed.empty:
        return verdict.holds(
            "eq9",
            None,
            "no run with a failed device",
            "eq9 within the level tolerance of Reassign's excess",
            basis=Basis.SAME_FORMULA,
            undecided="too small",
        )
    check = verdict.level(
        failed["excess_s"],
        failed["eq9_overhead_s"],
        list(failed.index),
        Noise.none("counted"),
        basis=Basis.SAME_FORMULA,
        unit=" s",
        axis="f",
        name="eq9",
    )
    ratio = failed["eq9_overhead_s"] / failed["excess_s"]
    return replace(
        check,
        measured=f"timeouts x t_comm are {ratio.min():.0%}-{ratio.max():.0%} of Reassign's excess ({check.measured})",
        note="the rest of the excess: the lost tasks done again on fewer devices",
    )


def _noise(summary: pd.DataFrame) -> verdict.Noise:
    finished = summary[np.isfinite(summary["duration_s"])]
    keyed = finished.set_index(finished["method"] + " f=" + finished["failures"].astype(str))["duration_s"]
    return verdict.noise_of(keyed)
