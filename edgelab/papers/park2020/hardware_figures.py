"""Park et al. 2020, Figure 4 (a-d): CPU, memory and network of LeNet-CNN against the device count.

The paper gives these panels' values only in its prose (a few points and
bounds), so each is judged on the paper's stated direction with an effect
size, and on every value it states (``edgelab.report.verdict``). CPU and traffic are
on the run's primary clock (the device model's: deterministic, a modelled
prediction); memory is the board's memory model (``edgelab.emulation.memory_model``:
deterministic), whose framework footprint comes from the paper's one-device
cell, so that cell is fitted. A cell that is what it is by construction is
shown but not predicted: with the server on the first device, one device reads
one busy thread of its four cores (25 %) and moves nothing over the network.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from edgelab.emulation.timeline import Topology
from edgelab.papers.park2020.lenet import PAPER_TRAIN_SIZE, LenetSummary
from edgelab.papers.park2020.runs import (
    CLOCK_LABEL,
    DEVICE_MODEL_EXACT,
    WORKER_DATA_CHOICE,
    assumptions,
    cell_medians,
    clock_basis,
    contention_line,
    error_bars,
    fewer,
    fewer_counts,
    recovery_records,
    reduction,
    run_values,
    topology_choices,
)
from edgelab.report import verdict as policy
from edgelab.report.manifest import ReportItem
from edgelab.report.reference import load_reference
from edgelab.report.style import save_figure, save_table
from edgelab.report.verdict import Basis, Check, Noise, Verdict, noise_of

#: What fig4b's memory rests on (it has no clock).
MEMORY_MODEL = "the board's memory model (memory has no clock)"
#: The paper's device counts (Tables 1-2, Fig 4) and its MNIST test set.
PAPER_DEVICES = range(1, 11)
PAPER_TEST_SIZE = 10_000

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
        "device_mb",
        "memory on the device (MB), the board's memory model",
        "memory_usage_mb",
        MEMORY_MODEL,
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
    "park2020/fig4b": ("rss_mb_host", "host RSS of a device worker (TensorFlow on this host, with its data), MB"),
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


def constructed_cells(item_id: str, topology: Topology) -> dict[int, str]:
    """The cells of a fig4 panel that are what they are by construction, with why (not predictions).

    With the server on the first device (``master_is_device``) one device
    exchanges nothing over the network: it reads one busy thread of its four
    cores (25 % CPU) and no traffic, whatever the device model says.
    """
    if not topology.master_is_device or item_id == "park2020/fig4b":
        return {}
    why = {
        "park2020/fig4a": "N=1 reads 25 % by construction (one busy thread of the device's four cores, no exchange "
        "over a network: the server is on the device)",
        "park2020/fig4c": "N=1 moves nothing by construction (the server is on the device)",
        "park2020/fig4d": "N=1 moves nothing by construction (the server is on the device)",
    }
    return {1: why[item_id]}


def judge_fig4(
    item_id: str,
    values: pd.Series,
    *,
    setting: str = "full",
    others: dict[str, pd.Series] | None = None,
    basis: Basis | None = None,
    topology: Topology | None = None,
    choices: list[str] | None = None,
) -> Verdict:
    """The verdict of a fig4 panel: the paper's stated direction with an effect size, and its values.

    ``values`` (the judged setting) repeats a device count once per repeated
    run; ``basis`` is what they rest on (default: the device model's clock,
    ``MODELLED``, for CPU and traffic; a host measurement for memory). On a
    measured basis the repeats of ``values`` and of ``others`` (the other
    settings shown) are the noise. A cell that is what it is by construction
    (``constructed_cells``) is left out of the checks and the predicted cells.
    """
    _, _, _, _, claim, direction = _FIG4[item_id]
    basis = basis or Basis.MODELLED
    if basis.measured:
        noise = Noise.combine({setting: noise_of(values)} | {k: noise_of(v) for k, v in (others or {}).items()})
    else:
        noise = Noise.none(DEVICE_MODEL_EXACT)
    constructed = constructed_cells(item_id, topology or Topology())
    cells = cell_medians(values)
    cells = cells[~cells.index.isin(list(constructed))]
    paper = _paper_points(item_id)
    exact = paper[paper["bound"] == ""].set_index("devices")["value"]
    if item_id in ("park2020/fig4c", "park2020/fig4d"):
        # The paper shows no traffic at 1-2 devices and over 1000 KB from 3 on (P16, P17).
        none_at = [n for n in exact.index if n not in constructed]
        lower = paper[paper["bound"] == "lower"]
        checks = [
            policy.bound(
                cells, none_at, upper=0.0, claim="no traffic at 1-2 devices", basis=basis, runs=noise.runs, unit=" KB/s"
            ),
            policy.bound(
                cells,
                [int(n) for n in lower["devices"]],
                lower=float(lower["value"].min()),
                claim="over 1000 KB from 3 devices",
                basis=basis,
                runs=noise.runs,
                unit=" KB/s",
            ),
        ]
    else:
        shared = [n for n in exact.index if n in cells.index and n not in fitted_cells(item_id)]
        checks = [
            policy.trend(cells, direction, noise, claim=claim, basis=basis),
            policy.effect(cells, direction, noise, claim=claim, basis=basis),
            policy.level(exact, cells, shared, noise, basis=basis, each=True),
        ]
    if constructed:
        checks = [_noted(c, "; ".join(f"left out: {why}" for why in constructed.values())) for c in checks]
    fitted = [f"N={n}" for n in fitted_cells(item_id) if n in cells.index]
    predicted = [f"N={n}" for n in cells.index if f"N={n}" not in fitted]
    return policy.decide(checks, fitted=fitted, predicted=predicted, noise=noise, choices=choices or [])


def fitted_cells(item_id: str) -> dict[int, str]:
    """The cells of a fig4 panel that something was fitted on, with what: fig4b's one device (the framework)."""
    if item_id != "park2020/fig4b":
        return {}
    return {
        1: "the board's framework footprint (pi3b framework_mb) is read off this cell: 300 MB less MNIST's training "
        "and test images as float32 (209 MB) and LeNet's weights and batch (10 MB)"
    }


def _noted(check: Check, note: str) -> Check:
    """The check with ``note`` added to its own."""
    return replace(check, note="; ".join(p for p in (check.note, note) if p))


def _evidence_line(item_id: str, clock: str, topology: Topology) -> str:
    """What the panel's values rest on, and the cells left out of its verdict."""
    if clock == MEMORY_MODEL:
        text = (
            "Memory is the board's memory model (deterministic: framework + weights, gradients and momentum + the "
            "tensors a batch's backward pass needs + MNIST as float32, as MXNet's iterator holds it)."
        )
    elif clock_basis(clock).measured:
        text = "These values come from measured CPU time: judged with three runs of a cell (its repeats)."
    else:
        text = "These values are the device model's (deterministic: a modelled prediction, no repeats needed)."
    left = constructed_cells(item_id, topology)
    fitted = fitted_cells(item_id)
    return (
        text
        + "".join(f" Shown, not judged: {why}." for why in left.values())
        + "".join(f" Fitted, not a prediction: N={n}, {why}." for n, why in fitted.items())
    )


def lenet_choices(summary: LenetSummary, setting: str) -> list[str]:
    """The modelling choices behind the judged LeNet setting: what each device iterates, and the link."""
    return [WORKER_DATA_CHOICE[setting], *topology_choices(summary.topology)]


def lenet_reduction(summary: LenetSummary) -> str:
    """How the LeNet runs are smaller than the paper's (``""`` at its size)."""
    runs = summary.runs
    n_train = int(runs["n_train"].min()) if not runs.empty else 0
    return reduction(
        fewer(n_train, PAPER_TRAIN_SIZE, "training images"),
        fewer(int(summary.dataset.get("n_test") or PAPER_TEST_SIZE), PAPER_TEST_SIZE, "test images"),
        fewer_counts(runs["devices"].unique(), PAPER_DEVICES) if not runs.empty else "",
    )


def hardware_figures(summary: LenetSummary, root: Path | None, common: dict[str, Any]) -> list[ReportItem]:
    """Render fig4a-d from the LeNet-CNN runs, each with its verdict."""
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
            values = run_values(cnn, clock, wd, column)
            cells = cell_medians(values)
            (line,) = ax.plot(cells.index, cells.to_numpy(), marker="o", label=f"measured, {wd}")
            error_bars(ax, noise_of(values), line.get_color())
            rows += [
                {"series": f"measured {wd} {clock}", "devices": n, "value": v, "bound": ""} for n, v in cells.items()
            ]
            column2, label2 = _FIG4_SECONDARY[item_id]
            rows += [
                {"series": f"measured {wd} {clock}: {label2}", "devices": n, "value": v, "bound": ""}
                for n, v in cell_medians(run_values(cnn, clock, wd, column2)).items()
            ]
        exact = paper[paper["bound"] == ""]
        ax.scatter(exact["devices"], exact["value"], color="black", marker="s", zorder=3, label="paper")
        lower = paper[paper["bound"] == "lower"]
        if not lower.empty:
            ax.scatter(
                lower["devices"], lower["value"], color="black", marker="^", zorder=3, label="paper (lower bound)"
            )
        others = {wd: run_values(cnn, clock, wd, column) for wd in settings if wd != headline}
        verdict = judge_fig4(
            item_id,
            run_values(cnn, clock, headline, column),
            setting=headline,
            others=others,
            basis=clock_basis(clock) if on == "primary" else Basis.MODELLED,
            topology=summary.topology,
            choices=lenet_choices(summary, headline),
        )
        ax.set(xlabel="devices", ylabel=f"{ylabel}, {clock} clock" if on == "primary" else ylabel, xticks=range(1, 11))
        ax.set_title(f"{item_id} — LeNet-CNN ({verdict.status})", fontsize=11)
        ax.legend(fontsize=8)
        table = pd.DataFrame(rows).assign(id=item_id, metric=metric)
        md = "\n".join(
            [
                f"# {item_id}",
                "",
                f"Clock: {item_clock}. Measured: the {headline} setting, median of repeats. "
                + _evidence_line(item_id, clock if on == "primary" else on, summary.topology),
                contention_line(summary, "cnn") if on == "primary" else "",
                assumptions(summary, "cnn"),
                "",
                verdict.markdown(),
            ]
        )
        tables = save_table(table, md, item_id, root=root)
        png = save_figure(fig, item_id, root=root)
        items.append(
            ReportItem.from_verdict(
                item_id,
                [png, *tables],
                verdict,
                paper_values_shown=True,
                clock=item_clock,
                recoveries=recovery_records(summary, "cnn"),
                **common,
            )
        )
    return items
