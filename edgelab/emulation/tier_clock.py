"""Emulated time on an end / edge / cloud hierarchy: per-image times per tier, and the schedule of a job's stages.

The report's tiers are virtual machines (1 vCPU end devices, 4 vCPU edge
devices, a GPU cloud), not Raspberry Pis, and its Table 1 measures every
network on every tier stand-alone (batch 50, no communication). That table is
the hierarchy's calibration, made once and used by every experiment on it
(``zhang2018_calibration``): a stage of ``n`` images of network ``m`` on tier
``t`` takes ``n`` times Table 1's time per image. Table 1's time rows are
therefore fitted, never judged; everything composed from them (Table 2 with
latency, the schemes' completion times, the privacy module's overhead, the
fault-tolerance runs) is a prediction. Three networks on three tiers do not
follow one cost per FLOP (on an end device ResNet-34 does 37 GFLOP/s,
WRN-28-10 9 and MobileNet 1.2, from the report's own times), so a network
the calibration does not hold is refused rather than guessed at: give its
times per image (``TierCalibration.with_times``).

``schedule`` places a job's stages (``edgelab.hierarchy.tiered.SchemeRun.stages``) on
this clock. Each device works through its stages one at a time in task order.
A task's coarse stage starts when its end device is free (every task is at
its end device from the start, as in the report). Its fine stage starts when
the coarse one is done and the upper device is free, and holds that device for
the tier's latency (sending and receiving, as the report counts it and as a
synchronous HTTP request does), the transfer of the task's bytes at the tier's
bandwidth, and the network's time. The job ends with its last stage. Unlike
the report's eq2 and eq3, stages overlap: an upper device starts on the first
task while the end devices work on later ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from edgelab.common.errors import ConfigError
from edgelab.emulation.schemes import Hierarchy, TierTimes
from edgelab.emulation.tiers import HierarchySpec
from edgelab.report.reference import load_reference

# Table 1's rows and columns, by tier and by the networks edgelab builds for them.
_TABLE1_ROWS = {
    "end": "inference_time_end_device",
    "edge": "inference_time_edge_device",
    "cloud": "inference_time_cloud",
}
_TABLE1_COLUMNS = {"mobilenet": "MobileNet", "resnet34": "ResNet", "wrn-28-10": "WRN", "wrn-28-10-flatten": "WRN"}


@dataclass(frozen=True)
class TierCalibration:
    """Seconds per image of each network on each tier, and where the numbers come from."""

    per_image_s: dict[tuple[str, str], float]
    source: str
    fitted_on: tuple[str, ...] = field(default_factory=tuple)

    def stage_s(self, tier: str, network: str, images: int) -> float:
        """Seconds a device of ``tier`` takes to answer ``images`` images with ``network``."""
        key = (tier, network)
        if key not in self.per_image_s:
            known = ", ".join(f"{t}/{n}" for t, n in sorted(self.per_image_s))
            raise ConfigError(
                "network",
                f"{network} on the {tier} tier",
                f"a network this calibration holds ({known}), or its times given with TierCalibration.with_times",
            )
        return self.per_image_s[key] * images

    def with_times(self, network: str, per_image_s: dict[str, float], source: str) -> TierCalibration:
        """The calibration with ``network``'s seconds per image on each tier added (measured on your devices)."""
        for tier, seconds in per_image_s.items():
            if tier not in _TABLE1_ROWS:
                raise ConfigError("tier", tier, f"one of {', '.join(_TABLE1_ROWS)}")
            if not isinstance(seconds, int | float) or isinstance(seconds, bool) or not seconds > 0:
                raise ConfigError(f"per_image_s[{tier!r}]", seconds, "a number of seconds > 0")
        added = {(tier, network): float(s) for tier, s in per_image_s.items()}
        return TierCalibration({**self.per_image_s, **added}, f"{self.source}; {network}: {source}", self.fitted_on)

    def with_given_times(
        self, networks: dict[str, str], per_image_s: dict[str, float] | None, parameter: str = "network_times"
    ) -> TierCalibration:
        """The calibration with a time per image for each tier whose network it does not hold (a user's).

        ``networks`` names each tier's network; ``per_image_s`` gives, by tier,
        the seconds per image of that tier's network measured on your devices.
        A tier whose network the calibration holds takes no time here: the
        report's networks keep its Table 1 times.
        """
        given = dict(per_image_s or {})
        for tier in given:
            if tier not in networks:
                raise ConfigError(parameter, tier, f"tiers among {', '.join(networks)}")
            if (tier, networks[tier]) in self.per_image_s:
                raise ConfigError(
                    f"{parameter}[{tier!r}]",
                    given[tier],
                    f"no time for {networks[tier]}: the calibration holds it (a time is for your own network)",
                )
        missing = [t for t, n in networks.items() if (t, n) not in self.per_image_s and t not in given]
        if missing:
            tier = missing[0]
            raise ConfigError(
                parameter,
                per_image_s,
                f"a time per image for {networks[tier]} on the {tier} tier, in seconds measured on your devices "
                f"(the calibration holds only {', '.join(sorted({n for _, n in self.per_image_s}))})",
            )
        calibration = self
        for network in sorted({networks[t] for t in given}):
            times = {t: given[t] for t in given if networks[t] == network}
            calibration = calibration.with_times(network, times, f"{parameter} as given")
        return calibration


def zhang2018_calibration() -> TierCalibration:
    """Table 1's stand-alone times per image (batch 50), for the networks ``edgelab.models.tiers`` builds."""
    table = load_reference("zhang2018/table1")
    times = {}
    for tier, row in _TABLE1_ROWS.items():
        values = table[table["row"] == row].set_index("column")["value"].astype(float)
        for network, column in _TABLE1_COLUMNS.items():
            times[tier, network] = values[column] / 1e3
    return TierCalibration(
        times,
        "zhang2018/table1: stand-alone inference, batch 50, mean of 200 tasks (ms/image)",
        fitted_on=("zhang2018/table1",),
    )


def schedule(
    stages: pd.DataFrame, spec: HierarchySpec, calibration: TierCalibration, networks: dict[str, str]
) -> tuple[pd.DataFrame, float]:
    """Emulated start and end of every stage of a job, and when the job ends (seconds from its start).

    ``stages`` has a row per stage (task, stage "coarse" or "fine", device,
    tier, images, bytes_in); ``networks`` names each tier's network.
    """
    need = {"task", "stage", "device", "tier", "images", "bytes_in"}
    if not need <= set(stages.columns):
        raise ConfigError("stages", sorted(stages.columns), f"a table with columns {sorted(need)}")
    free: dict[str, float] = {}
    done: dict[int, float] = {}
    rows = []
    for stage in ("coarse", "fine"):
        for row in stages[stages["stage"] == stage].sort_values("task").itertuples():
            tier = spec.tier(row.tier)
            if tier is None:
                raise ConfigError("stages", f"a stage on tier {row.tier}", "stages on the hierarchy's own tiers")
            busy = calibration.stage_s(row.tier, networks[row.tier], int(row.images))
            ready = 0.0
            if stage == "fine":
                busy += tier.latency_s + tier.transfer_s(int(row.bytes_in))
                ready = done[row.task]
            start = max(ready, free.get(row.device, 0.0))
            end = start + busy
            free[row.device] = end
            if stage == "coarse":
                done[row.task] = end
            rows.append({"task": row.task, "stage": stage, "device": row.device, "start_s": start, "end_s": end})
    timeline = pd.DataFrame(rows)
    return timeline, float(timeline["end_s"].max()) if len(timeline) else 0.0


def analytic_hierarchy(
    spec: HierarchySpec, calibration: TierCalibration, networks: dict[str, str], task_size: int
) -> Hierarchy:
    """The report's model of ``spec`` (``edgelab.emulation.schemes``) for tasks of ``task_size`` CIFAR images.

    A tier's per-task time is its network's ``task_size`` images on the
    calibration, plus (above the end) the tier's latency and the transfer of
    the task's images at its bandwidth: the same costs ``schedule`` charges.
    """
    task_bytes = task_size * 32 * 32 * 3

    def times(name: str, upper: bool) -> TierTimes:
        tier = spec.tier(name)
        if tier is None or not tier.devices:
            return TierTimes(0.0, 0.0)
        link = tier.latency_s + tier.transfer_s(task_bytes) if upper else 0.0
        return TierTimes(link, calibration.stage_s(name, networks[name], task_size))

    return Hierarchy(
        spec.count("end"),
        spec.count("edge"),
        spec.count("cloud"),
        times("end", False),
        times("edge", True),
        times("cloud", True),
    )
