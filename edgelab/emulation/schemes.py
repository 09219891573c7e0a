"""How long a job takes on an end / edge / cloud hierarchy under each scheduling scheme, and where to send it.

A job of ``n_tasks`` tasks (Zhang 2018: 10,000 CIFAR-100 test images in tasks
of 50) comes from the end devices. Every task gets a quick coarse answer on an
end device; then, by scheme:

* ``End``: nothing more (eq1);
* ``End-Cloud``: every task also goes to the cloud for the fine answer (eq2);
* ``End-Edge``: every task also goes to an edge device (eq3);
* ``Mapping``: ``n_map`` end devices per edge device (eq4), edges filled
  first, the remaining end devices' tasks to the cloud (eq5, eq6).

Each tier is described by its per-task communication latency (send and
receive together, as the report counts it) and processing time. These are the
report's equations, with its assumptions: tasks spread evenly over a tier's
devices, the two stages one after the other with no overlap. Where the report's
eq5 goes negative (fewer end devices than edges can take) it is read as 0 (the
catalog's P-eq5).

Beyond the report, ``place`` searches the per-device mappings for the one
that finishes first: each end device sends its second stages to one edge
device or the cloud, each target works through what it receives one task at a
time, and the job ends when the busiest target does. With end devices carrying
equal shares, assigning them one by one to the target that would finish
earliest is optimal (equal jobs on machines of different speeds).

Paper: Zongpu Zhang, "Optimization of Deep Learning Applications in Highly
Heterogeneous Distributed System", SJTU EE447 report, 2018 (section 3.4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from edgelab.common import checks
from edgelab.common.errors import ConfigError

#: The report's four schemes, in its order.
SCHEMES = ("End", "End-Cloud", "End-Edge", "Mapping")


@dataclass(frozen=True)
class TierTimes:
    """One task's time on a device of a tier: the link's latency (there and back) and the processing."""

    latency_s: float
    process_s: float

    def __post_init__(self) -> None:
        for name in ("latency_s", "process_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise ConfigError(name, value, "a number of seconds >= 0")

    @property
    def task_s(self) -> float:
        """Latency plus processing: what one task costs the device."""
        return self.latency_s + self.process_s


@dataclass(frozen=True)
class Hierarchy:
    """How many devices each tier has, and each tier's per-task times."""

    n_end: int
    n_edge: int
    n_cloud: int
    end: TierTimes
    edge: TierTimes
    cloud: TierTimes

    def __post_init__(self) -> None:
        checks.integer("n_end", self.n_end, at_least=1)  # every task comes from an end device
        checks.integer("n_edge", self.n_edge, at_least=0)
        checks.integer("n_cloud", self.n_cloud, at_least=0)


def t_end(n_tasks: int, h: Hierarchy) -> float:
    """Eq1: ``N_t / N_end * (t^c_end + t^p_end)``."""
    checks.integer("n_tasks", n_tasks, at_least=1)
    return n_tasks / h.n_end * h.end.task_s


def t_end_cloud(n_tasks: int, h: Hierarchy) -> float:
    """Eq2: ``T_End + N_t / N_cloud * (t^c_cloud + t^p_cloud)``."""
    _need("End-Cloud", "n_cloud", h.n_cloud)
    return t_end(n_tasks, h) + n_tasks / h.n_cloud * h.cloud.task_s


def t_end_edge(n_tasks: int, h: Hierarchy) -> float:
    """Eq3: ``T_End + N_t / N_edge * (t^c_edge + t^p_edge)``."""
    _need("End-Edge", "n_edge", h.n_edge)
    return t_end(n_tasks, h) + n_tasks / h.n_edge * h.edge.task_s


def n_map(h: Hierarchy) -> int:
    """Eq4: end devices per edge device, ``ceil((t^c_edge + t^p_edge) / (t^c_end + t^p_end))``."""
    if h.end.task_s <= 0:
        raise ConfigError("end", h.end, "an end tier whose task takes some time (latency + processing > 0)")
    return max(1, math.ceil(h.edge.task_s / h.end.task_s))


def theta_cloud(h: Hierarchy, mapped: int | None = None) -> float:
    """Eq5: the share of end devices left for the cloud once every edge has ``mapped`` (default eq4's), at least 0."""
    mapped = n_map(h) if mapped is None else checks.integer("n_map", mapped, at_least=1)
    return max(0.0, (h.n_end - h.n_edge * mapped) / h.n_end)


def t_mapping(n_tasks: int, h: Hierarchy, mapped: int | None = None) -> float:
    """Eq6: ``theta_cloud * T_End-Cloud + (1 - theta_cloud) * T_End-Edge``."""
    theta = theta_cloud(h, mapped)
    cloud = t_end_cloud(n_tasks, h) if theta > 0 else 0.0
    edge = t_end_edge(n_tasks, h) if theta < 1 else 0.0
    return theta * cloud + (1 - theta) * edge


def completion_times(n_tasks: int, h: Hierarchy, mapped: int | None = None) -> dict[str, float]:
    """Every scheme's completion time (eq1-eq6) that the hierarchy can run, by scheme."""
    times = {"End": t_end(n_tasks, h)}
    if h.n_cloud:
        times["End-Cloud"] = t_end_cloud(n_tasks, h)
    if h.n_edge:
        times["End-Edge"] = t_end_edge(n_tasks, h)
    if h.n_edge and (h.n_cloud or theta_cloud(h, mapped) == 0):
        times["Mapping"] = t_mapping(n_tasks, h, mapped)
    return times


@dataclass(frozen=True)
class Placement:
    """Where each end device sends its second stages, and when the job ends."""

    targets: tuple[str, ...]  # per end device: "edge-<k>" or "cloud-<k>"
    completion_s: float
    busiest_s: dict[str, float] = field(default_factory=dict)  # each target's second-stage time


def place(n_tasks: int, h: Hierarchy) -> Placement:
    """The per-device mapping of end devices to edge and cloud devices that finishes the job first.

    Each end device carries ``n_tasks / n_end`` tasks; a target's time is its
    tasks times its per-task time; the job ends ``T_End`` plus the busiest
    target's time later (the report's no-overlap assumption).
    """
    targets = [(f"edge-{k}", h.edge.task_s) for k in range(h.n_edge)]
    targets += [(f"cloud-{k}", h.cloud.task_s) for k in range(h.n_cloud)]
    if not targets:
        raise ConfigError("n_edge", h.n_edge, "at least one edge or cloud device to place second stages on")
    share = n_tasks / h.n_end
    load = dict.fromkeys((name for name, _ in targets), 0.0)
    chosen = []
    for _ in range(h.n_end):
        # The target that would finish earliest with one more end device (ties: the first listed).
        name, task_s = min(targets, key=lambda t: load[t[0]] + share * t[1])
        load[name] += share * task_s
        chosen.append(name)
    return Placement(tuple(chosen), t_end(n_tasks, h) + max(load.values()), {k: v for k, v in load.items() if v})


def _need(scheme: str, name: str, value: int) -> None:
    if value < 1:
        raise ConfigError(name, value, f"at least 1 for scheme {scheme}")
