"""From a stored training run to the numbers a paper reports.

A run is read on one **clock**:

* ``"device_model"``: emulated device time whose compute comes from the
  profile's one device model (``edgelab.emulation.device_model``: a fixed cost per step
  plus a cost per FLOP, fitted once on two cells of the paper), the same for
  every experiment of the profile; the primary emulated clock;
* ``"calibrated"``: emulated device time (``edgelab.emulation.timeline``) at a speed
  factor fitted on one paper cell (``fit_speed_factor``); every other cell is
  then a prediction;
* ``"nominal"``: emulated device time at the factor of the GEMM
  micro-benchmark against the device's nominal (assumed) rate;
* ``"wall"``: the host wall time each round really took. On a real cluster
  (a scheduler address) the devices are real and this is the primary clock:
  nothing is emulated and nothing is fitted.

Times are projected from the samples a run trained on to the paper's data
size: a round's cost does not depend on how many rounds there are, so the
projection multiplies by the ratio of samples (stated in every report). A
sampled run (``summary["sampled"]``: a repeat that trained the first rounds of
its epoch only) is first projected to its whole epoch the same way, by the
ratio of rounds; its accuracy and its host monitor's CPU and memory are not the
cell's (it stopped early) and read NaN.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from edgelab.common.results import StoredRun
from edgelab.emulation import timeline
from edgelab.emulation.device_model import DeviceModel
from edgelab.emulation.monitor import utilisation
from edgelab.emulation.profiles import DeviceProfile
from edgelab.emulation.timeline import Topology

CLOCKS = ("device_model", "calibrated", "nominal", "wall")
#: The link models the same runs are recomposed under, to see which explains a paper's growth.
LINK_MODELS = {
    f"{duplex} duplex, master {'on device 0' if on_device else 'separate'}": Topology("shared", duplex, on_device)
    for on_device in (True, False)
    for duplex in ("full", "half")
}


def is_attached(run: StoredRun) -> bool:
    """Whether the run ran on a real cluster reached by address (its clock is wall time)."""
    return "address" in run.summary.get("cluster", {})


def elapsed(
    run: StoredRun,
    profile: DeviceProfile,
    *,
    clock: str,
    speed_factor: float,
    topology: Topology,
    device_model: DeviceModel | None = None,
    grid: timeline.RoundGrid | None = None,
) -> float:
    """Elapsed training time of a run on ``clock``: as run, or for a sampled run its whole epoch.

    ``grid``: the run's records as a ``timeline.RoundGrid``, for a caller that composes the run many times.
    """
    records = run.tables["records"]
    if clock == "wall":
        return float(records.groupby("round")["round_wall_s"].first().sum()) * sampled_scale(run)
    compute = _compute_s(run, clock, device_model)
    rounds = timeline.compose(
        records if grid is None else grid, profile, speed_factor=speed_factor, topology=topology, compute_s=compute
    )
    return float(rounds["elapsed_s"].iloc[-1]) * sampled_scale(run)


def sampled_scale(run: StoredRun) -> float:
    """Rounds of the run's whole epoch over the rounds it trained: 1 unless it was sampled."""
    sampled = run.summary.get("sampled")
    if not sampled:
        return 1.0
    return float(sampled["rounds_planned"]) / float(sampled["rounds_measured"])


def _compute_s(run: StoredRun, clock: str, device_model: DeviceModel | None) -> Any:
    """Device compute seconds per record on the device-model clock; None (CPU x factor) on the others."""
    if clock != "device_model":
        return None
    if device_model is None:
        raise ValueError("the device_model clock needs a device model")
    return device_model.records_compute_s(run.tables["records"], str(run.params["train"]["model"]))


def contention(runs: Sequence[StoredRun]) -> dict[tuple[str, int], float]:
    """How much more host CPU a sample cost at each device count than on one device, per model.

    Every device process of the emulated cluster shares this host's two cores
    and caches, and the same batch costs more CPU cycles the more of them are
    busy (measured: +31 % for LeNet-CNN, +43 % for the MLP at ten devices).
    Separate boards do not contend, so the emulated clock divides it out: per
    cell (model, device count), the median per-sample CPU over its runs
    against the median over the model's 1-device runs. Per cell, not per run,
    so the run-to-run noise of a cell is kept; 1 for the 1-device cell.
    """
    per_sample: dict[tuple[str, int], list[float]] = {}
    for run in runs:
        records = run.tables["records"]
        cost = float((records["cpu_s"] / records["samples"].clip(lower=1)).median())
        key = (str(run.params["train"]["model"]), int(run.params["train"]["n_devices"]))
        per_sample.setdefault(key, []).append(cost)
    out = {}
    for model in {m for m, _ in per_sample}:
        cells = {n: float(np.median(v)) for (m, n), v in per_sample.items() if m == model}
        reference = cells[min(cells)]  # the 1-device cell when it ran
        out |= {(model, n): cost / reference for n, cost in cells.items()}
    return out


def run_summary(
    run: StoredRun,
    profile: DeviceProfile,
    *,
    clock: str,
    speed_factor: float,
    topology: Topology,
    paper_train_size: int,
    contention: float = 1.0,
    device_model: DeviceModel | None = None,
) -> dict[str, Any]:
    """Elapsed time, accuracy and hardware use of one stored run on one clock.

    ``contention`` (CPU-time clocks): the host's contention factor of the run's
    cell (``contention``); its CPU seconds are divided by it. ``device_model``:
    the profile's device model, for the ``"device_model"`` clock.
    """
    cfg = run.params["train"]
    if clock == "device_model":
        contention, speed_factor = 1.0, 1.0  # compute comes from counted FLOPs: nothing of the host's to remove
    speed_factor = speed_factor / contention if clock != "wall" else speed_factor
    records = run.tables["records"]
    n_train = int(run.params["dataset"]["n_train"])
    scale = paper_train_size / n_train
    monitor = run.tables["monitor"]
    sampled = sampled_scale(run)
    # A sampled run's monitor saw only its first rounds (at the full profile's 30 s interval, two samples).
    host = _host_use(monitor if sampled == 1.0 else monitor.iloc[0:0])
    if clock == "wall":
        elapsed_s = elapsed(run, profile, clock=clock, speed_factor=1.0, topology=topology)
        compute_share = float("nan")
        cpu_pct = host["cpu_pct"] / max(profile.cores, 1)
        # The parameter server is this (client) process: every device's exchange crosses the network.
        wire = timeline.wire_bytes(records, Topology(master_is_device=False))
    else:
        compute = _compute_s(run, clock, device_model)
        rounds = timeline.compose(records, profile, speed_factor=speed_factor, topology=topology, compute_s=compute)
        measured_s = float(rounds["elapsed_s"].iloc[-1])
        compute_share = float(rounds["compute_max_s"].sum() / measured_s)
        per_device = timeline.emulated_cpu_percent(
            records, measured_s, speed_factor=speed_factor, cores=profile.cores, compute_s=compute
        )
        elapsed_s = measured_s * sampled
        cpu_pct = float(per_device.mean())
        wire = timeline.wire_bytes(records, topology)
    sent_kb = float(wire["sent"].mean() / 1e3) * sampled
    received_kb = float(wire["received"].mean() / 1e3) * sampled
    measured_rounds = int(records["round"].nunique())
    return {
        "model": cfg["model"],
        "devices": int(cfg["n_devices"]),
        "worker_data": cfg["worker_data"],
        "repeat": int(run.params.get("repeat", 0)),
        "clock": clock,
        "accuracy": float(run.tables["evaluations"]["accuracy"].iloc[-1]) if sampled == 1.0 else float("nan"),
        "rounds": round(measured_rounds * sampled),
        "rounds_measured": measured_rounds,
        "syncs_per_device": round(int(records.groupby("device").size().max()) * sampled),
        "elapsed_s": elapsed_s,
        "projected_s": elapsed_s * scale,
        "compute_share": compute_share,
        "cpu_pct": cpu_pct,
        "cpu_pct_host": host["cpu_pct"],
        "rss_mb_host": host["rss_mb"],
        "working_set_mb": float(records["working_set_bytes"].mean() / 2**20),
        "sent_kb_per_device": sent_kb,
        "received_kb_per_device": received_kb,
        "sent_kb_projected": sent_kb * scale,
        "received_kb_projected": received_kb * scale,
        "sent_kb_s": sent_kb / elapsed_s,
        "received_kb_s": received_kb / elapsed_s,
        "round0_cpu_ratio": _round0_ratio(records),
        "host_train_wall_s": float(run.summary["host"]["train_wall_s"]),
        "recoveries": int(len(run.tables.get("recoveries", pd.DataFrame()))),
        "n_train": n_train,
        "speed_factor": speed_factor * contention if clock not in ("wall", "device_model") else float("nan"),
        "contention": contention if clock not in ("wall", "device_model") else float("nan"),
    }


def fit_speed_factor(
    runs: Sequence[StoredRun],
    profile: DeviceProfile,
    *,
    topology: Topology,
    target_s: float,
    paper_train_size: int,
) -> float | None:
    """The speed factor at which the median projected time of ``runs`` equals ``target_s``.

    ``runs`` are measurements of the one cell fitted (e.g. every 1-device run
    of a model); their median is fitted, so one noisy run does not set the
    clock. ``None`` when no factor reaches the target (communication alone is
    slower).
    """
    grids = [timeline.RoundGrid.of(r.tables["records"]) for r in runs]  # the bisection composes each run ~40 times

    def projected(factor: float) -> float:
        times = [
            elapsed(r, profile, clock="calibrated", speed_factor=factor, topology=topology, grid=grid)
            * paper_train_size
            / int(r.params["dataset"]["n_train"])
            for r, grid in zip(runs, grids, strict=True)
        ]
        return float(np.median(times))

    return timeline.solve_speed_factor(projected, target_s)


def link_models(
    runs: Sequence[StoredRun],
    ones: Sequence[StoredRun],
    profile: DeviceProfile,
    *,
    target_s: float,
    paper_train_size: int,
    contention: dict[tuple[str, int], float] | None = None,
    chosen: Topology | None = None,
) -> list[dict[str, Any]]:
    """Projected times of ``runs`` under every one of ``LINK_MODELS``, each fitted on the median of ``ones``.

    Labelled alternatives to the chosen link model: the same measurements,
    recomposed, show which model of the network explains a paper's growth.
    With ``contention``, the CPU is corrected as the primary clock is, and the
    ``chosen`` model is added once more with the CPU as measured.
    """
    factors = contention or {}
    variants = [(name, topology, True) for name, topology in LINK_MODELS.items()]
    if factors and chosen is not None:
        name = next((n for n, t in LINK_MODELS.items() if t == chosen), "chosen")
        variants.append((f"{name}, CPU as measured (no contention correction)", chosen, False))
    out = []
    for name, topology, corrected in variants:
        factor = fit_speed_factor(
            ones, profile, topology=topology, target_s=target_s, paper_train_size=paper_train_size
        )
        if factor is None:
            continue
        for run in runs:
            cell = (str(run.params["train"]["model"]), int(run.params["train"]["n_devices"]))
            row = run_summary(
                run,
                profile,
                clock="calibrated",
                speed_factor=factor,
                topology=topology,
                paper_train_size=paper_train_size,
                contention=factors.get(cell, 1.0) if corrected else 1.0,
            )
            out.append(
                {
                    "link_model": name,
                    **{k: row[k] for k in ("model", "devices", "worker_data", "repeat")},
                    "speed_factor": factor,
                    "projected_s": row["projected_s"],
                }
            )
    return out


def recoveries(runs: Sequence[StoredRun]) -> pd.DataFrame:
    """Every recovery of a lost device during ``runs``, with its run's cell."""
    frames = []
    for run in runs:
        rec = run.tables.get("recoveries")
        if rec is not None and not rec.empty:
            cfg = run.params["train"]
            frames.append(
                rec.assign(
                    model=cfg["model"],
                    devices=cfg["n_devices"],
                    worker_data=cfg["worker_data"],
                    repeat=run.params.get("repeat", 0),
                )
            )
    columns = ["model", "devices", "worker_data", "repeat", "device", "phase", "at", "back_s", "time_lost_s"]
    return pd.concat(frames)[columns] if frames else pd.DataFrame(columns=columns)


def _host_use(monitor: pd.DataFrame) -> dict[str, float]:
    """Mean resident memory (MB) and CPU (% of one core) of the device workers, from the monitor."""
    if monitor.empty:
        return {"rss_mb": float("nan"), "cpu_pct": float("nan")}
    rss = monitor.groupby("device")["rss_bytes"].mean().mean() / 2**20
    cpu = pd.concat([utilisation(g) for _, g in monitor.groupby("device")])["cpu_pct"].mean()
    return {"rss_mb": float(rss), "cpu_pct": float(cpu)}


def _round0_ratio(records: pd.DataFrame) -> float:
    """CPU time of round 0 over the median of later rounds (1 when nothing is paid once)."""
    per_round = records.groupby("round")["cpu_s"].max()
    if len(per_round) < 2:
        return float("nan")
    return float(per_round.iloc[0] / per_round.iloc[1:].median())
