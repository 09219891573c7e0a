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
steps on it and fits the same terms on those timings
(``edgelab.runtime.board_calibration``); the profile carries them. A measured
board also separates what two paper cells cannot, so its model has three
more terms, each zero or unset unless measured:

    seconds = step_s + params * param_s
              + samples * (conv_and_elementwise_flops / flops_per_s + dense_flops / dense_flops_per_s)
    per round, besides: bytes exchanged * wire_s_per_byte

* ``dense_flops_per_s``: dense layers' matrix products at a rate of their
  own (a board's GEMM on a batch of vectors is not its convolution's rate);
* ``param_s``: a step's cost per trainable parameter (the optimizer's pass
  over weights, gradients and momenta: memory-bound, whatever the batch);
* ``wire_s_per_byte``: the device's own work on each byte of weights it
  receives and sends in a round (decrypt, unpack, the delta, pack, encrypt),
  which the link's rate does not include.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from edgelab.common.errors import ConfigError
from edgelab.emulation.profiles import PROFILES
from edgelab.models.costs import parameter_count, training_flops_by_class, training_flops_per_sample

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
    dense_flops_per_s: float | None = None
    param_s: float = 0.0
    wire_s_per_byte: float = 0.0

    def __post_init__(self) -> None:
        if not self.step_s >= 0:
            raise ConfigError("step_s", self.step_s, "a number of seconds >= 0")
        if not self.flops_per_s > 0:
            raise ConfigError("flops_per_s", self.flops_per_s, "a rate > 0")
        if self.dense_flops_per_s is not None and not self.dense_flops_per_s > 0:
            raise ConfigError("dense_flops_per_s", self.dense_flops_per_s, "a rate > 0, or None (flops_per_s)")
        for name in ("param_s", "wire_s_per_byte"):
            if not getattr(self, name) >= 0:
                raise ConfigError(name, getattr(self, name), "a number of seconds >= 0")

    def compute_s(self, model: str, steps: Any, samples: Any) -> Any:
        """Device seconds of ``steps`` training steps over ``samples`` samples of ``model`` (arrays work)."""
        samples = np.asarray(samples, dtype=float)
        step_s = self.step_s + (self.param_s * parameter_count(model) if self.param_s else 0.0)
        per_step = np.asarray(steps, dtype=float) * step_s
        if self.dense_flops_per_s is None:
            return per_step + samples * training_flops_per_sample(model) / self.flops_per_s
        split = training_flops_by_class(model)
        per_sample = (split["conv"] + split["elementwise"]) / self.flops_per_s + split["dense"] / self.dense_flops_per_s
        return per_step + samples * per_sample

    def wire_s(self, bytes_exchanged: Any) -> Any:
        """Device seconds of its own work on ``bytes_exchanged`` bytes of weights received and sent."""
        return np.asarray(bytes_exchanged, dtype=float) * self.wire_s_per_byte

    def records_compute_s(self, records: Any, model: str) -> np.ndarray:
        """Device seconds of each row of a run's records (``steps`` and ``samples`` columns).

        A round of several local epochs (FedAvg's E) records one epoch's
        ``steps`` and every epoch's ``samples``: its ``local_epochs`` column
        multiplies the steps.
        """
        steps = np.asarray(records["steps"], dtype=float)
        if "local_epochs" in records:
            steps = steps * np.asarray(records["local_epochs"], dtype=float)
        seconds = np.asarray(self.compute_s(model, steps, records["samples"]), dtype=float)
        if self.wire_s_per_byte and {"bytes_sent", "bytes_received"} <= set(records):
            seconds = seconds + self.wire_s(np.asarray(records["bytes_sent"]) + np.asarray(records["bytes_received"]))
        return seconds

    def describe(self) -> str:
        """One line for reports."""
        if self.measured_on:
            basis = f"measured on the board: {self.measured_on}"
        else:
            basis = f"fitted on {' and '.join(self.fitted_on) or 'given values'}"
        rates = f"{self.step_s * 1e3:.1f} ms per step + {self.flops_per_s / 1e9:.3f} GFLOP/s"
        if self.dense_flops_per_s is not None:
            rates += f" (dense {self.dense_flops_per_s / 1e9:.3f})"
        if self.param_s:
            rates += f" + {self.param_s * 1e9:.2f} ns per parameter per step"
        if self.wire_s_per_byte:
            rates += f" + {self.wire_s_per_byte * 1e9:.2f} ns per byte exchanged"
        return f"device model {self.profile}: {rates} ({basis})"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (runs keep it among their parameters: a paper-fitted model's has no ``measured_on``)."""
        out = asdict(self)
        # Terms at their defaults are left out, so that the keys of runs stored before they existed still match.
        defaults = {"measured_on": "", "dense_flops_per_s": None, "param_s": 0.0, "wire_s_per_byte": 0.0}
        for name, default in defaults.items():
            if out[name] == default:
                del out[name]
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
        return DeviceModel(
            profile,
            board.step_s,
            board.flops_per_s,
            measured_on=board.measured_on,
            dense_flops_per_s=board.dense_flops_per_s,
            param_s=board.param_s,
            wire_s_per_byte=board.wire_s_per_byte,
        )
    cells = list(FIT_CELLS[profile])
    targets = []
    for item_id, *_ in cells:
        ref = load_reference(item_id)
        row = ref[(ref["devices"] == 1) & (ref["metric"] == "elapsed_time_s")]
        targets.append(float(row["value"].iloc[0]))
    return fit(profile, cells, targets)
