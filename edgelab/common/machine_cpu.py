"""What the whole machine's CPUs did over a window, from ``/proc/stat``: busy, idle, and stolen.

On a virtual machine the hypervisor may run other guests on the cores this
one was given. Linux counts that time as *steal*: the guest wanted its CPU
and did not get it. A kernel with steal accounting (``PARAVIRT_TIME_ACCOUNTING``)
charges no task, and so no cgroup quota, for it: a process held to a fifth of
a core is charged only for the time it ran, but it waits while others run,
and the machine's processes share less CPU in all. A board measured on such a
machine, or limited hosts run on one, are slower in the hours the hypervisor
takes more.

Where ``/proc/stat`` is missing (not Linux) :func:`read` returns None.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

PROC_STAT = "/proc/stat"


@dataclass(frozen=True)
class CpuTimes:
    """The machine's CPU time so far, in clock ticks summed over its CPUs, and when it was read.

    ``busy`` is user, nice, system, irq and softirq time (a guest's own
    guests are already in user); ``idle`` includes waiting for I/O.
    """

    wall_s: float
    busy: int
    idle: int
    steal: int

    @property
    def total(self) -> int:
        """Every tick counted: busy, idle and stolen."""
        return self.busy + self.idle + self.steal


def parse(text: str, wall_s: float) -> CpuTimes:
    r"""The ``cpu`` line of a ``/proc/stat`` text as ``CpuTimes`` read at ``wall_s``.

    Examples
    --------
    >>> parse("cpu  100 5 20 800 10 1 2 62 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n", 3.0)
    CpuTimes(wall_s=3.0, busy=128, idle=810, steal=62)
    """
    first = text.split("\n", 1)[0].split()
    if not first or first[0] != "cpu":
        raise ValueError(f"not a /proc/stat text: its first line is {text[:80]!r}")
    ticks = [int(v) for v in first[1:]] + [0] * 8  # older kernels give fewer columns
    user, nice, system, idle, iowait, irq, softirq, steal = ticks[:8]
    return CpuTimes(wall_s, user + nice + system + irq + softirq, idle + iowait, steal)


def read(path: str | os.PathLike[str] = PROC_STAT) -> CpuTimes | None:
    """The machine's CPU times now; None where the file is missing."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    return parse(text, time.monotonic())


def shares(before: CpuTimes | None, after: CpuTimes | None, cpus: int | None = None) -> dict[str, float]:
    """Between two readings, how the machine's CPU time went.

    * ``busy_cores``: the guest's own work, in cores;
    * ``steal_share``: stolen, of all its CPU time (what ``top`` shows as ``st``);
    * ``stolen_of_wanted``: stolen, of the time it wanted (its own work plus
      the steal). Steal accrues only while the guest has work to run, so an
      idle hour shows none: this share is what a busy guest loses.

    NaN for each when either reading is missing or no time passed.

    Examples
    --------
    >>> shares(CpuTimes(0.0, 0, 0, 0), CpuTimes(1.0, 100, 60, 40), cpus=2)
    {'busy_cores': 1.0, 'steal_share': 0.2, 'stolen_of_wanted': 0.2857142857142857}
    """
    nan = float("nan")
    if before is None or after is None or after.total <= before.total:
        return {"busy_cores": nan, "steal_share": nan, "stolen_of_wanted": nan}
    total = after.total - before.total
    busy, steal = after.busy - before.busy, after.steal - before.steal
    return {
        "busy_cores": busy / total * (cpus or os.cpu_count() or 1),
        "steal_share": steal / total,
        "stolen_of_wanted": steal / (busy + steal) if busy + steal else nan,
    }
