"""How well the emulator predicts: every timed or memory cell of the papers beside its emulated value.

``write`` reads the items' own CSVs (the paper-sized run's where the
paper-sized manifest lists the item, else the smoke run's) and writes
``reports/fidelity.csv``: one row per cell that has both a paper value and an
emulated one, with the absolute error |emulated - paper| / paper, whether the
cell was used to fit the clock (so it is no prediction) and, where the paper
contradicts itself on the cell, why. ``reports/fidelity-summary.csv`` sums it
up per item and metric, over its predicted cells (neither fitted nor
paper-inconsistent), and ``reports/fidelity.png`` draws every cell, paper
against emulated.

What each item's CSV holds is described once, in ``SOURCES``. Nothing here
imports the emulation: the cells a clock is fitted on are declared here too
(``FITTED``), beside where the clock declares them
(``edgelab.emulation.device_model.FIT_CELLS`` for the Pi boards,
``edgelab.emulation.tier_clock.zhang2018_calibration`` for the zhang2018
tiers); the tests hold the two together.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from edgelab.common.results import atomic_write_text
from edgelab.report.style import save_png

FULL_PROFILE_DIR = "full-profile"
CSV_NAME = "fidelity.csv"
SUMMARY_NAME = "fidelity-summary.csv"
FIGURE_NAME = "fidelity.png"
COLUMNS = [
    "id",
    "cell",
    "metric",
    "board",
    "profile",
    "paper",
    "emulated",
    "fitted",
    "abs_error",
    "paper_inconsistent",
    "per_table_refit",
    "emulated_from",
    "paper_note",
    "source",
]
SUMMARY_COLUMNS = [
    "id",
    "metric",
    "board",
    "profile",
    "cells",
    "fitted",
    "paper_inconsistent",
    "predicted",
    "median_error",
    "worst_error",
    "worst_cell",
]
#: ``Source.fitted`` for an item every cell of which is the clock's calibration.
ALL = "all"
#: The timed cells (item, metric) a board's one device model is held to as a whole: Park's LeNet and ResNet
#: training times, Zhang's inference time per tier in its running system, Jeon's pipeline ratios. The page gives
#: their median and worst error apart from every other cell's.
CORE: tuple[tuple[str, str], ...] = (
    ("park2020/table1", "elapsed_time_s"),
    ("park2020/table2", "elapsed_time_s"),
    ("park2020/table4", "elapsed_time_s"),
    ("park2020/fig5a", "elapsed_time_s"),
    ("zhang2018/table2", "inference_ms_per_image"),
    ("jeon/table1", "time_ratio_vs_kcs"),
)


def _tier_network(frame: pd.DataFrame) -> pd.DataFrame:
    """zhang2018/table2: its "device, network" column ("end, mobilenet") as a tier and a network."""
    parts = frame["device, network"].astype(str).str.split(",", n=1, expand=True)
    return frame.assign(tier=parts[0].str.strip(), network=parts[1].str.strip())


def _sync_async(frame: pd.DataFrame) -> pd.DataFrame:
    """park2020/fig3a: the paper's "async" is the judged reading, MXNet's dist_async; names as the cells show them.

    The paper gives LeNet's time only as sync's minus async's, and ResNet's sync
    and async times (about 2,500 s each, read off the figure).
    """
    strategy = {"ps_sync": "sync", "async": "dist_async", "ps_async": "dist_async"}
    metric = {"mean_device_s": "time", "sync_minus_async_s": "sync minus async time"}
    return frame.assign(
        strategy=frame["strategy"].map(strategy).fillna(frame["strategy"]),
        metric=frame["metric"].map(metric),
    )


@dataclass(frozen=True)
class Source:
    """Where one item's CSV holds the paper's value and the emulated value of each of its cells.

    A wide CSV has both in columns of one row (``paper``, ``emulated``). A long
    CSV (``series``, ``value``) has the paper's rows under the series "paper" and
    the emulated ones under ``emulated``, a series; its cells are ``keys`` and
    its repeats are taken at their median.
    """

    id: str
    metric: str
    paper: str
    emulated: str
    cell: str  # the cell's label, a template over the row's columns
    board: str  # the device profile, or a template over the row's columns
    where: str = ""  # a pandas query: the rows that are this metric's cells
    long: bool = False
    keys: tuple[str, ...] = ("devices",)
    fitted: str = ""  # a pandas query over the cells the clock was fitted on (ALL: every cell)
    refit: str = ""  # a labelled per-table refit, shown beside (never the emulated value)
    note: str = ""  # a column with the paper's note on the cell
    prepare: Callable[[pd.DataFrame], pd.DataFrame] | None = None


_LENET = "full device_model"  # the LeNet tables' primary clock, judged setting (each device iterates all data)
_RESNET = {"paper": "paper", "emulated": "measured", "board": "pi3b", "refit": "per_table", "note": "paper_note"}

#: Every item with a paper time or memory and an emulated one side by side, and how to read it.
SOURCES: tuple[Source, ...] = (
    Source("park2020/table1", "elapsed_time_s", "paper", _LENET, "devices={devices}", "pi3b",
           "metric == 'elapsed_time_s'", long=True, fitted="devices == 1"),
    Source("park2020/table2", "elapsed_time_s", "paper", _LENET, "devices={devices}", "pi3b",
           "metric == 'elapsed_time_s'", long=True, fitted="devices == 1"),
    Source("park2020/table3", "memory_mb", cell="{config} devices={devices}",
           where="metric == 'memory_usage_mb'", **_RESNET),
    Source("park2020/table4", "elapsed_time_s", cell="{config} devices={devices} epoch={epoch}",
           where="metric == 'elapsed_time_s'", **_RESNET),
    Source("park2020/fig3a", "elapsed_time_s", "paper", "measured", "{model} {strategy}: {metric}", "pi3b",
           "metric in ('mean_device_s', 'sync_minus_async_s') and strategy in ('ps_sync', 'ps_async', 'async')",
           long=True, keys=("model", "strategy", "metric"), prepare=_sync_async),
    Source("park2020/fig4b", "memory_mb", "paper", "measured full device_model", "devices={devices}", "pi3b",
           "metric == 'memory_usage_mb'", long=True, fitted="devices == 1"),
    Source("park2020/fig5a", "elapsed_time_s", cell="{config} devices={devices}",
           where="metric == 'elapsed_time_s'", **_RESNET),
    Source("park2020/fig6b", "memory_mb", cell="{config} devices={devices}",
           where="metric == 'memory_usage_mb'", **_RESNET),
    Source("zhang2018/table1", "ms_per_image", "report_ms", "report_ms", "{tier}/{network}", "{tier}", fitted=ALL),
    Source("zhang2018/table2", "processing_ms_per_image", "report processing (ms/image)", "clock (ms/image)",
           "{tier}/{network} latency={latency (s)}s", "{tier}", prepare=_tier_network),
    # The report's in-system inference, one cell per tier (its rows repeat it for each latency)
    Source("zhang2018/table2", "inference_ms_per_image", "report inference (ms/image)", "clock inference (ms/image)",
           "{tier}/{network} inference", "{tier}", "`latency (s)` == 0", prepare=_tier_network),
    Source("zhang2018/table4", "time_overhead_pct", "report overhead (%)", "clock overhead (%)",
           "encrypt at {encrypt at} latency={latency (s)}s", "{encrypt at}"),
    Source("zhang2018/table5", "elapsed_time_s", "report_s", "duration_s", "{method} failures={failures}", "end"),
    Source("jeon/table1", "time_ratio_vs_kcs", "paper_ratio", "vs_kcs_time_ratio", "{model}", "pi4b",
           "not model.str.startswith('KCS')"),
)  # fmt: skip

#: How each item's emulated value is had, for the reader of the CSV (where the column's name does not say).
EMULATED_FROM = {
    "park2020/table1": f"series '{_LENET}', median over repeats",
    "park2020/table2": f"series '{_LENET}', median over repeats",
    "park2020/fig3a": "series 'measured', median over repeats: MXNet's dist_async, the reading the item judges",
    "park2020/fig4b": "series 'measured full device_model': the board's memory model (edgelab.emulation.memory_model)",
    "zhang2018/table1": "report_ms: the tier clock's calibration is this table's time per image (equal by design)",
}

#: Cells the paper contradicts itself on, and how (catalog notes in ``papers/catalog/<paper>.md``).
PAPER_INCONSISTENT = {
    ("park2020/table1", "devices=6"): (
        "P1: 287 s at 6 devices is below the 5-device 342 s and the 7-device 442 s of a time the paper says rises "
        "with devices (about +51 s per device; a typo, likely)"
    ),
    ("park2020/table3", "32x128 devices=10"): (
        "P15: the 32x128 column repeats 32x64 in every row (a copied column, likely)"
    ),
    ("jeon/table1", "ensemble (5 binary)"): (
        "P4: the paper gives the ensemble's time three ways: 260 s in Table 1 (4.33x KCS's 60 s), 'more than 5 "
        "minutes' (above 5x) and KCS 'about 70% faster' (3.33x) in the text"
    ),
    ("jeon/table1", "single processor"): (
        "P5: a 9.67x speed-up of the 5-stage pipeline over one board exceeds the 5x a 5-stage pipeline can give "
        "(and the 2.87x its stage MAC shares bound it to)"
    ),
}


@dataclass
class Fidelity:
    """What ``write`` made: the cells, the summary per item, the figure's name ("" when none)."""

    rows: pd.DataFrame
    summary: pd.DataFrame
    figure: str = ""

    @property
    def predicted(self) -> pd.DataFrame:
        """The cells that are predictions: neither fitted nor paper-inconsistent."""
        return _predicted(self.rows)

    @property
    def inconsistent(self) -> pd.DataFrame:
        """The cells the paper contradicts itself on."""
        return self.rows[self.rows["paper_inconsistent"] != ""]

    def overall(self, items: tuple[tuple[str, str], ...] | None = None) -> dict[str, Any]:
        """Median and worst error over the predicted cells (of ``items``, (id, metric) pairs), and the worst one's."""
        predicted = self.predicted
        if items is not None:
            chosen = pd.MultiIndex.from_tuples(items, names=["id", "metric"])
            predicted = predicted[pd.MultiIndex.from_frame(predicted[["id", "metric"]]).isin(chosen)]
        if predicted.empty:
            return {"cells": 0, "median": math.nan, "worst": math.nan, "worst_at": ""}
        worst = predicted.loc[predicted["abs_error"].idxmax()]
        return {
            "cells": len(predicted),
            "median": float(predicted["abs_error"].median()),
            "worst": float(worst["abs_error"]),
            "worst_at": f"{worst['id']} {worst['cell']}",
        }


def _predicted(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[(rows["fitted"] == "no") & (rows["paper_inconsistent"] == "")]


def _listed(folder: Path, relative: str) -> bool:
    """Whether the folder's manifest lists the file (true where there is no manifest)."""
    path = folder / "manifest.json"
    if not path.is_file():
        return True
    entry = json.loads(path.read_text()).get("items", {}).get(relative.removesuffix(".csv"), {})
    return relative in (entry.get("files") or [])


def locate(root: Path, item_id: str) -> tuple[str, Path] | None:
    """The item's CSV and its profile: the paper-sized run's where its manifest lists it, else the smoke run's."""
    relative = f"{item_id}.csv"
    for profile, folder in (("full", root / FULL_PROFILE_DIR), ("smoke", root)):
        if (folder / relative).is_file() and _listed(folder, relative):
            return profile, folder / relative
    return None


def _number(values: pd.Series) -> pd.Series:
    """A column as numbers: "6.51 s" is 6.51; "never", "-" and "Inf" are not numbers (NaN)."""
    text = values.astype(str).str.strip().str.removesuffix(" s")
    numbers = pd.to_numeric(text, errors="coerce")
    return numbers.where(numbers.abs() != math.inf)


def _pivot(frame: pd.DataFrame, source: Source) -> pd.DataFrame:
    """A long CSV as one row per cell: the paper's value and the emulated series' median over repeats."""
    keys = list(source.keys)
    paper = frame[frame["series"] == source.paper].groupby(keys)["value"].median().rename(source.paper)
    emulated = frame[frame["series"] == source.emulated].groupby(keys)["value"].median().rename(source.emulated)
    return pd.concat([paper, emulated], axis=1, join="inner").reset_index()


def _label(template: str, row: dict[str, Any]) -> str:
    """A template filled from a row, whole numbers without their ".0"."""
    shown = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in row.items()}
    return template.format_map(shown)


def _fitted(frame: pd.DataFrame, source: Source) -> pd.Series:
    if source.fitted == ALL:
        return pd.Series(True, index=frame.index)
    if not source.fitted:
        return pd.Series(False, index=frame.index)
    return frame.eval(source.fitted, engine="python").astype(bool)


def cells(frame: pd.DataFrame, source: Source, *, profile: str = "", path: str = "") -> pd.DataFrame:
    """One item's cells, from its CSV as read: a row per cell with a paper value and an emulated one."""
    if source.where:
        frame = frame.query(source.where, engine="python")
    if source.prepare is not None:
        frame = source.prepare(frame)
    if source.long:
        frame = _pivot(frame, source)
    frame = frame.assign(_paper=_number(frame[source.paper]), _emulated=_number(frame[source.emulated]))
    frame = frame[frame["_paper"].notna() & frame["_emulated"].notna() & (frame["_paper"] != 0)]
    records = frame.to_dict("records")
    labels = [_label(source.cell, r) for r in records]
    out = pd.DataFrame(
        {
            "id": source.id,
            "cell": labels,
            "metric": source.metric,
            "board": [_label(source.board, r) for r in records],
            "profile": profile,
            "paper": frame["_paper"].to_numpy(),
            "emulated": frame["_emulated"].to_numpy(),
            "fitted": ["yes" if f else "no" for f in _fitted(frame, source)],
            "paper_inconsistent": [PAPER_INCONSISTENT.get((source.id, c), "") for c in labels],
            "per_table_refit": _number(frame[source.refit]).to_numpy() if source.refit else math.nan,
            "emulated_from": EMULATED_FROM.get(source.id, f"column '{source.emulated}'"),
            "paper_note": frame[source.note].fillna("").astype(str).to_numpy() if source.note else "",
            "source": path,
        },
        columns=COLUMNS,
    )
    out["abs_error"] = (out["emulated"] - out["paper"]).abs() / out["paper"].abs()
    return out


def collect(root: Path, sources: tuple[Source, ...] = SOURCES) -> pd.DataFrame:
    """Every source's cells, in ``SOURCES`` order (an item with no CSV here has none)."""
    parts = []
    for source in sources:
        found = locate(root, source.id)
        if found is None:
            continue
        profile, path = found
        parts.append(cells(pd.read_csv(path), source, profile=profile, path=path.relative_to(root).as_posix()))
    if not parts:
        return pd.DataFrame(columns=COLUMNS)
    return pd.concat(parts, ignore_index=True)


def summarize(rows: pd.DataFrame) -> pd.DataFrame:
    """Per item and metric: its cells, how many are fitted, paper-inconsistent and predicted, the predicted errors."""
    out = []
    for (item_id, metric), group in rows.groupby(["id", "metric"], sort=False):
        predicted = _predicted(group)
        worst = predicted.loc[predicted["abs_error"].idxmax()] if not predicted.empty else None
        out.append(
            {
                "id": item_id,
                "metric": metric,
                "board": ", ".join(dict.fromkeys(group["board"])),
                "profile": ", ".join(dict.fromkeys(group["profile"])),
                "cells": len(group),
                "fitted": int((group["fitted"] == "yes").sum()),
                "paper_inconsistent": int((group["paper_inconsistent"] != "").sum()),
                "predicted": len(predicted),
                "median_error": float(predicted["abs_error"].median()) if worst is not None else math.nan,
                "worst_error": float(worst["abs_error"]) if worst is not None else math.nan,
                "worst_cell": str(worst["cell"]) if worst is not None else "",
            }
        )
    return pd.DataFrame(out, columns=SUMMARY_COLUMNS)


def plot(rows: pd.DataFrame, path: Path) -> Path:
    """Paper (x) against emulated (y) on log axes: a colour per paper, fitted cells hollow, inconsistent ones x."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from edgelab.report.style import apply_style

    apply_style()
    fig, ax = plt.subplots(figsize=(7.5, 6.5))
    papers = list(dict.fromkeys(rows["id"].str.split("/").str[0]))
    colours = dict(zip(papers, plt.rcParams["axes.prop_cycle"].by_key()["color"], strict=False))
    kinds = {
        "predicted": (_predicted(rows), {"marker": "o"}),
        "fitted": (rows[rows["fitted"] == "yes"], {"marker": "o", "facecolors": "none"}),
        "paper-inconsistent": (rows[rows["paper_inconsistent"] != ""], {"marker": "X"}),
    }
    for _kind, (part, style) in kinds.items():
        for paper in papers:
            mine = part[part["id"].str.startswith(f"{paper}/")]
            colour = {"edgecolors": colours[paper]} if "facecolors" in style else {"color": colours[paper]}
            ax.scatter(mine["paper"], mine["emulated"], s=46, linewidths=1.4, alpha=0.85, **style, **colour)
    low = float(min(rows["paper"].min(), rows["emulated"].min())) / 2
    high = float(max(rows["paper"].max(), rows["emulated"].max())) * 2
    ax.plot([low, high], [low, high], color="black", linewidth=1)
    for factor in (0.75, 1.25):
        ax.plot([low, high], [low * factor, high * factor], color="grey", linewidth=0.8, linestyle=":")
    ax.set(xscale="log", yscale="log", xlim=(low, high), ylim=(low, high), aspect="equal")
    ax.set(xlabel="paper's value (each cell in its own unit: s, ms/image, MB, %, ratio)", ylabel="emulated value")
    ax.set_title("Every timed or memory cell: paper vs emulated")
    handles = [Line2D([], [], marker="o", linestyle="", color=colours[p], label=p) for p in papers]
    handles += [
        Line2D([], [], marker="o", linestyle="", color="grey", markerfacecolor="none", label="fitted (not predicted)"),
        Line2D([], [], marker="X", linestyle="", color="grey", label="paper contradicts itself"),
        Line2D([], [], color="black", label="emulated = paper"),
        Line2D([], [], color="grey", linestyle=":", label="±25%"),
    ]
    ax.legend(handles=handles, loc="upper left", fontsize="small")
    save_png(fig, path)
    return path


def write(root: Path) -> Fidelity:
    """Write ``fidelity.csv``, ``fidelity-summary.csv`` and (with any cell) ``fidelity.png`` into ``root``."""
    rows = collect(root)
    summary = summarize(rows)
    atomic_write_text(root / CSV_NAME, rows.to_csv(index=False))
    atomic_write_text(root / SUMMARY_NAME, summary.to_csv(index=False))
    figure = root / FIGURE_NAME
    if rows.empty:
        figure.unlink(missing_ok=True)
        return Fidelity(rows, summary)
    plot(rows, figure)
    return Fidelity(rows, summary, FIGURE_NAME)
