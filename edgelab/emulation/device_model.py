"""One model of a device's training speed, fitted once per profile and used for every experiment.

A device takes, for one training step of ``samples`` samples,

    seconds = step_s + samples * flops_per_sample / flops_per_s

* ``flops_per_s``: the FLOP rate the device sustains while training
  (the multiply-adds of convolutions and dense layers, and the element-wise
  work, counted by ``edgelab.models.costs``);
* ``step_s``: what a step costs whatever its size: the framework's dispatch
  of every operator, the optimizer's pass, the calls into the parameter
  server's client.

Two unknowns, fitted on two cells of the paper that differ in how much of
their time is per step and how much per FLOP: for the Pi 3B, Park 2020's
LeNet-MLP and LeNet-CNN on one device (Tables 1 and 2, 105 s and 1079 s for
938 steps of batch 64). No other cell is used: every other cell of every
experiment of the profile, the ResNets included, is then a prediction.

A step's compute therefore does not come from the host's measured CPU time:
the host is far faster than a Pi on convolutions than on small dense layers
(measured: one per-table speed factor of 18.5 for the MLP, 50.8 for the CNN),
so no single factor maps host CPU time onto a Pi for two models. The host's
CPU time still drives the labelled alternatives (``edgelab.emulation.projection``).

A board of one's own needs no paper: ``edgelab calibrate`` times real training
steps on it and fits the same two terms on those timings
(``edgelab.runtime.board_calibration``); the profile carries them.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from edgelab.common.errors import ConfigError
from edgelab.emulation.profiles import PROFILES
from edgelab.models.costs import training_flops_per_sample

#: The two cells of each profile its device model is fitted on: (id, model, batch, training samples).
FIT_CELLS: dict[str, tuple[tuple[str, str, int, int], ...]] = {
    "pi3b": (
        ("park2020/table1", "mlp", 64, 60_000),
        ("park2020/table2", "cnn", 64, 60_000),
    ),
}


@dataclass(frozen=True)
class DeviceModel:
    """Seconds a device takes per training step: a fixed cost plus a cost per FLOP.

    Parameters
    ----------
    profile
        The device profile it describes.
    step_s
        Fixed cost of one training step, in seconds.
    flops_per_s
        Sustained training FLOP rate.
    fitted_on
        The cells it was fitted on (for reports).
    measured_on
        For a board measured by ``edgelab calibrate``: where and when (its
        terms come from timings on the board, no paper cell).
    """

    profile: str
    step_s: float
    flops_per_s: float
    fitted_on: tuple[str, ...] = ()
    measured_on: str = ""

    def __post_init__(self) -> None:
        if not self.step_s >= 0:
            raise ConfigError("step_s", self.step_s, "a number of seconds >= 0")
        if not self.flops_per_s > 0:
            raise ConfigError("flops_per_s", self.flops_per_s, "a rate > 0")

    def compute_s(self, model: str, steps: Any, samples: Any) -> Any:
        """Device seconds of ``steps`` training steps over ``samples`` samples of ``model`` (arrays work)."""
        flops = np.asarray(samples, dtype=float) * training_flops_per_sample(model)
        return np.asarray(steps, dtype=float) * self.step_s + flops / self.flops_per_s

    def records_compute_s(self, records: Any, model: str) -> np.ndarray:
        """Device seconds of each row of a run's records (``steps`` and ``samples`` columns).

        A round of several local epochs (FedAvg's E) records one epoch's
        ``steps`` and every epoch's ``samples``: its ``local_epochs`` column
        multiplies the steps.
        """
        steps = np.asarray(records["steps"], dtype=float)
        if "local_epochs" in records:
            steps = steps * np.asarray(records["local_epochs"], dtype=float)
        return np.asarray(self.compute_s(model, steps, records["samples"]), dtype=float)

    def describe(self) -> str:
        """One line for reports."""
        if self.measured_on:
            basis = f"measured on the board: {self.measured_on}"
        else:
            basis = f"fitted on {' and '.join(self.fitted_on) or 'given values'}"
        rates = f"{self.step_s * 1e3:.1f} ms per step + {self.flops_per_s / 1e9:.3f} GFLOP/s"
        return f"device model {self.profile}: {rates} ({basis})"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (runs keep it among their parameters: a paper-fitted model's has no ``measured_on``)."""
        out = asdict(self)
        if not self.measured_on:
            del out["measured_on"]  # so the keys of runs stored before boards could be measured still match
        return out


def fit(
    profile: str,
    cells: list[tuple[str, str, int, int]],
    targets_s: list[float],
    comm_s: list[float] | None = None,
) -> DeviceModel:
    """Fit ``step_s`` and ``flops_per_s`` so that two cells take their target times.

    Parameters
    ----------
    profile
        Profile name.
    cells
        Two ``(id, model, batch_size, training samples)`` cells, each one
        epoch on one device.
    targets_s
        The paper's elapsed time of each cell.
    comm_s
        Time of each cell spent on the network (0 when the parameter server
        runs on the device itself), subtracted before fitting.

    Raises
    ------
    ConfigError
        If the cells do not determine a model with both terms >= 0 (e.g. the
        same model twice).
    """
    if len(cells) != 2 or len(targets_s) != 2:
        raise ConfigError("cells", [c[0] for c in cells], "exactly two cells with their target times")
    comm_s = comm_s or [0.0, 0.0]
    rows, rhs = [], []
    for (_, model, batch, samples), target, comm in zip(cells, targets_s, comm_s, strict=True):
        rows.append([math.ceil(samples / batch), samples * training_flops_per_sample(model)])
        rhs.append(target - comm)
    matrix = np.array(rows, dtype=float)
    if abs(np.linalg.det(matrix)) < 1e-9 * np.abs(matrix).max() ** 2:
        raise ConfigError("cells", [c[0] for c in cells], "two cells with different steps-to-FLOPs ratios")
    step_s, s_per_flop = np.linalg.solve(matrix, np.array(rhs, dtype=float))
    if step_s < 0 or s_per_flop <= 0:
        raise ConfigError(
            "cells",
            [c[0] for c in cells],
            f"cells giving a step cost >= 0 and a rate > 0 (got {step_s:.4g} s, {s_per_flop:.4g} s/FLOP)",
        )
    return DeviceModel(profile, float(step_s), float(1.0 / s_per_flop), tuple(c[0] for c in cells))


def has_model(profile: str) -> bool:
    """Whether a profile has a device model: fitted on paper cells, or measured on the board."""
    return profile in FIT_CELLS or (profile in PROFILES and PROFILES[profile].step_s is not None)


def for_profile(profile: str) -> DeviceModel:
    """A profile's device model: measured on the board, or fitted on its ``FIT_CELLS`` (the paper's 1-device times)."""
    from edgelab.report.reference import load_reference

    if not has_model(profile):
        raise ConfigError(
            "device_profile",
            profile,
            f"a profile with a device model: {', '.join(FIT_CELLS)}, or a board measured by `edgelab calibrate`",
        )
    board = PROFILES.get(profile)
    if board is not None and board.step_s is not None and board.flops_per_s is not None:
        return DeviceModel(profile, board.step_s, board.flops_per_s, measured_on=board.measured_on)
    cells = list(FIT_CELLS[profile])
    targets = []
    for item_id, *_ in cells:
        ref = load_reference(item_id)
        row = ref[(ref["devices"] == 1) & (ref["metric"] == "elapsed_time_s")]
        targets.append(float(row["value"].iloc[0]))
    return fit(profile, cells, targets)
