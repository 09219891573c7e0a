"""Straggler deadlines: how long a synchronous round waits for its devices, on the emulated clock.

A synchronous round lasts as long as its slowest device (qiao C10). With a
deadline the server stops waiting: an update that arrives later is dropped,
or kept and applied in the next round, one round stale (``late``). The
deadline is a fixed number of seconds from the round's start, or adapts to the
arrivals of recent rounds: their median plus ``k`` median absolute deviations
(a robust bound that a single slow device does not drag along). A device's
arrival is its download, its compute and its upload on its own link, on the
device clock (``arrival_s``); ``slowness`` reports each device's arrivals.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from edgelab.common.errors import ConfigError

LATE_POLICIES = ("drop", "stale")
DEADLINES = ("none", "fixed:<seconds>", "adaptive:<k>")
#: Rounds of arrivals an adaptive deadline looks back on.
WINDOW = 5


@dataclass
class Deadline:
    """When the next round stops waiting: ``fixed_s`` after its start, or median + k·MAD of recent arrivals.

    Examples
    --------
    >>> d = build_deadline("adaptive:2")
    >>> d.limit_s()  # no arrivals seen yet: wait for every device
    inf
    >>> d.observe([1.0, 1.1, 0.9, 4.0])
    >>> round(d.limit_s(), 3)  # median 1.05 + 2 * MAD 0.1
    1.25
    """

    fixed_s: float | None = None
    k: float | None = None
    recent: deque[list[float]] = field(default_factory=lambda: deque(maxlen=WINDOW))

    def limit_s(self) -> float:
        """Seconds from the round's start after which an update is late."""
        if self.fixed_s is not None:
            return self.fixed_s
        seen = np.array([t for arrivals in self.recent for t in arrivals], dtype=float)
        if self.k is None or not len(seen):
            return math.inf
        median = float(np.median(seen))
        return median + self.k * float(np.median(np.abs(seen - median)))

    def observe(self, arrivals: list[float]) -> None:
        """The arrival times of the round just run (late ones too: they say how slow the devices are)."""
        self.recent.append([float(t) for t in arrivals])


def build_deadline(spec: str) -> Deadline | None:
    """``"none"`` -> None; ``"fixed:<seconds>"`` (> 0); ``"adaptive:<k>"`` (k >= 0 MADs above the median)."""
    name, _, value = str(spec).partition(":")
    if spec == "none":
        return None
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if name == "fixed" and number > 0 and math.isfinite(number):
        return Deadline(fixed_s=number)
    if name == "adaptive" and number >= 0 and math.isfinite(number):
        return Deadline(k=number)
    raise ConfigError("deadline", spec, f"one of {', '.join(DEADLINES)} (seconds > 0 on the device clock; k >= 0 MADs)")


def arrival_s(
    compute_s: float, pull_bytes: float, push_bytes: float, rate_bytes_per_s: float, latency_s: float
) -> float:
    """A device's update arrives after its download, its compute and its upload, each on its own link."""
    return 2 * latency_s + (pull_bytes + push_bytes) / rate_bytes_per_s + compute_s


def slowness(records: pd.DataFrame) -> pd.DataFrame:
    """Per device: rounds, median and worst arrival, late updates and their share (``late`` records' rows)."""
    by = records.groupby("device")
    return pd.DataFrame(
        {
            "rounds": by.size(),
            "median_arrival_s": by["arrival_s"].median(),
            "max_arrival_s": by["arrival_s"].max(),
            "late": by["late"].sum().astype(int),
            "late_share": by["late"].mean(),
        }
    ).reset_index()
