"""What every Park et al. 2020 ResNet item shares (``edgelab.papers.park2020.resnet_figures``).

The rows an item reads from a ``ResnetSummary`` (trained, out of memory, by
clock), the CSV rows that put the paper's value beside the measured and
per-table ones, the lines every item states (the clock, the projection, the
data, the device's memory budget, the topology), the checks' labelling and
evidence, the modelling choices and reductions, and how an item is written.

What a value rests on: times, CPU shares and traffic rates are the device
model's (counted steps, FLOPs and bytes, one run per cell: deterministic,
``Basis.MODELLED``); a memory need is measured on this host (``HOST_MEASURE``,
judged with three probes); an accuracy is trained (``TRAINED``, one run per
cell here).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypedDict, Unpack

import numpy as np
import pandas as pd

from edgelab.common import checks
from edgelab.emulation.timeline import Topology
from edgelab.papers.park2020.resnet import (  # noqa: F401 (the board memory model, re-exported)
    CIFAR_RECORD_BYTES,
    PAPER_TEST_SIZE,
    PAPER_TRAIN_SIZE,
    PER_TABLE_CELL,
    ResnetSummary,
    board_memory_mb,
)
from edgelab.papers.park2020.runs import CLOCK_LABEL, fewer, fewer_counts, reduction, topology_choices
from edgelab.report import verdict as policy
from edgelab.report.manifest import ReportItem
from edgelab.report.reference import load_reference
from edgelab.report.style import markdown_table, save_figure, save_table
from edgelab.report.verdict import Basis, Check, Noise, Verdict

PRIMARY, ALTERNATIVE = "device_model", "per_table"
#: The device model's values carry no noise: nothing of them is timed, and every verdict says so.
NO_NOISE = Noise.none("the device-model clock is computed from counted steps, FLOPs and bytes, not timed")
#: The paper's grid: depths, batch sizes, device counts; its test set; Table 4's run (devices, epochs).
PAPER_DEPTHS, PAPER_BATCHES, PAPER_DEVICES = (32, 80, 110), (32, 64, 128), range(1, 11)
PAPER_TABLE4 = (10, 5)
#: What each ResNet device iterates: the paper does not say (MXNet's train_cifar10.py splits by worker).
SHARD_CHOICE = "worker_data=shard: each device trains its 1/N shard (MXNet's train_cifar10.py splits by worker)"
_COLUMNS = [
    "depth", "batch", "devices", "epochs", "config", "paper_rounds", "clock", "outcome", "rounds_measured", "scale",
    "projected_s", "accuracy", "cpu_pct", "measured_mb", "estimated_mb", "budget_mb", "rss_mb_host",
    "sent_kb_epoch", "received_kb_epoch", "sent_kb_s", "received_kb_s",
]  # fmt: skip
UNITS = {
    "projected_s": "s", "accuracy": "", "cpu_pct": "%", "device_mb": "MB", "host_device_mb": "MB", "measured_mb": "MB",
    "estimated_mb": "MB",
    "rss_mb_host": "MB", "sent_kb_s": "KB/s", "received_kb_s": "KB/s", "sent_kb_epoch": "KB/epoch",
    "received_kb_epoch": "KB/epoch", "paper_rounds": "per device per epoch",
}  # fmt: skip
_MD_COLUMNS = ["config", "devices", "epoch", "metric", "unit", "paper", "paper_note", "measured", "per_table"]
_MD_COLUMNS += ["outcome"]


def select(summary: ResnetSummary, clock: str = PRIMARY, *, multi_epoch: bool = False) -> pd.DataFrame:
    """Trained rows of one clock: the grid's one-epoch runs, or Table 4's multi-epoch run.

    Adds ``device_mb``, the memory the board holds by its memory model
    (``board_memory_mb``), and ``host_device_mb``: the profile's framework
    footprint plus the working set this host's TensorFlow measured.
    """
    runs = summary.runs
    if runs.empty or "outcome" not in runs:
        return pd.DataFrame(columns=[*_COLUMNS, "device_mb", "host_device_mb"])
    rows = runs[(runs["clock"] == clock) & (runs["outcome"] == "trained")]
    rows = rows[rows["epochs"] > 1] if multi_epoch else rows[rows["epochs"] == 1]
    shape = zip(rows["depth"], rows["batch"], rows["devices"], strict=True)
    modelled = [board_memory_mb(summary.profile, d, b, n) for d, b, n in shape]
    rows = rows.assign(device_mb=modelled, host_device_mb=rows["measured_mb"] + summary.profile.framework_mb)
    return rows.sort_values(["depth", "batch", "devices"])


def out_of_memory(summary: ResnetSummary) -> pd.DataFrame:
    """The grid's out-of-memory rows (one epoch), one per configuration and device count."""
    runs = summary.runs
    if runs.empty or "outcome" not in runs:
        return pd.DataFrame(columns=_COLUMNS)
    rows = runs[(runs["outcome"] == "out_of_memory") & (runs["epochs"] == 1)]
    return rows.drop_duplicates(["config", "devices"]).sort_values(["depth", "batch", "devices"])


def series(frame: pd.DataFrame, config: str, column: str) -> pd.Series:
    """One configuration's values, indexed by device count."""
    rows = frame[frame["config"] == config]
    return pd.Series(rows[column].to_numpy(float), index=rows["devices"].to_numpy(int)).sort_index()


def paper_values(item_id: str, metric: str, contains: str = "") -> list[float]:
    """The values of one metric among an item's prose rows whose condition contains ``contains``."""
    ref = load_reference(item_id)
    rows = ref[(ref["metric"] == metric) & ref["condition"].astype(str).str.contains(contains, regex=False)]
    return [float(v) for v in rows["value"]]


def projection(row: Any) -> str:
    """``measured R of P rounds per device, projected xS``: how a run's epoch was reached."""
    return (
        f"measured {int(row.rounds_measured)} of {int(row.paper_rounds)} rounds per device, projected x{row.scale:.1f}"
    )


def oom_note(row: Any) -> str:
    """Why a configuration did not train: what decided it against the budget, and this host's probes of its need.

    The board's memory model decides (``board_need_mb``); a run stopped by this
    host's own probe (a need beyond the board's whole memory, or a run stored
    before the board decided) says so, with the probes taken before it.
    """
    deciding = getattr(row, "deciding_mb", row.measured_mb)
    probes = f"{row.measured_mb:,.0f} MB"
    if getattr(row, "memory_runs", 1) > 1:
        probes = (
            f"{int(row.memory_runs)} probes {row.memory_min_mb:,.0f}-{row.memory_max_mb:,.0f} MB, "
            f"median {row.measured_mb:,.0f}"
        )
    if getattr(row, "decided_by", "host") == "board":
        return (
            f"out of memory: the board's memory model needs {deciding:,.0f} MB above the framework, over the "
            f"{row.budget_mb:,.0f} MB training budget (this host's TensorFlow: {probes})"
        )
    limit = getattr(row, "host_limit_mb", None)
    limit = row.budget_mb if limit is None or pd.isna(limit) else limit
    held = "training budget" if limit == row.budget_mb else "of the board's whole memory"
    return (
        f"out of memory: the step needed {deciding:,.0f} MB above the framework on this host at the run, over "
        f"the {limit:,.0f} MB {held} ({probes}; estimated {row.estimated_mb:,.0f} MB)"
    )


def networked(devices: list[int], topology: Topology) -> list[int]:
    """The device counts whose exchange crosses the network (none at N=1 when the server is on the device)."""
    return [n for n in devices if n > 1 or not topology.master_is_device]


def choices(summary: ResnetSummary) -> list[str]:
    """The modelling choices the paper leaves open, as this experiment set them."""
    return [SHARD_CHOICE, *topology_choices(summary.topology)]


def resnet_reduction(summary: ResnetSummary) -> str:
    """How the ResNet runs are smaller than the paper's (``""`` at its size)."""
    runs, d = summary.runs, summary.dataset
    trained = runs[runs["outcome"] == "trained"] if "outcome" in runs else runs
    measured = int(trained["rounds_measured"].max()) if "rounds_measured" in trained and len(trained) else 0
    steps = (
        f"{measured} measured batches per device and epoch (at most), the rest projected"
        if summary.max_steps is not None
        else ""
    )
    t4 = trained[trained["epochs"] > 1] if "epochs" in trained else trained.iloc[0:0]
    table4 = (
        f"Table 4: {int(t4['devices'].iloc[0])} devices x {int(t4['epochs'].iloc[0])} epochs of the paper's "
        f"{PAPER_TABLE4[0]} x {PAPER_TABLE4[1]}"
        if len(t4) and (int(t4["devices"].iloc[0]), int(t4["epochs"].iloc[0])) != PAPER_TABLE4
        else ""
    )
    grid = runs if len(runs) else pd.DataFrame(columns=["depth", "batch", "devices"])
    return reduction(
        fewer(int(d.get("n_train") or PAPER_TRAIN_SIZE), PAPER_TRAIN_SIZE, "training images"),
        fewer(int(d.get("n_test") or PAPER_TEST_SIZE), PAPER_TEST_SIZE, "test images"),
        steps,
        _fewer_values(grid["depth"], PAPER_DEPTHS, "depths"),
        _fewer_values(grid["batch"], PAPER_BATCHES, "batch sizes"),
        fewer_counts(grid["devices"].unique(), PAPER_DEVICES),
        table4,
    )


def _fewer_values(mine: Any, paper: Any, what: str) -> str:
    """``"depths 32, 56 of the paper's 32, 80, 110"`` when they differ."""
    ours, theirs = sorted({int(v) for v in mine}), sorted(paper)
    if ours == theirs:
        return ""
    return f"{what} {', '.join(map(str, ours))} of the paper's {', '.join(map(str, theirs))}"


def full_epoch(rows: pd.DataFrame) -> tuple[bool, int]:
    """Whether every run trained the paper's whole epoch, and the fewest images any of them trained."""
    if rows.empty:
        return False, 0
    full = bool((rows["rounds_measured"] >= rows["paper_rounds"]).all())
    seen = (rows["rounds_measured"] * rows["batch"] * rows["devices"]).min()
    return full, PAPER_TRAIN_SIZE if full else int(seen)


def cell_rows(
    summary: ResnetSummary,
    item_id: str,
    keys: list[tuple[str, Any]],
    column: str,
    metric: str,
    paper: dict[tuple[str, Any], tuple[float, str]] | None = None,
) -> list[dict[str, Any]]:
    """One CSV row per (config, devices): the paper's value beside the measured and per-table ones, or the outcome."""
    dm, pt = (select(summary, c).set_index(["config", "devices"]) for c in (PRIMARY, ALTERNATIVE))
    oom = out_of_memory(summary).set_index(["config", "devices"])
    rows = []
    for key in keys:
        value, note = (paper or {}).get(key, (np.nan, ""))
        row: dict[str, Any] = {"id": item_id, "config": key[0], "devices": key[1], "metric": metric}
        row |= {"unit": UNITS.get(column, ""), "paper": value, "paper_note": note, "measured": np.nan}
        row |= {"per_table": np.nan, "outcome": "not run", "note": ""}
        if key in dm.index:
            r = dm.loc[key]
            row |= {"measured": r[column], "outcome": "trained", "note": projection(r)}
            row |= {k: r[k] for k in ("rounds_measured", "paper_rounds", "scale")}
            row["per_table"] = pt.loc[key, column] if key in pt.index else np.nan
        elif key in oom.index:
            row |= {
                "outcome": "out_of_memory",
                "note": oom_note(oom.loc[key]),
                "paper_rounds": oom.loc[key].paper_rounds,
            }
        elif key[1] is None or (isinstance(key[1], float) and np.isnan(key[1])):
            row["outcome"] = "paper only"
        rows.append(row)
    return rows


def context_lines(summary: ResnetSummary, rows: pd.DataFrame, *, accuracy: bool = False) -> list[str]:
    """What every ResNet item states: the clock, the projection, the data, the memory budget, the topology."""
    factor = summary.per_table_factor
    _, depth, batch, devices, target = PER_TABLE_CELL
    alt = (
        f"Per-table alternative (labelled '{ALTERNATIVE}', beside the primary values in the table and CSV, not "
        f"judged): host CPU time x {factor:.2f}, fitted on this experiment's own {depth}x{batch} {devices}-device "
        f"cell ({target:,.0f} s), which on that clock is fitted, not predicted."
        if factor is not None
        else f"Per-table alternative: none (the {depth}x{batch} {devices}-device cell did not train)."
    )
    lines = [
        f"Clock: {CLOCK_LABEL[PRIMARY]}: {summary.device_model.describe()}. Nothing of this experiment is fitted: "
        f"every time, rate and CPU share here is a prediction, deterministic (counted steps, FLOPs and bytes: "
        f"judged without repeats). A memory need is measured on this host ({memory_runs(rows)} probe(s) per "
        f"configuration) and an accuracy is trained (one run per cell): each is judged with "
        f"{policy.MIN_REPEATS} runs behind it. {alt}",
        "",
        "Projection (a round is one batch and one synchronization per device; under per-batch synchronization every "
        "round of an epoch costs the same, so one epoch of the paper's 50,000 images is the measured rounds times "
        f"the scale; max_steps = {summary.max_steps}):",
        "",
        *[f"- {r.config} N={r.devices}, {r.epochs} epoch(s): {projection(r)}" for r in rows.itertuples()],
        *([] if len(rows) else ["- no trained run"]),
        "",
    ]
    d, p = summary.dataset, summary.profile
    notes = "; ".join(f"{k}: {v}" for k, v in (d.get("notes") or {}).items()) or "none"
    lines.append(
        f"Data: {d.get('name', 'cifar10')} from {d.get('source')} ({d.get('checksum_status')}), "
        f"{d.get('n_train', 0):,} training and {d.get('n_test', 0):,} test images (the paper's epoch: "
        f"{PAPER_TRAIN_SIZE:,}). Data notes: {notes}."
    )
    lines.append(
        f"Device memory ({p.name}): {p.memory_mb} MB - {p.os_reserve_mb} MB OS - {p.framework_mb} MB framework "
        f"({p.framework_note}) = {p.training_budget_mb} MB training budget. A configuration the board's memory "
        "model (weights, optimizer state, kept activations, the record iterators' buffers) says needs more ends "
        "as out of memory, recorded as a result. Measured beside it: the step's peak working set above the "
        "framework on this host's TensorFlow, data excluded (a Pi streams CIFAR-10 from its card), which keeps "
        "more than MXNet did and decides only past the board's whole memory."
    )
    lines.append(f"Topology: {summary.topology.describe()}.")
    if accuracy:
        lines.append(
            "Accuracy: test accuracy after the measured rounds only, on the test images above; judged only when a "
            "run trained the paper's whole epoch (rounds measured = the paper's rounds), otherwise not judged."
        )
    return lines


class CellLabels(TypedDict, total=False):
    """How ``level`` labels its cells (``at``: ``"N="`` by default; a config, an epoch) and values (``unit``)."""

    at: str
    unit: str


def level(
    paper: pd.Series,
    measured: pd.Series,
    cells: list[Any],
    *,
    what: str,
    each: bool = False,
    basis: Basis = Basis.MODELLED,
    noise: Noise = NO_NOISE,
    **labels: Unpack[CellLabels],
) -> Check:
    """``policy.level`` with the claim named and the cell labelled (a config, an epoch, a device count).

    ``labels``: ``CellLabels``.
    """
    checks.keywords("level", labels, CellLabels)
    check = policy.level(paper, measured, list(cells), noise, basis=basis, unit=labels.get("unit", ""), each=each)
    return named(check, what, at=labels.get("at", "N="))


def named(check: Check, what: str, *, at: str = "N=") -> Check:
    """The check with its claim named and its cells labelled ``at`` (a config, an epoch, a batch) instead of N."""
    return replace(check, measured=f"{what}: {check.measured.replace('N=', at)}")


def undecided(name: str, measured: str, rule: str, note: str = "", *, basis: Basis, reason: str) -> Check:
    """A check the data cannot decide, and why (``reason``: one of ``verdict.REASONS``)."""
    return Check(name, None, measured, rule, note, basis=basis, undecided=reason)


def gate(check: Check, judged: bool, note: str, reason: str = "too small") -> Check:
    """The check as computed when ``judged``; otherwise shown but not judged, with why and its reason class."""
    return check if judged else replace(check, passed=None, note=note, undecided=reason)


def memory_runs(rows: pd.DataFrame) -> int:
    """The fewest probes behind the memory needs of ``rows`` (one per configuration when not repeated)."""
    if "memory_runs" not in rows or rows.empty:
        return 1
    return int(rows["memory_runs"].fillna(1).min())


@dataclass(frozen=True)
class Page:
    """What an item shows: its id and title, its figure, its table and the lines of text above the table."""

    item_id: str
    title: str
    fig: Any
    table: pd.DataFrame
    body: list[str]


def finish(
    summary: ResnetSummary,
    page: Page,
    verdict: Verdict,
    *,
    clock: str,
    root: Path | None,
    common: dict[str, Any],
    accuracy: bool = False,
) -> ReportItem:
    """Write an item's CSV, Markdown and PNG and return its manifest entry."""
    shown = pd.concat([select(summary), select(summary, multi_epoch=True)])
    table, item_id = page.table, page.item_id
    if "devices" in table:  # integers, blank where the paper states no device count
        table = table.assign(devices=pd.to_numeric(table["devices"]).astype("Int64"))
    md_table = table[[c for c in _MD_COLUMNS if c in table]].round(3)
    lines = [f"# {item_id}: {page.title}", "", *context_lines(summary, shown, accuracy=accuracy), ""]
    md = "\n".join([*lines, verdict.markdown(), *page.body, "", markdown_table(md_table)])
    files = [save_figure(page.fig, item_id, root=root), *save_table(table, md, item_id, root=root)]
    rest = {"reduction": resnet_reduction(summary)} | common
    return ReportItem.from_verdict(item_id, files, verdict, paper_values_shown=True, clock=clock, **rest)


def time_clock(summary: ResnetSummary) -> str:
    """The manifest's clock line of an item on the primary clock."""
    return f"{CLOCK_LABEL[PRIMARY]}: {summary.device_model.describe()}"


def order(config: str) -> tuple[int, ...]:
    """Sort key of a configuration ``LxB``: depth, then batch."""
    return tuple(int(x) for x in config.split("x"))


def configs_shown(summary: ResnetSummary, extra: list[str]) -> list[str]:
    """Every configuration planned or run, and those the paper speaks of, by depth then batch."""
    names = set(extra) | set(summary.memory.get("config", [])) | set(summary.runs.get("config", []))
    return sorted(names, key=order)


def bars(ax: Any, dm: pd.DataFrame, oom: pd.DataFrame, configs: list[str], column: str) -> dict[str, int]:
    """One bar per (config, N); an out-of-memory cell is a red X at the axis with 'OOM', never a bar of 0."""
    x = {c: i for i, c in enumerate(configs)}
    ns = sorted(set(dm["devices"]) | set(oom["devices"]))
    width = 0.8 / max(len(ns), 1)
    for j, n in enumerate(ns):
        off = (j - (len(ns) - 1) / 2) * width
        rows = dm[dm["devices"] == n]
        ax.bar([x[c] + off for c in rows["config"]], rows[column].to_numpy(float), width, label=f"N={n}")
        for i, c in enumerate(oom.loc[oom["devices"] == n, "config"]):
            axis = ax.get_xaxis_transform()  # x in data, y in axes: the mark sits on the axis whatever the scale
            label = "out of memory (no value)" if j == 0 and i == 0 else None
            ax.plot(x[c] + off, 0.03, marker="X", color="red", ms=9, transform=axis, label=label, ls="none")
            ax.text(x[c] + off, 0.08, "OOM", color="red", rotation=90, ha="center", fontsize=7, transform=axis)
    ax.set_xticks(range(len(configs)), configs)
    ax.set_xlim(-0.5, len(configs) - 0.5)
    ax.set_xlabel("ResNet configuration (layers x batch)")
    return x
