"""Park et al. 2020, LeNet items: park2020/table1, table2 and fig4a-d.

Each item shows the measured values beside the paper's, the spread of its
repeated cells, and its verdict (``edgelab.verdict``: the cells fitted and
predicted, every check with its rule, the noise), and is written to
``reports/park2020/`` with its manifest entry. Elapsed times and CPU
utilisation are on the run's primary clock (emulated device time, or measured
wall time on a real cluster), projected to the paper's 60,000-sample epoch;
memory and host CPU are host measurements.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from edgelab import verdict as policy
from edgelab.experiments.park2020_lenet import PAPER_TRAIN_SIZE, TABLE_OF_MODEL, LenetSummary
from edgelab.figures.style import PAPER_STYLE, apply_style, markdown_table, save_figure, save_table
from edgelab.reference import load_reference
from edgelab.report import ReportItem
from edgelab.verdict import Noise, Verdict, noise_of

SETTING_LABEL = {"full": "each device iterates the full dataset", "shard": "each device iterates its 1/N shard"}
CLOCK_LABEL = {
    "calibrated": "emulated device time, speed factor fitted on the paper's 1-device cell",
    "nominal": "emulated device time, nominal speed factor (host GEMM rate over the device's assumed rate)",
    "wall": "measured wall time on the attached cluster (nothing emulated, nothing fitted)",
}


def render_lenet(
    summary: LenetSummary, *, root: Path | None = None, notebook: str = "", parameters: dict[str, Any] | None = None
) -> list[ReportItem]:
    """Render every LeNet item the summary has data for."""
    apply_style()
    common = {"data_source": summary.dataset, "notebook": notebook, "parameters": parameters or {}}
    items = []
    for model, item_id in TABLE_OF_MODEL.items():
        if (summary.runs["model"] == model).any():
            items.append(_time_table(summary, model, item_id, root, common))
    if (summary.runs["model"] == "cnn").any():
        items += _hardware_figures(summary, root, common)
    return items


# --------------------------------------------------------------- helpers ----


def _paper_series(item_id: str, metric: str) -> pd.Series:
    ref = load_reference(item_id)
    rows = ref[ref["metric"] == metric]
    return pd.Series(rows["value"].to_numpy(float), index=rows["devices"].astype(int).to_numpy())


def _values(runs: pd.DataFrame, clock: str, worker_data: str, column: str) -> pd.Series:
    """Every run's value, indexed by device count (repeated cells repeat the index)."""
    rows = runs[(runs["clock"] == clock) & (runs["worker_data"] == worker_data)].sort_values(["devices", "repeat"])
    return pd.Series(rows[column].to_numpy(float), index=rows["devices"].to_numpy(int))


def _cells(values: pd.Series) -> pd.Series:
    """One value per device count: the median over its repeats."""
    return values.groupby(level=0).median()


def _long_rows(series: str, metric: str, values: pd.Series) -> list[dict[str, Any]]:
    """One long-format row per device count, for the csv beside each table."""
    return [{"series": series, "devices": n, "metric": metric, "value": v} for n, v in values.items()]


def _spread_row(noise: Noise) -> dict[int, str]:
    return {n: f"{lo:,.0f}-{hi:,.0f} ({n_runs} runs)" for n, (lo, _, hi, n_runs) in noise.cells.items() if n_runs > 1}


def _error_bars(ax: Any, noise: Noise, color: Any) -> None:
    for n, (lo, mid, hi, n_runs) in noise.cells.items():
        if n_runs > 1:
            ax.errorbar([n], [mid], yerr=[[mid - lo], [hi - mid]], color=color, capsize=4, linewidth=1)


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
        if len(shared) < 2 or not predicted:
            continue
        slope = np.polyfit(shared, cells[shared].to_numpy(float), 1)[0]
        paper_slope = np.polyfit(shared, paper_time[shared].to_numpy(float), 1)[0]
        errors = (cells[predicted] / paper_time[predicted] - 1).abs()
        lines.append(
            f"| {name} | {rows['speed_factor'].iloc[0]:.2f} | {slope:+.0f} | {paper_slope:+.0f} | "
            f"{errors.median():.0%} | {errors.max():.0%} at N={errors.idxmax()} |"
        )
    return lines


def _recovery_records(summary: LenetSummary, model: str) -> list[dict[str, Any]]:
    return summary.recoveries[summary.recoveries["model"] == model].to_dict("records")


def _assumptions(summary: LenetSummary, model: str) -> str:
    cal = summary.calibration[model]
    host = cal["host"]
    device_rate = (
        f"device {host['device_gflops']} GFLOPS assumed (not measured on a Pi)"
        if host.get("device_gflops") is not None
        else "the device is the host"
    )
    return (
        f"Assumptions: {summary.topology.describe()}; "
        f"host {host['host_gflops']} GFLOPS measured (single-thread GEMM), {device_rate}."
    )


def _clock_line(summary: LenetSummary, model: str, n_train: int) -> str:
    cal = summary.calibration[model]
    clock = cal["clock"]
    text = f"Clock: {CLOCK_LABEL[clock]}, projected from {n_train:,} to {PAPER_TRAIN_SIZE:,} samples per epoch."
    if clock != "wall":
        fitted = cal.get("calibrated_speed_factor")
        text += (
            f" Calibrated speed factor {_fmt(fitted)} (fitted on {cal['cell']}, the median of its "
            f"{cal.get('fitted_on_runs', 0)} runs); nominal {cal['nominal_speed_factor']:.2f}."
        )
    return text


# --------------------------------------------------------------- tables ----


def judge_time_table(
    paper_time: pd.Series,
    time: pd.Series,
    paper_acc: pd.Series,
    acc: pd.Series,
    *,
    fitted: list[int],
    n_train: int,
    control: tuple[float, float] | None = None,
) -> Verdict:
    """The verdict of a time/accuracy table: level, trend and slope of the time, the accuracy, a control.

    ``time`` and ``acc`` repeat a device count once per repeated run; ``fitted``
    lists the device counts whose time was fitted to the paper.
    """
    noise = noise_of(time)
    cells, acc_cells = _cells(time), _cells(acc)
    predicted = [n for n in cells.index if n not in fitted and n in paper_time.index]
    checks = [
        policy.level(paper_time, cells, predicted, noise, unit=" s"),
        policy.trend(cells, +1, noise, claim="time"),
        policy.slope(paper_time, cells, noise, unit=" s"),
        policy.accuracy(paper_acc, acc_cells, n_train=n_train, paper_n_train=PAPER_TRAIN_SIZE),
    ]
    if control is not None:
        checks.append(policy.control(*control, noise, what="N=1 full and shard (the same computation)"))
    return policy.decide(
        checks,
        fitted=[f"N={n} time (the calibration cell)" for n in fitted],
        predicted=[f"N={n} time" for n in predicted] + [f"N={n} accuracy" for n in acc_cells.index],
        noise=noise,
    )


def _time_table(
    summary: LenetSummary, model: str, item_id: str, root: Path | None, common: dict[str, Any]
) -> ReportItem:
    import matplotlib.pyplot as plt

    runs = summary.runs[summary.runs["model"] == model]
    paper_time = _paper_series(item_id, "elapsed_time_s")
    paper_acc = _paper_series(item_id, "validation_accuracy")
    clock = summary.calibration[model]["clock"]
    clocks = [c for c in summary.clocks if (runs["clock"] == c).any()]
    settings = sorted(runs["worker_data"].unique())
    headline = "full" if "full" in settings else settings[0]
    n_train = int(runs["n_train"].iloc[0])

    long = _long_rows("paper", "elapsed_time_s", paper_time) + _long_rows("paper", "validation_accuracy", paper_acc)
    wide: dict[str, Any] = {"paper elapsed time (s)": paper_time}
    for c in clocks:
        for wd in settings:
            values = _values(runs, c, wd, "projected_s")
            wide[f"{c}, {wd} (s)"] = _cells(values).round(0)
            if c == clock:
                wide[f"{c}, {wd}: range of repeats (s)"] = pd.Series(_spread_row(noise_of(values)), dtype=object)
            long += [
                {"series": f"{wd} {c}", "devices": n, "metric": "elapsed_time_s", "value": v, "repeat": r}
                for (n, v), r in zip(values.items(), _repeats(runs, c, wd), strict=True)
            ]
    wide["paper accuracy"] = paper_acc
    for wd in settings:
        a = _cells(_values(runs, clock, wd, "accuracy"))
        wide[f"accuracy, {wd}"] = a.round(3)
        long += _long_rows(f"measured {wd}", "validation_accuracy", a)
    table = pd.DataFrame(long).assign(id=item_id, model=model)
    grid = pd.DataFrame(wide).reindex(range(1, 11)).T
    grid.columns = [str(c) for c in grid.columns]

    time = _values(runs, clock, headline, "projected_s")
    ones = {wd: _cells(_values(runs, clock, wd, "projected_s")).get(1) for wd in settings}
    control = (ones["full"], ones["shard"]) if None not in (ones.get("full"), ones.get("shard")) else None
    verdict = judge_time_table(
        paper_time,
        time,
        paper_acc,
        _values(runs, clock, headline, "accuracy"),
        fitted=[1] if clock == "calibrated" else [],
        n_train=n_train,
        control=control,
    )
    md = "\n".join(
        [
            f"# {item_id}: time and accuracy, LeNet-{model.upper()} on MNIST, batch 64, sync per batch",
            "",
            _clock_line(summary, model, n_train),
            _assumptions(summary, model),
            f"Settings: full = {SETTING_LABEL['full']}; shard = {SETTING_LABEL['shard']}. "
            f"The verdict judges the {headline} setting; the other is shown beside it.",
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
        values = _values(runs, clock, wd, "projected_s")
        cells = _cells(values)
        (line,) = ax_t.plot(cells.index, cells.to_numpy(), marker="o", label=f"{wd} ({clock})")
        _error_bars(ax_t, noise_of(values), line.get_color())
    ax_t.set(xlabel="devices", ylabel=f"elapsed time per epoch (s), {clock} clock", xticks=range(1, 11))
    ax_a.plot(paper_acc.index, paper_acc.to_numpy(), **PAPER_STYLE)
    for wd in settings:
        a = _cells(_values(runs, clock, wd, "accuracy"))
        ax_a.plot(a.index, a.to_numpy(), marker="o", label=f"measured, {wd}")
    ax_a.set(xlabel="devices", ylabel="validation accuracy", xticks=range(1, 11))
    ax_t.legend(fontsize=8, title="bars: range of repeats", title_fontsize=7)
    ax_a.legend(fontsize=8)
    fig.suptitle(f"{item_id} — LeNet-{model.upper()}: time and accuracy vs devices ({verdict.status})")
    files.append(save_figure(fig, item_id, root=root))
    return ReportItem(
        item_id,
        [str(f) for f in files],
        clock=CLOCK_LABEL[clock],
        paper_values_shown=True,
        status=verdict.status,
        why=verdict.why,
        verdict=verdict.to_dict(),
        recoveries=_recovery_records(summary, model),
        **common,
    )


def _repeats(runs: pd.DataFrame, clock: str, worker_data: str) -> list[int]:
    rows = runs[(runs["clock"] == clock) & (runs["worker_data"] == worker_data)].sort_values(["devices", "repeat"])
    return rows["repeat"].astype(int).tolist()


# -------------------------------------------------------------- figure 4 ----

# item -> (column, y label, catalog metric, clock it is on, claim, direction)
_FIG4: dict[str, tuple[str, str, str, str, str, int]] = {
    "park2020/fig4a": (
        "cpu_pct",
        "CPU utilisation (% of the device's cores)",
        "cpu_utilization_pct",
        "primary",
        "CPU utilisation",
        -1,
    ),
    "park2020/fig4b": (
        "rss_mb_host",
        "memory (RSS, MB) per device worker, host measurement",
        "memory_usage_mb",
        "host measurement (memory has no clock)",
        "memory",
        +1,
    ),
    # Ganglia reports bytes_out/bytes_in as rates, so the paper's "KB" is read as KB/s.
    "park2020/fig4c": ("sent_kb_s", "KB/s sent per device (mean)", "network_send_kb", "primary", "traffic", +1),
    "park2020/fig4d": (
        "received_kb_s",
        "KB/s received per device (mean)",
        "network_receive_kb",
        "primary",
        "traffic",
        +1,
    ),
}

# Shown in each panel's CSV beside the plotted value: the other reading of the same quantity.
_FIG4_SECONDARY = {
    "park2020/fig4a": ("cpu_pct_host", "host CPU % of one core (contended host, not the device)"),
    "park2020/fig4b": ("working_set_mb", "working set above the framework baseline (MB)"),
    "park2020/fig4c": ("sent_kb_projected", "total KB sent per device per 60,000-sample epoch"),
    "park2020/fig4d": ("received_kb_projected", "total KB received per device per 60,000-sample epoch"),
}


def _paper_points(item_id: str) -> pd.DataFrame:
    """The paper's prose values of a fig4 panel, placed on the device axis."""
    ref = load_reference(item_id)
    points = []
    for _, row in ref.iterrows():
        cond = str(row["condition"])
        if "3 to 10 devices" in cond:
            points += [{"devices": n, "value": row["value"], "bound": "lower"} for n in range(3, 11)]
        elif "fewest" in cond or "1 device" in cond:
            points.append({"devices": 1, "value": row["value"], "bound": ""})
        elif "most devices" in cond or "10 devices" in cond:
            points.append({"devices": 10, "value": row["value"], "bound": ""})
        elif "2 devices" in cond:
            points.append({"devices": 2, "value": row["value"], "bound": ""})
    return pd.DataFrame(points, columns=["devices", "value", "bound"])


def judge_fig4(item_id: str, values: pd.Series) -> Verdict:
    """The verdict of a fig4 panel: the paper's stated direction with an effect size, and its values.

    ``values`` repeats a device count once per repeated run.
    """
    column, _, _, _, claim, direction = _FIG4[item_id]
    noise = noise_of(values)
    cells = _cells(values)
    paper = _paper_points(item_id)
    exact = paper[paper["bound"] == ""].set_index("devices")["value"]
    if item_id in ("park2020/fig4c", "park2020/fig4d"):
        # The paper shows no traffic at 1-2 devices and over 1000 KB from 3 on (P16, P17).
        checks = [
            policy.bound(cells, [1, 2], upper=0.0, claim="no traffic at 1-2 devices", unit=" KB/s"),
            policy.bound(cells, list(range(3, 11)), lower=1000.0, claim="over 1000 KB from 3 devices", unit=" KB/s"),
        ]
        predicted = [f"N={n}" for n in cells.index if n <= 10]
    else:
        shared = [n for n in exact.index if n in cells.index]
        checks = [
            policy.trend(cells, direction, noise, claim=claim),
            policy.effect(cells, direction, noise, claim=claim),
            policy.level(exact, cells, shared, noise, each=True),
        ]
        predicted = [f"N={n}" for n in cells.index]
    return policy.decide(checks, fitted=[], predicted=predicted, noise=noise)


def _hardware_figures(summary: LenetSummary, root: Path | None, common: dict[str, Any]) -> list[ReportItem]:
    import matplotlib.pyplot as plt

    cnn = summary.runs[summary.runs["model"] == "cnn"]
    clock = summary.calibration["cnn"]["clock"]
    settings = sorted(cnn["worker_data"].unique())
    headline = "full" if "full" in settings else settings[0]
    items = []
    for item_id, (column, ylabel, metric, on, _, _) in _FIG4.items():
        item_clock = f"{CLOCK_LABEL[clock]}" if on == "primary" else on
        paper = _paper_points(item_id)
        fig, ax = plt.subplots(figsize=(6, 4))
        rows = [
            {"series": "paper", "devices": int(r.devices), "value": r.value, "bound": r.bound}
            for r in paper.itertuples()
        ]
        for wd in settings:
            values = _values(cnn, clock, wd, column)
            cells = _cells(values)
            (line,) = ax.plot(cells.index, cells.to_numpy(), marker="o", label=f"measured, {wd}")
            _error_bars(ax, noise_of(values), line.get_color())
            rows += [
                {"series": f"measured {wd} {clock}", "devices": n, "value": v, "bound": ""} for n, v in cells.items()
            ]
            column2, label2 = _FIG4_SECONDARY[item_id]
            rows += [
                {"series": f"measured {wd} {clock}: {label2}", "devices": n, "value": v, "bound": ""}
                for n, v in _cells(_values(cnn, clock, wd, column2)).items()
            ]
        exact = paper[paper["bound"] == ""]
        ax.scatter(exact["devices"], exact["value"], color="black", marker="s", zorder=3, label="paper")
        lower = paper[paper["bound"] == "lower"]
        if not lower.empty:
            ax.scatter(
                lower["devices"], lower["value"], color="black", marker="^", zorder=3, label="paper (lower bound)"
            )
        verdict = judge_fig4(item_id, _values(cnn, clock, headline, column))
        ax.set(xlabel="devices", ylabel=f"{ylabel}, {clock} clock" if on == "primary" else ylabel, xticks=range(1, 11))
        ax.set_title(f"{item_id} — LeNet-CNN ({verdict.status})", fontsize=11)
        ax.legend(fontsize=8)
        table = pd.DataFrame(rows).assign(id=item_id, metric=metric)
        md = "\n".join(
            [
                f"# {item_id}",
                "",
                f"Clock: {item_clock}. Measured: the {headline} setting, median of repeats.",
                _assumptions(summary, "cnn"),
                "",
                verdict.markdown(),
            ]
        )
        tables = save_table(table, md, item_id, root=root)
        png = save_figure(fig, item_id, root=root)
        items.append(
            ReportItem(
                item_id,
                [str(png), *map(str, tables)],
                clock=item_clock,
                paper_values_shown=True,
                status=verdict.status,
                why=verdict.why,
                verdict=verdict.to_dict(),
                recoveries=_recovery_records(summary, "cnn"),
                **common,
            )
        )
    return items


def _fmt(value: float | None) -> str:
    return "n/a (communication alone exceeds the paper's time)" if value is None else f"{value:.2f}"
