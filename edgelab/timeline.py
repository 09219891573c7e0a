"""Emulated device time, composed from measured task records.

Each task record carries the CPU seconds its worker process spent computing
(all threads: TensorFlow computes in its own threads, which thread time would
miss; unlike wall time, CPU time does not stretch when ten workers share two
host cores) and the bytes it really moved. On the emulated device that task
takes

    compute = cpu_s * speed_factor
    pull    = latency + bytes_received / link rate
    push    = latency + bytes_sent / link rate

A synchronous round then waits for its slowest device. Where the transfers go
depends on the topology:

* ``ps_link="shared"``: one parameter server behind one link of the same rate
  (the paper's master on 100 Mbit/s Ethernet). Every pull, then every push,
  crosses that one link in turn, so transfer time grows with the device count.
* ``ps_link="per_device"``: the server's link is never the bottleneck; each
  device waits only for its own link.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from edgelab.devices import DeviceProfile
from edgelab.errors import ConfigError

PS_LINKS = ("shared", "per_device")


def round_time(
    compute_s: np.ndarray,
    pull_bytes: np.ndarray,
    push_bytes: np.ndarray,
    *,
    link_bytes_per_s: float,
    latency_s: float,
    ps_link: str,
) -> tuple[float, np.ndarray]:
    """Duration of one synchronous round, and when each device finished its compute.

    Parameters
    ----------
    compute_s, pull_bytes, push_bytes
        One entry per device, in device order.
    link_bytes_per_s, latency_s
        The link every device (and the server) sits behind.
    ps_link
        ``"shared"`` or ``"per_device"`` (see module docstring).

    Examples
    --------
    Two devices, 1 s of compute each, 1 byte each way over a 1 B/s shared link:
    the pulls end at 1 s and 2 s, so the devices are ready at 2 s and 3 s, and
    their pushes hold the link from 2 to 3 s and from 3 to 4 s.

    >>> t, _ = round_time(np.array([1.0, 1.0]), np.array([1, 1]), np.array([1, 1]),
    ...                   link_bytes_per_s=1.0, latency_s=0.0, ps_link="shared")
    >>> t
    4.0
    """
    if ps_link not in PS_LINKS:
        raise ConfigError("ps_link", ps_link, f"one of {', '.join(PS_LINKS)}")
    pull = latency_s + pull_bytes / link_bytes_per_s
    push = latency_s + push_bytes / link_bytes_per_s
    if ps_link == "per_device":
        ready = pull + compute_s
        return float(np.max(ready + push)), ready
    # The server sends weights one device after another over its single link,
    # then receives updates first come, first served over the same link.
    ready = np.cumsum(pull) + compute_s
    link_free = float(np.sum(pull))
    for i in np.argsort(ready, kind="stable"):
        link_free = max(link_free, float(ready[i])) + float(push[i])
    return link_free, ready


def compose(
    records: pd.DataFrame,
    profile: DeviceProfile,
    *,
    speed_factor: float,
    ps_link: str = "shared",
) -> pd.DataFrame:
    """Emulated duration of every synchronous round of a run.

    Parameters
    ----------
    records
        One row per (round, device) with ``round, device_index, cpu_s,
        bytes_received, bytes_sent``.
    profile
        The emulated device (link rate and latency).
    speed_factor
        Device seconds per host CPU second (``edgelab.devices.calibrate``).
    ps_link
        Topology of the parameter server's link.

    Returns
    -------
    pandas.DataFrame
        Per round: ``round, epoch, round_s, compute_max_s, compute_mean_s,
        comm_s, elapsed_s`` (cumulative).
    """
    if not speed_factor > 0:
        raise ConfigError("speed_factor", speed_factor, "a number > 0")
    rows = []
    for rnd, group in records.sort_values(["round", "device_index"]).groupby("round", sort=True):
        compute = group["cpu_s"].to_numpy(dtype=float) * speed_factor
        duration, _ = round_time(
            compute,
            group["bytes_received"].to_numpy(dtype=float),
            group["bytes_sent"].to_numpy(dtype=float),
            link_bytes_per_s=profile.link_bytes_per_s,
            latency_s=profile.latency_s,
            ps_link=ps_link,
        )
        rows.append(
            {
                "round": rnd,
                "epoch": int(group["epoch"].iloc[0]),
                "round_s": duration,
                "compute_max_s": float(compute.max()),
                "compute_mean_s": float(compute.mean()),
                "comm_s": duration - float(compute.max()),
            }
        )
    out = pd.DataFrame(rows)
    out["elapsed_s"] = out["round_s"].cumsum()
    return out


def device_busy(records: pd.DataFrame, *, speed_factor: float) -> pd.Series:
    """Emulated compute seconds per device over the whole run."""
    return (records.groupby("device")["cpu_s"].sum() * speed_factor).rename("busy_s")


def emulated_cpu_percent(records: pd.DataFrame, elapsed_s: float, *, speed_factor: float, cores: int) -> pd.Series:
    """Per-device CPU utilisation on the emulated device, as % of all its cores.

    A device's worker computes on one core (one TensorFlow thread), so a device
    that never waits shows ``100 / cores`` percent; waiting for the slowest
    device and for the server's link lowers it.
    """
    return (100.0 * device_busy(records, speed_factor=speed_factor) / (cores * elapsed_s)).rename("cpu_pct")


def solve_speed_factor(
    elapsed_for: Callable[[float], float], target_s: float, *, low: float = 1e-3, high: float = 1e4
) -> float | None:
    """Speed factor at which ``elapsed_for(factor)`` equals ``target_s`` (bisection).

    Used to calibrate on one paper cell. Emulated time grows monotonically with
    the factor, so bisection finds it; ``None`` when even a near-zero compute
    time already exceeds the target (communication alone is too slow), or the
    target is beyond ``high``.

    Examples
    --------
    >>> round(solve_speed_factor(lambda f: 2.0 * f + 10.0, 30.0), 6)
    10.0
    """
    if elapsed_for(low) > target_s or elapsed_for(high) < target_s:
        return None
    for _ in range(100):
        mid = (low * high) ** 0.5
        if elapsed_for(mid) < target_s:
            low = mid
        else:
            high = mid
        if high / low < 1 + 1e-9:
            break
    return (low * high) ** 0.5
