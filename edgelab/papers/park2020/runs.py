"""Reading a summary's runs for figures and tables: one value per cell, its repeats, its spread, its evidence.

Rows of a summary (``edgelab.emulation.projection.run_summary``) repeat a device count
once per repeated run; items show the median of each cell and the range of its
repeats (a column of ranges in tables, error bars in figures). What a value
rests on (``clock_basis``), the modelling choices behind it (``choices``) and
how the run is smaller than the paper's (``reduction``) are said the same way
by every park2020 item.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from edgelab.emulation.timeline import Topology
from edgelab.report.reference import load_reference
from edgelab.report.verdict import Basis, Noise

CLOCK_LABEL = {
    "device_model": (
        "emulated device time from the profile's one device model (a fixed cost per step plus a cost per FLOP, "
        "fitted once on the 1-device cells of Tables 1 and 2)"
    ),
    "calibrated": "emulated device time, speed factor fitted on the paper's 1-device cell",
    "nominal": "emulated device time, nominal speed factor (host GEMM rate over the device's assumed rate)",
    "wall": "measured wall time on the attached cluster (nothing emulated, nothing fitted)",
}


#: Why a value on the device model's clock has no noise: nothing of it is timed.
DEVICE_MODEL_EXACT = "the device-model clock is computed from counted steps, FLOPs and bytes, not timed"
#: What a time, or a share or rate of it, rests on, by clock.
CLOCK_BASIS = {
    "device_model": Basis.MODELLED,  # counted steps, FLOPs and bytes through one fitted model: deterministic
    "calibrated": Basis.EMULATED_TIME,  # measured CPU seconds x a factor
    "nominal": Basis.EMULATED_TIME,
    "wall": Basis.HOST_MEASURE,  # the attached cluster's own rounds
}
#: What each LeNet device iterates per epoch; the paper does not say (a modelling choice).
WORKER_DATA_CHOICE = {
    "full": "worker_data=full: each device iterates the whole training set every epoch (the paper does not say)",
    "shard": "worker_data=shard: each device iterates its 1/N shard every epoch (the paper does not say)",
}


def clock_basis(clock: str) -> Basis:
    """What a value on ``clock`` rests on: the device model's deterministic clock, measured CPU time, or wall time."""
    return CLOCK_BASIS[clock]


def topology_choices(topology: Topology) -> list[str]:
    """The link modelling choices the paper leaves open (P23), as the run set them."""
    where = "on the first training device" if topology.master_is_device else "on a machine of its own"
    link = "one link all devices share" if topology.ps_link == "shared" else "a link that is never the bottleneck"
    return [
        f"master_is_device={topology.master_is_device}: the parameter server sits {where}",
        f"ps_link={topology.ps_link}: the server is behind {link}",
        f"duplex={topology.duplex}: its link is {topology.duplex}-duplex",
    ]


def reduction(*parts: str) -> str:
    """The run's reductions against the paper, ``"; "``-joined (``""`` at the paper's size); see ``fewer``."""
    return "; ".join(p for p in parts if p)


def fewer(mine: int, paper: int, what: str) -> str:
    """``"1,920 of 60,000 training images"`` when the run used fewer than the paper, else ``""``."""
    return f"{mine:,} of {paper:,} {what}" if mine < paper else ""


def fewer_counts(mine: Any, paper: Any, what: str = "") -> str:
    """``"N=1..3 of the paper's N=1..10"`` when the run's device counts are not the paper's, else ``""``."""
    if sorted({int(n) for n in mine}) == sorted({int(n) for n in paper}):
        return ""
    return f"{count_range(mine)} of the paper's {count_range(paper)}" + (f" {what}" if what else "")


def count_range(counts: Any) -> str:
    """``N=1..3`` for consecutive device counts, ``N=1, 2, 5, 10`` otherwise."""
    ns = sorted({int(n) for n in counts})
    if not ns:
        return "no N"
    if ns == list(range(ns[0], ns[-1] + 1)) and len(ns) > 1:
        return f"N={ns[0]}..{ns[-1]}"
    return "N=" + ", ".join(str(n) for n in ns)


def paper_series(item_id: str, metric: str) -> pd.Series:
    """The paper's values of one metric of a table, indexed by device count."""
    ref = load_reference(item_id)
    rows = ref[ref["metric"] == metric]
    return pd.Series(rows["value"].to_numpy(float), index=rows["devices"].astype(int).to_numpy())


def run_values(runs: pd.DataFrame, clock: str, worker_data: str, column: str) -> pd.Series:
    """Every run's value, indexed by device count (repeated cells repeat the index)."""
    rows = runs[(runs["clock"] == clock) & (runs["worker_data"] == worker_data)].sort_values(["devices", "repeat"])
    return pd.Series(rows[column].to_numpy(float), index=rows["devices"].to_numpy(int))


def seed_values(runs: pd.DataFrame, clock: str, worker_data: str, column: str) -> pd.Series:
    """One value per independent run of each device count: its runs with their own seed, NaN left out.

    A repeat with its cell's seed trains the same weights again: its accuracy is
    the first run's, not a run of its own (rows without a ``seed`` share one).
    """
    rows = runs[(runs["clock"] == clock) & (runs["worker_data"] == worker_data)].sort_values(["devices", "repeat"])
    rows = rows[rows[column].notna()]
    seeds = rows["seed"] if "seed" in rows else pd.Series(0, index=rows.index)
    rows = rows.assign(_seed=seeds).drop_duplicates(["devices", "_seed"])
    return pd.Series(rows[column].to_numpy(float), index=rows["devices"].to_numpy(int))


def cell_medians(values: pd.Series) -> pd.Series:
    """One value per device count: the median over its repeats."""
    return values.groupby(level=0).median()


def long_rows(series: str, metric: str, values: pd.Series) -> list[dict[str, Any]]:
    """One long-format row per device count, for the csv beside each table."""
    return [{"series": series, "devices": n, "metric": metric, "value": v} for n, v in values.items()]


def spread_row(noise: Noise) -> dict[int, str]:
    """``min-max (n runs)`` for every repeated cell, for a table row."""
    return {n: f"{lo:,.0f}-{hi:,.0f} ({n_runs} runs)" for n, (lo, _, hi, n_runs) in noise.cells.items() if n_runs > 1}


def error_bars(ax: Any, noise: Noise, color: Any) -> None:
    """Draw the range of every repeated cell as an error bar around its median."""
    for n, (lo, mid, hi, n_runs) in noise.cells.items():
        if n_runs > 1:
            ax.errorbar([n], [mid], yerr=[[mid - lo], [hi - mid]], color=color, capsize=4, linewidth=1)


def recovery_records(summary: Any, model: str) -> list[dict[str, Any]]:
    """The recoveries of a model's runs, for the manifest."""
    return summary.recoveries[summary.recoveries["model"] == model].to_dict("records")


def device_rate_basis(host: dict[str, Any]) -> str:
    """How the device's GEMM rate is known: assumed (the built-in boards), or measured by ``edgelab calibrate``."""
    return "measured on the board" if str(host.get("device_gflops_source", "")).startswith("measured") else "assumed"


def assumptions(summary: Any, model: str) -> str:
    """One line: the link model and the speed rates, the device's labelled as assumed where it is."""
    cal = summary.calibration[model]
    host = cal["host"]
    basis = device_rate_basis(host)
    device_rate = (
        f"device {host['device_gflops']} GFLOPS {basis}{' (not measured on a Pi)' if basis == 'assumed' else ''}"
        if host.get("device_gflops") is not None
        else "the device is the host"
    )
    return (
        f"Assumptions: {summary.topology.describe()}; "
        f"host {host['host_gflops']} GFLOPS measured (single-thread GEMM), {device_rate}."
    )


def run_repeats(runs: pd.DataFrame, clock: str, worker_data: str) -> list[int]:
    """The repeat index of every row ``run_values`` returns, in the same order."""
    rows = runs[(runs["clock"] == clock) & (runs["worker_data"] == worker_data)].sort_values(["devices", "repeat"])
    return rows["repeat"].astype(int).tolist()


def contention_line(summary: Any, model: str) -> str:
    """One line: the host contention the emulated clock removed from a model's runs, and the assumption behind it."""
    rows = summary.runs[(summary.runs["model"] == model) & summary.runs["clock"].isin(["calibrated", "nominal"])]
    if rows.empty or "contention" not in rows:
        return ""
    cells = rows.groupby("devices")["contention"].first()
    worst = cells.idxmax()
    return (
        "CPU-time clocks (the per-table alternative, nominal): host contention removed: "
        f"the same batch cost {cells[worst] - 1:+.0%} CPU at N={worst} against N=1 "
        f"({worst} device processes share this host's 2 cores and caches; separate boards do not), so each "
        f"cell's CPU is scaled to the 1-device runs' (assumed: a board's batch costs the same whatever the "
        f"number of boards). Per N: " + ", ".join(f"{n}: x{c:.2f}" for n, c in cells.items()) + "."
    )
