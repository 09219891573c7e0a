"""What a training run answers in one call: its accuracy, its time on the emulated board, and the host's wall time.

Each number says which clock it is on. On an emulated cluster the board's
time is composed round by round (``edgelab.emulation.timeline``) from each
device's compute on the board's device model (its fitted per-step cost and
FLOP rate) where the board has one, else from the host CPU time the device
spent times the board's speed factor (``edgelab.emulation.profiles.calibrate``),
plus the bytes each round moved over the board's link. On real devices the
time is their measured wall time, and nothing is emulated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


class _Run(Protocol):
    """What the result reads of a run (``edgelab.training.data_parallel.TrainRun``)."""

    config: Any
    records: Any
    evaluations: Any
    host: dict[str, Any]
    profile: Any
    emulated: bool
    topology: Any


@dataclass(frozen=True)
class RunResult:
    """A run's accuracy, its time on the board (and on which clock), and the host's wall time."""

    accuracy: float
    board_s: float
    host_wall_s: float
    board: str
    devices: int
    clock: str

    def __str__(self) -> str:
        return (
            f"accuracy {self.accuracy:.3f}; {self.board_s:,.1f} s on {self.devices} x {self.board} ({self.clock}); "
            f"{self.host_wall_s:,.1f} s of host wall time"
        )


def result_of(run: _Run) -> RunResult:
    """The run's accuracy (the last evaluation's), its board time and clock, and the host's wall time."""
    from edgelab.emulation import timeline
    from edgelab.emulation.device_model import for_profile, has_model
    from edgelab.emulation.profiles import calibrate

    accuracy = float(run.evaluations["accuracy"].iloc[-1]) if len(run.evaluations) else float("nan")
    profile, records = run.profile, run.records
    if profile is None or not run.emulated:
        board_s = float(records.groupby("round")["round_wall_s"].first().sum())
        board, clock = "real devices", "their measured wall time"
    else:
        if has_model(profile.name):
            model = for_profile(profile.name)
            compute = model.records_compute_s(records, run.config.model)
            clock = f"emulated: the {profile.name} device model ({model.describe()})"
            rounds = timeline.compose(records, profile, topology=run.topology, compute_s=compute)
        else:
            factor = calibrate(profile).speed_factor
            clock = f"emulated: host CPU time x {factor:.2f} ({profile.name}'s speed factor) and its link"
            rounds = timeline.compose(records, profile, speed_factor=factor, topology=run.topology)
        board_s, board = float(rounds["elapsed_s"].iloc[-1]), profile.name
    return RunResult(accuracy, board_s, float(run.host["train_wall_s"]), board, run.config.n_devices, clock)
