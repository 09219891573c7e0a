"""An end / edge / cloud hierarchy of emulated devices on one Dask cluster.

Real edge deployments are tiers: many weak end devices, a few stronger edge
servers, a distant cloud, each with its own link. A ``Tier`` says how many
devices a tier has, their cores and memory, and the link a task crosses to
reach them (latency there and back, and bandwidth); a ``HierarchySpec`` lists
the tiers, and ``start_hierarchy`` starts one worker process per device, named
``<tier>-<i>`` and carrying the Dask resources ``device-<name>`` and
``tier-<tier>``: work is pinned to a tier or a device by resource, never by
address.

A device's TensorFlow gets as many threads as its tier has cores, at most
the host's (a 4-core edge server on a 2-core host gets 2); each worker runs
one task at a time, as each of Zhang 2018's devices serves one request at a
time. ``ZHANG2018`` is the report's evaluation system (section 4.2): 8 end
devices of 1 vCPU, 4 edge devices of 4 vCPUs, one GPU cloud; 0.5 s added to
every task sent to an edge and 1 s to the cloud (each covering sending and
receiving). The report states neither memory nor bandwidth: the values here
are assumptions, recorded as such in ``Tier.assumed``.

Paper: Zongpu Zhang, "Optimization of Deep Learning Applications in Highly
Heterogeneous Distributed System", SJTU EE447 report, 2018.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from edgelab.common import checks
from edgelab.common.errors import ConfigError

#: The tiers, bottom up: every task starts at an end device.
TIERS = ("end", "edge", "cloud")


@dataclass(frozen=True)
class Tier:
    """One tier of the hierarchy.

    Parameters
    ----------
    name
        ``"end"``, ``"edge"`` or ``"cloud"``.
    devices
        How many devices it has (an end tier needs one at least).
    cores
        CPU cores of each device; its TensorFlow threads (capped at the host's).
    memory_mb
        Memory of each device.
    latency_s
        Added to every task a device of this tier receives, sending and receiving together.
    link_mbps
        Bandwidth of the link to each device of this tier.
    accelerator
        ``"gpu"`` when the tier's devices have one (used where the host has one).
    assumed
        Which of these values the source does not state.
    """

    name: str
    devices: int
    cores: int
    memory_mb: int
    latency_s: float
    link_mbps: float
    accelerator: str = ""
    assumed: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.name not in TIERS:
            raise ConfigError("tier", self.name, f"one of {', '.join(TIERS)}")
        checks.integer(f"{self.name}.devices", self.devices, at_least=1 if self.name == "end" else 0)
        checks.integer(f"{self.name}.cores", self.cores, at_least=1)
        checks.integer(f"{self.name}.memory_mb", self.memory_mb, at_least=1)
        for key in ("latency_s", "link_mbps"):
            value = getattr(self, key)
            bad = isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
            if bad or value < 0 or (key == "link_mbps" and value == 0):
                allowed = "a number of seconds >= 0" if key == "latency_s" else "a number of Mbit/s > 0"
                raise ConfigError(f"{self.name}.{key}", value, allowed)
        if self.accelerator not in ("", "gpu"):
            raise ConfigError(f"{self.name}.accelerator", self.accelerator, "'' or 'gpu'")

    def device_names(self) -> list[str]:
        """``end-0``, ``end-1`` ..."""
        return [f"{self.name}-{i}" for i in range(self.devices)]

    def transfer_s(self, nbytes: int) -> float:
        """Seconds for ``nbytes`` to cross this tier's link, beside its latency."""
        return 8 * nbytes / (self.link_mbps * 1e6)


@dataclass(frozen=True)
class HierarchySpec:
    """The tiers of a hierarchy, one of each name at most, an end tier always."""

    tiers: tuple[Tier, ...]
    name: str = "custom"
    notes: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        names = [t.name for t in self.tiers]
        if len(set(names)) != len(names):
            raise ConfigError("tiers", names, "each of end, edge, cloud at most once")
        if "end" not in names:
            raise ConfigError("tiers", names, "an end tier: every task comes from an end device")

    def tier(self, name: str) -> Tier | None:
        """The tier called ``name``, or None when the hierarchy has none."""
        if name not in TIERS:
            raise ConfigError("tier", name, f"one of {', '.join(TIERS)}")
        return next((t for t in self.tiers if t.name == name), None)

    def count(self, name: str) -> int:
        """How many devices tier ``name`` has (0 when it is absent)."""
        tier = self.tier(name)
        return 0 if tier is None else tier.devices

    def devices(self) -> dict[str, str]:
        """Every device name, bottom tier first, and its tier."""
        return {d: t.name for name in TIERS if (t := self.tier(name)) for d in t.device_names()}

    def scaled(self, **devices: int) -> HierarchySpec:
        """The same hierarchy with other device counts, e.g. ``scaled(end=4)``."""
        for name in devices:
            if name not in self._names():
                raise ConfigError(name, devices[name], f"a tier of this hierarchy ({', '.join(self._names())})")
        tiers = tuple(
            Tier(**{**asdict(t), "devices": devices.get(t.name, t.devices), "assumed": t.assumed}) for t in self.tiers
        )
        return HierarchySpec(tiers, self.name, self.notes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (results record it)."""
        return {"name": self.name, "tiers": [asdict(t) for t in self.tiers], "notes": dict(self.notes)}

    def _names(self) -> list[str]:
        return [t.name for t in self.tiers]


ZHANG2018 = HierarchySpec(
    (
        Tier("end", 8, 1, 1024, 0.0, 1000.0, assumed=("memory_mb", "link_mbps")),
        Tier("edge", 4, 4, 4096, 0.5, 1000.0, assumed=("memory_mb", "link_mbps")),
        Tier("cloud", 1, 8, 16384, 1.0, 1000.0, accelerator="gpu", assumed=("cores", "memory_mb", "link_mbps")),
    ),
    name="zhang2018",
    notes={
        "source": "Zhang 2018, section 4.2: 8 end VMs of 1 vCPU, 4 edge VMs of 4 vCPUs, 1 GPU cloud",
        "latency": "added per task, sending and receiving together: 0.5 s to an edge, 1 s to the cloud",
        "assumed": "memory, bandwidth and the cloud's cores are not stated; the values here are choices",
    },
)
