"""Pipelined training on the emulated clock: each pass's measured cost, composed as the devices would run it.

The device model of the rest of edgelab (``edgelab.emulation.timeline``,
``edgelab.emulation.stream_clock``): a pass takes the CPU time its worker process
measured, times the calibration's speed factor; a transfer takes the link's
latency plus the bytes really sent over the link's rate. The composition:

* each device runs its passes one at a time, in the order it ran them
  (the schedule's order: ``edgelab.pipeline.training`` chains them);
* a forward on stage ``s`` starts once stage ``s - 1``'s forward of the same
  micro-batch has arrived; a backward once stage ``s + 1``'s gradient has;
  stage 0's inputs and the last stage's labels are on their devices already
  (the training data sits where it is used, as in data-parallel training);
* an output goes over its device's own uplink (switched full-duplex Ethernet:
  one flow per link direction), one send after another.

So the schedule is the real run's, and only the clock is the device's: the
bubbles it shows are those the measured stage costs and bytes make, on a Pi.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

#: The pass whose output a pass waits for: the previous stage's forward, or the next stage's gradient.
_FORWARDS = ("forward", "forward+backward")
_BACKWARDS = ("backward", "forward+backward")


@dataclass(frozen=True)
class LinkModel:
    """A device's uplink: latency plus bytes over its rate."""

    bytes_per_s: float
    latency_s: float

    def seconds(self, n_bytes: float) -> float:
        """Time to send ``n_bytes``."""
        return self.latency_s + n_bytes / self.bytes_per_s


def stage_index(stage: str) -> int:
    """``stage-3`` -> 3."""
    return int(str(stage).rsplit("-", 1)[-1])


def compose(records: pd.DataFrame, *, speed_factor: float, link: LinkModel) -> pd.DataFrame:
    """Every pass of a pipelined training run on the emulated clock.

    Parameters
    ----------
    records
        ``PipelineTraining.records``: kind, stage, step, micro_batch, device, t_start, cpu_s, bytes_out.
    speed_factor
        Device seconds per second of host CPU time (``edgelab.emulation.profiles.calibrate``).
    link
        Every device's uplink.

    Returns
    -------
    pd.DataFrame
        The records with ``stage_index`` (0 for the first stage), ``start``, ``end``, ``compute_s`` (device
        seconds) and ``ready`` (when the pass's input had arrived), in the order the passes started on the host.
    """
    passes = records.sort_values("t_start", kind="stable").reset_index(drop=True)
    index = passes["stage"].map(stage_index)
    passes["stage_index"] = index - index.min()  # from 0, the first stage (partition numbers stages from 1)
    last_stage = int(passes["stage_index"].max())
    device_free: dict[str, float] = {}
    uplink_free: dict[str, float] = {}
    arrivals: dict[tuple[str, int, int, int], float] = {}  # (direction, stage, step, micro-batch) -> at the receiver
    starts, ends, ready, compute = [], [], [], []
    # Host start order respects both orders the clock needs: a device's own passes, and a pass after its input.
    for row in passes.itertuples(index=False):
        s, key = int(row.stage_index), (int(row.step), int(row.micro_batch))
        needs = 0.0
        if row.kind in _FORWARDS and s > 0:
            needs = arrivals[("F", s - 1, *key)]
        elif row.kind == "backward":
            needs = arrivals[("B", s + 1, *key)]
        start = max(needs, device_free.get(row.device, 0.0))
        cost = float(row.cpu_s) * speed_factor
        end = start + cost
        device_free[row.device] = end
        starts.append(start)
        ends.append(end)
        ready.append(needs)
        compute.append(cost)
        if row.kind == "update":
            continue
        direction = "F" if row.kind == "forward" else "B"
        if (direction == "F" and s == last_stage) or (direction == "B" and s == 0):
            continue  # nothing goes further: the loss stays on the last stage, input gradients on the first
        send = max(end, uplink_free.get(row.device, 0.0))
        uplink_free[row.device] = send + link.seconds(float(row.bytes_out))
        arrivals[(direction, s, *key)] = uplink_free[row.device]
    return passes.assign(start=starts, end=ends, ready=ready, compute_s=compute)


def idle_fraction(timeline: pd.DataFrame, start: float | None = None, end: float | None = None) -> float:
    """``1 - busy / (devices x window)`` over a window of the clock (default: the whole run).

    Busy time is each pass's ``end - start`` clipped to the window.
    """
    lo = float(timeline["start"].min()) if start is None else start
    hi = float(timeline["end"].max()) if end is None else end
    if hi <= lo:
        return float("nan")
    busy = (np.minimum(timeline["end"], hi) - np.maximum(timeline["start"], lo)).clip(lower=0).sum()
    return float(1 - busy / (timeline["device"].nunique() * (hi - lo)))


def step_bubbles(timeline: pd.DataFrame) -> pd.Series:
    """Per mini-batch (GPipe), the idle share from its first pass's start to its last pass's end."""
    return timeline.groupby("step").apply(idle_fraction, include_groups=False).rename("bubble")


def steady_window(timeline: pd.DataFrame) -> tuple[float, float]:
    """1F1B's steady state: from stage 0's first backward to the end of its last forward.

    Stage 0 has the longest warm-up (a forward per stage before its first
    backward) and starts the drain with its last forward, so between the two
    every stage alternates forwards and backwards.
    """
    first = timeline[timeline["stage_index"] == 0]
    backwards = first[first["kind"].isin(_BACKWARDS)]
    forwards = first[first["kind"].isin(_FORWARDS)]
    return float(backwards["start"].min()), float(forwards["end"].max())


def in_flight(timeline: pd.DataFrame) -> pd.DataFrame:
    """Per stage, how many micro-batches it holds between their forward and their backward, over time.

    Each holds its kept input and, under weight stashing, the weights its
    forward used: a step function with a row per change (stage, t, held).
    """
    rows = []
    for stage, passes in timeline.groupby("stage_index"):
        keys = passes[passes["micro_batch"] >= 0]
        opened = keys[keys["kind"] == "forward"].set_index(["step", "micro_batch"])["start"]
        closed = keys[keys["kind"] == "backward"].set_index(["step", "micro_batch"])["end"]
        events = sorted([(float(t), 1) for t in opened] + [(float(t), -1) for t in closed.reindex(opened.index)])
        held = 0
        rows.append({"stage": int(stage), "t": 0.0, "held": 0})
        for t, change in events:
            held += change
            rows.append({"stage": int(stage), "t": t, "held": held})
    return pd.DataFrame(rows)
