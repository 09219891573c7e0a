"""Park et al. 2020, LeNet items: park2020/table1, table2 and fig4a-d.

Each item shows the measured values beside the paper's, the spread of its
repeated cells, and its verdict (``edgelab.report.verdict``: the cells fitted and
predicted, every check with its rule, evidence basis and runs, the noise, the
modelling choices), and is written to ``reports/park2020/`` with its manifest
entry and how its run is smaller than the paper's. Elapsed times and CPU
utilisation are on the run's primary clock (the device model's, deterministic;
measured wall time on a real cluster), projected to the paper's 60,000-sample
epoch; memory and host CPU are host measurements; accuracy is trained. A
measured value is judged with three runs behind it: for accuracy, runs with
seeds of their own.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, TypedDict, Unpack

import numpy as np
import pandas as pd

from edgelab.common import checks
from edgelab.papers.park2020.hardware_figures import hardware_figures, judge_fig4, lenet_choices, lenet_reduction
from edgelab.papers.park2020.lenet import PAPER_TRAIN_SIZE, TABLE_OF_MODEL, LenetSummary, Plan
from edgelab.papers.park2020.runs import (
    CLOCK_LABEL,
    DEVICE_MODEL_EXACT,
    assumptions,
    cell_medians,
    clock_basis,
    contention_line,
    error_bars,
    long_rows,
    paper_series,
    recovery_records,
    run_repeats,
    run_values,
    seed_values,
    spread_row,
)
from edgelab.report import verdict as policy
from edgelab.report.manifest import ReportItem
from edgelab.report.style import PAPER_STYLE, apply_style, markdown_table, save_figure, save_table
from edgelab.report.verdict import Basis, Check, Noise, Verdict, noise_of

__all__ = ["hardware_figures", "judge_fig4", "judge_time_table", "render_lenet", "render_report"]


SETTING_LABEL = {"full": "each device iterates the full dataset", "shard": "each device iterates its 1/N shard"}


def render_report(
    root: Path, plan: Plan, summary: LenetSummary, *, notebook: str, parameters: dict[str, Any]
) -> list[ReportItem]:
    """The notebook's items (``edgelab.papers.notebook.report``): ``render_lenet``."""
    return render_lenet(summary, root=root, notebook=notebook, parameters=parameters)


def render_lenet(
    summary: LenetSummary, *, root: Path | None = None, notebook: str = "", parameters: dict[str, Any] | None = None
) -> list[ReportItem]:
    """Render every LeNet item the summary has data for."""
    apply_style()
    common = {"data_source": summary.dataset, "notebook": notebook, "parameters": parameters or {}}
    common["reduction"] = lenet_reduction(summary)
    items = []
    for model, item_id in TABLE_OF_MODEL.items():
        if (summary.runs["model"] == model).any():
            items.append(_time_table(summary, model, item_id, root, common))
    if (summary.runs["model"] == "cnn").any():
        items += hardware_figures(summary, root, common)
    return items


# --------------------------------------------------------------- helpers ----


def _recovery_lines(summary: LenetSummary, model: str) -> list[str]:
    rec = summary.recoveries[summary.recoveries["model"] == model]
    if rec.empty:
        return []
    lines = ["", "Recoveries (a device lost and brought back; the run's result is the undisturbed one):", ""]
    for r in rec.itertuples():
        lines.append(
            f"- N={r.devices} {r.worker_data} (repeat {r.repeat}): {r.device} lost during {r.phase} {r.at}, "
            f"back after {r.back_s:.1f} s, {r.time_lost_s:.1f} s lost"
        )
    return lines


def _link_model_lines(summary: LenetSummary, model: str, setting: str, paper_time: pd.Series) -> list[str]:
    """The same runs under each link model (labelled alternatives; the verdict judges the chosen one)."""
    alt = summary.link_models
    if alt.empty:
        return []
    alt = alt[(alt["model"] == model) & (alt["worker_data"] == setting)]
    lines = [
        "",
        f"Link models, {setting} setting (the same runs recomposed, each fitted on its own N=1 cell; "
        f"alternatives, not the verdict):",
        "",
        "| link model | speed factor | slope (s/device) | paper's slope, same N | median error | worst error |",
        "|---|---|---|---|---|---|",
    ]
    for name, rows in alt.groupby("link_model", sort=False):
        cells = rows.groupby("devices")["projected_s"].median()
        shared = [n for n in cells.index if n in paper_time.index]
        predicted = [n for n in shared if n != 1]
        if len(shared) <= 1 or not predicted:
            continue
        slope = np.polyfit(shared, cells[shared].to_numpy(float), 1)[0]
        paper_slope = np.polyfit(shared, paper_time[shared].to_numpy(float), 1)[0]
        errors = (cells[predicted] / paper_time[predicted] - 1).abs()
        lines.append(
            f"| {name} | {rows['speed_factor'].iloc[0]:.2f} | {slope:+.0f} | {paper_slope:+.0f} | "
            f"{errors.median():.0%} | {errors.max():.0%} at N={errors.idxmax()} |"
        )
    return lines


def _clock_line(summary: LenetSummary, model: str, n_train: int) -> str:
    cal = summary.calibration[model]
    clock = cal["clock"]
    text = f"Clock: {CLOCK_LABEL[clock]}, projected from {n_train:,} to {PAPER_TRAIN_SIZE:,} samples per epoch."
    if clock == "device_model":
        text += f" {cal['device_model']}; every other cell, of every table, is predicted by it."
    if clock != "wall":
        fitted = cal.get("calibrated_speed_factor")
        text += (
            f" Per-table alternative (labelled 'calibrated'): speed factor {_fmt(fitted)} fitted on {cal['cell']}, "
            f"the median of its {cal.get('fitted_on_runs', 0)} runs; nominal {cal['nominal_speed_factor']:.2f}."
        )
    return text


# --------------------------------------------------------------- tables ----


class TableLabels(TypedDict, total=False):
    """How a time/accuracy table names its settings and choices: keywords of ``judge_time_table``.

    ``settings``: the judged setting's name and the other's (default ``("full", "shard")``); ``choices``: the
    modelling choices the paper leaves open, listed on the verdict.
    """

    settings: tuple[str, str]
    choices: list[str]


def judge_time_table(
    paper_time: pd.Series,
    time: pd.Series,
    paper_acc: pd.Series,
    acc: pd.Series,
    *,
    fitted: list[int],
    n_train: int,
    basis: Basis = Basis.MODELLED,
    other: pd.Series | None = None,
    **labels: Unpack[TableLabels],
) -> Verdict:
    """The verdict of a time/accuracy table: level, trend and slope of the time, the accuracy, a control.

    ``time`` (the judged setting) repeats a device count once per repeated
    run, on a clock whose values rest on ``basis``: the device model's
    (``MODELLED``, deterministic: its repeats add nothing) or a measured one
    (CPU time x a factor, wall time: its repeats are its noise). ``fitted``
    lists the device counts whose time was fitted to the paper. ``acc``
    repeats a device count once per independent run (its own seed): accuracy
    is judged at the cells with the most runs, with that many runs behind it.
    ``other`` is the other setting's time: on a measured clock its repeats
    count in the noise, and at N=1 (the same computation) it is the control.
    ``labels``: ``TableLabels``.
    """
    checks.keywords("judge_time_table", labels, TableLabels)
    settings, choices = labels.get("settings", ("full", "shard")), labels.get("choices", [])
    measured = basis.measured
    noises = {settings[0]: noise_of(time)}
    if other is not None:
        noises[settings[1]] = noise_of(other)
    time_noise = Noise.combine(noises) if measured else Noise.none(DEVICE_MODEL_EXACT)
    acc_noise = noise_of(acc)
    cells, acc_cells = cell_medians(time), cell_medians(acc)
    predicted = [n for n in cells.index if n not in fitted and n in paper_time.index]
    found = [
        policy.level(paper_time, cells, predicted, time_noise, basis=basis, unit=" s"),
        policy.trend(cells, +1, time_noise, claim="time", basis=basis),
        policy.slope(paper_time, cells, time_noise, basis=basis, unit=" s"),
        _accuracy(paper_acc, acc, n_train),
    ]
    if measured and other is not None and 1 in time.index and 1 in other.index:
        what = f"N=1 {settings[0]} and {settings[1]} (the same computation)"
        found.append(policy.control(time[time.index == 1], other[other.index == 1], what=what))
    # The item's noise: the measured values' spread (the accuracy's; the time's too on a measured clock).
    noise = Noise.combine({**(noises if measured else {}), f"accuracy {settings[0]}": acc_noise})
    if not measured:
        noise = Noise.none(f"time: {DEVICE_MODEL_EXACT}; accuracy: {noise.describe()}")
    return policy.decide(
        found,
        fitted=[f"N={n} time (the calibration cell)" for n in fitted],
        predicted=[f"N={n} time" for n in predicted] + [f"N={n} accuracy" for n in acc_cells.index],
        noise=noise,
        choices=choices or [],
    )


def _accuracy(paper_acc: pd.Series, acc: pd.Series, n_train: int) -> Check:
    """The accuracy at the cells with the most independent runs (all cells when none has ``MIN_REPEATS``)."""
    runs = acc.groupby(level=0).count()
    runs = runs[runs.index.isin(paper_acc.index)]
    if runs.empty:
        return policy.accuracy(paper_acc, cell_medians(acc), n_train=n_train, paper_n_train=PAPER_TRAIN_SIZE, runs=0)
    judged = runs.index[runs == runs.max()] if runs.max() >= policy.MIN_REPEATS else runs.index
    check = policy.accuracy(
        paper_acc,
        cell_medians(acc)[judged],
        n_train=n_train,
        paper_n_train=PAPER_TRAIN_SIZE,
        runs=int(runs[judged].min()),
    )
    if len(judged) < len(runs):
        left = [int(n) for n in runs.index if n not in judged]
        note = f"judged at N={[int(n) for n in judged]} ({int(runs.max())} seeds each); N={left} ran fewer: shown"
        check = replace(check, note="; ".join(p for p in (check.note, note) if p))
    return check


def _time_table(
    summary: LenetSummary, model: str, item_id: str, root: Path | None, common: dict[str, Any]
) -> ReportItem:
    import matplotlib.pyplot as plt

    runs = summary.runs[summary.runs["model"] == model]
    paper_time = paper_series(item_id, "elapsed_time_s")
    paper_acc = paper_series(item_id, "validation_accuracy")
    clock = summary.calibration[model]["clock"]
    clocks = [c for c in summary.clocks if (runs["clock"] == c).any()]
    settings = sorted(runs["worker_data"].unique())
    headline = "full" if "full" in settings else settings[0]
    n_train = int(runs["n_train"].iloc[0])

    long = long_rows("paper", "elapsed_time_s", paper_time) + long_rows("paper", "validation_accuracy", paper_acc)
    wide: dict[str, Any] = {"paper elapsed time (s)": paper_time}
    for c in clocks:
        for wd in settings:
            values = run_values(runs, c, wd, "projected_s")
            wide[f"{c}, {wd} (s)"] = cell_medians(values).round(0)
            if c == clock:
                wide[f"{c}, {wd}: range of repeats (s)"] = pd.Series(spread_row(noise_of(values)), dtype=object)
            long += [
                {"series": f"{wd} {c}", "devices": n, "metric": "elapsed_time_s", "value": v, "repeat": r}
                for (n, v), r in zip(values.items(), run_repeats(runs, c, wd), strict=True)
            ]
    wide["paper accuracy"] = paper_acc
    for wd in settings:
        a = cell_medians(run_values(runs, clock, wd, "accuracy"))
        wide[f"accuracy, {wd}"] = a.round(3)
        long += long_rows(f"measured {wd}", "validation_accuracy", a)
    table = pd.DataFrame(long).assign(id=item_id, model=model)
    grid = pd.DataFrame(wide).reindex(range(1, 11)).T
    grid.columns = [str(c) for c in grid.columns]

    others = [wd for wd in settings if wd != headline]
    verdict = judge_time_table(
        paper_time,
        run_values(runs, clock, headline, "projected_s"),
        paper_acc,
        seed_values(runs, clock, headline, "accuracy"),
        fitted=[1] if clock in ("calibrated", "device_model") else [],
        n_train=n_train,
        basis=clock_basis(clock),
        other=run_values(runs, clock, others[0], "projected_s") if others else None,
        settings=(headline, others[0] if others else ""),
        choices=lenet_choices(summary, headline),
    )
    md = "\n".join(
        [
            f"# {item_id}: time and accuracy, LeNet-{model.upper()} on MNIST, batch 64, sync per batch",
            "",
            _clock_line(summary, model, n_train),
            contention_line(summary, model),
            assumptions(summary, model),
            f"Settings: full = {SETTING_LABEL['full']}; shard = {SETTING_LABEL['shard']}. "
            f"The verdict judges the {headline} setting (a modelling choice: the paper does not say); the other is "
            "shown beside it.",
            _evidence_line(clock),
            f"Data: {summary.dataset['source']} ({summary.dataset['checksum_status']}).",
            "",
            verdict.markdown(),
            markdown_table(grid.reset_index().rename(columns={"index": "devices"})),
            *_link_model_lines(summary, model, headline, paper_time),
            *_recovery_lines(summary, model),
        ]
    )
    files = save_table(table, md, item_id, root=root)

    fig, (ax_t, ax_a) = plt.subplots(1, 2, figsize=(11, 4))
    ax_t.plot(paper_time.index, paper_time.to_numpy(), **PAPER_STYLE)
    for wd in settings:
        values = run_values(runs, clock, wd, "projected_s")
        cells = cell_medians(values)
        (line,) = ax_t.plot(cells.index, cells.to_numpy(), marker="o", label=f"{wd} ({clock})")
        error_bars(ax_t, noise_of(values), line.get_color())
    ax_t.set(xlabel="devices", ylabel=f"elapsed time per epoch (s), {clock} clock", xticks=range(1, 11))
    ax_a.plot(paper_acc.index, paper_acc.to_numpy(), **PAPER_STYLE)
    for wd in settings:
        a = cell_medians(run_values(runs, clock, wd, "accuracy"))
        ax_a.plot(a.index, a.to_numpy(), marker="o", label=f"measured, {wd}")
    ax_a.set(xlabel="devices", ylabel="validation accuracy", xticks=range(1, 11))
    ax_t.legend(fontsize=8, title="bars: range of repeats", title_fontsize=7)
    ax_a.legend(fontsize=8)
    fig.suptitle(f"{item_id} — LeNet-{model.upper()}: time and accuracy vs devices ({verdict.status})")
    files.append(save_figure(fig, item_id, root=root))
    return ReportItem.from_verdict(
        item_id,
        files,
        verdict,
        paper_values_shown=True,
        clock=CLOCK_LABEL[clock],
        recoveries=recovery_records(summary, model),
        **common,
    )


def _evidence_line(clock: str) -> str:
    """What the table's two kinds of value rest on, and how many runs each needs."""
    time = (
        "Time is measured (CPU time or wall time): judged with three runs of a cell (its repeats)."
        if clock_basis(clock).measured
        else "Time is the device model's (counted steps, FLOPs and bytes: deterministic, judged without repeats)."
    )
    return (
        f"{time} Accuracy is a trained value: judged with three independent runs of a cell, each with its own "
        "seed (a repeat with its cell's seed trains the same weights, so it is not a run of its own)."
    )


def _fmt(value: float | None) -> str:
    return "n/a (communication alone exceeds the paper's time)" if value is None else f"{value:.2f}"
