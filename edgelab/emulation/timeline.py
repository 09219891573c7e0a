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
is the ``Topology``:

* ``master_is_device``: the parameter server runs on the first training device
  (the paper's ten boards serve N = 1..10 devices, so the master must be one of
  them). That device's own pull and push stay on the board and cost no link
  time, so N = 1 pays for no network; every other device's traffic crosses the
  first device's link. Otherwise the server is a machine of its own and every
  device's traffic crosses the server's link.
* ``ps_link="shared"``: the server's one link (the paper's 100 Mbit/s Ethernet)
  carries every transfer in turn, so transfer time grows with the device count.
  ``ps_link="per_device"``: the server's link is never the bottleneck; each
  device waits only for its own link.
* ``duplex="full"``: switched Ethernet sends and receives at once, so the
  server's pulls (out) and the devices' pushes (in) queue separately.
  ``duplex="half"``: one queue for both directions; every push waits until the
  server has sent the last pull.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from edgelab.common.errors import ConfigError
from edgelab.emulation.profiles import DeviceProfile

PS_LINKS = ("shared", "per_device")
DUPLEX = ("full", "half")


@dataclass(frozen=True)
class Topology:
    """Where the parameter server sits and how its link carries a round's traffic.

    Parameters
    ----------
    ps_link
        ``"shared"`` or ``"per_device"`` (see module docstring).
    duplex
        ``"full"`` (switched Ethernet, the default) or ``"half"``.
    master_is_device
        The server runs on the first training device (its own exchange is local).
    """

    ps_link: str = "shared"
    duplex: str = "full"
    master_is_device: bool = True

    def __post_init__(self) -> None:
        if self.ps_link not in PS_LINKS:
            raise ConfigError("ps_link", self.ps_link, f"one of {', '.join(PS_LINKS)}")
        if self.duplex not in DUPLEX:
            raise ConfigError("duplex", self.duplex, f"one of {', '.join(DUPLEX)}")
        if not isinstance(self.master_is_device, bool):
            raise ConfigError("master_is_device", self.master_is_device, "True or False")

    def describe(self) -> str:
        """One line for reports."""
        where = (
            "on the first training device (its own exchange is local; N=1 moves nothing over the network)"
            if self.master_is_device
            else "on a machine of its own (every device's exchange crosses the network, N=1 too)"
        )
        link = "one shared link" if self.ps_link == "shared" else "a link that is never the bottleneck"
        return f"parameter server {where}, behind {link}, {self.duplex}-duplex"


def round_time(
    compute_s: np.ndarray,
    pull_bytes: np.ndarray,
    push_bytes: np.ndarray,
    *,
    link_bytes_per_s: float,
    latency_s: float,
    topology: Topology,
) -> tuple[float, np.ndarray]:
    """Duration of one synchronous round, and when each device finished its compute.

    Parameters
    ----------
    compute_s, pull_bytes, push_bytes
        One entry per device, in device order (the first is the master when
        ``topology.master_is_device``).
    link_bytes_per_s, latency_s
        The link every device (and the server) sits behind.
    topology
        Where the server is and how its link carries traffic.

    Examples
    --------
    Two devices, 1 s of compute each, 1 byte each way over a 1 B/s shared link
    to a separate server. Pulls end at 1 s and 2 s, so the devices are ready at
    2 s and 3 s. Full duplex: their pushes take 2-3 s and 3-4 s. Half duplex:
    the same here, because the link stopped sending at 2 s.

    >>> t, _ = round_time(np.array([1.0, 1.0]), np.array([1, 1]), np.array([1, 1]),
    ...                   link_bytes_per_s=1.0, latency_s=0.0, topology=Topology(master_is_device=False))
    >>> t
    4.0
    """
    local = np.zeros(len(compute_s), dtype=bool)
    if topology.master_is_device and len(local):
        local[0] = True
    pull = np.where(local, 0.0, latency_s + pull_bytes / link_bytes_per_s)
    push = np.where(local, 0.0, latency_s + push_bytes / link_bytes_per_s)
    if topology.ps_link == "per_device":
        ready = pull + compute_s
        return float(np.max(ready + push)), ready
    # The server sends weights one device after another over its single link ...
    ready = np.cumsum(pull) + compute_s
    # ... and receives updates first come, first served: on the receive side of
    # the link (full duplex), or on the same side once the sending is done (half).
    receive_free = 0.0 if topology.duplex == "full" else float(np.sum(pull))
    for i in np.argsort(ready, kind="stable"):
        if not local[i]:
            receive_free = max(receive_free, float(ready[i])) + float(push[i])
    return max(receive_free, float(np.max(ready))), ready


@dataclass(frozen=True)
class RoundGrid:
    """A run's task records as (rounds, devices) arrays: the table work of ``compose``, done once per run.

    A calibration composes the same run for dozens of speed factors; pivoting
    its records each time took most of each composition (LeNet's smoke summary:
    29.5 s, 5.8 s with the grid made once). A record repeated for a (round,
    device) counts once, its first.
    """

    rounds: np.ndarray  # round numbers, ascending
    epochs: np.ndarray  # each round's epoch
    device_index: np.ndarray  # the grid's columns, ascending
    cells: tuple[np.ndarray, np.ndarray]  # (row, column) of each counted record
    counted: np.ndarray  # positions of the counted records in the records' order
    cpu_s: np.ndarray  # (rounds, devices) host CPU seconds; NaN where a device sat the round out
    bytes_received: np.ndarray  # (rounds, devices), 0 where absent
    bytes_sent: np.ndarray

    @classmethod
    def of(cls, records: pd.DataFrame) -> RoundGrid:
        """The grid of ``records`` (one row per round and device: ``round, epoch, device_index, cpu_s, bytes_*``)."""
        rounds, row_of = np.unique(records["round"].to_numpy(), return_inverse=True)
        devices, col_of = np.unique(records["device_index"].to_numpy(), return_inverse=True)
        _, counted = np.unique(row_of * len(devices) + col_of, return_index=True)  # first record of each cell
        cells = (row_of[counted], col_of[counted])
        _, first_of_round = np.unique(row_of, return_index=True)

        def grid(column: str, empty: float) -> np.ndarray:
            out = np.full((len(rounds), len(devices)), empty)
            out[cells] = records[column].to_numpy(dtype=float)[counted]
            return out

        return cls(
            rounds=rounds,
            epochs=records["epoch"].to_numpy()[first_of_round],
            device_index=devices,
            cells=cells,
            counted=counted,
            cpu_s=grid("cpu_s", np.nan),
            bytes_received=np.nan_to_num(grid("bytes_received", 0.0)),
            bytes_sent=np.nan_to_num(grid("bytes_sent", 0.0)),
        )


def compose(
    records: pd.DataFrame | RoundGrid,
    profile: DeviceProfile,
    *,
    speed_factor: float = 1.0,
    topology: Topology | None = None,
    compute_s: np.ndarray | None = None,
) -> pd.DataFrame:
    """Emulated duration of every synchronous round of a run.

    The same arithmetic as ``round_time``, for all rounds at once (a run of the
    paper's size has ~1,000 rounds, and a calibration composes it many times).

    Parameters
    ----------
    records
        One row per (round, device) with ``round, epoch, device_index, cpu_s,
        bytes_received, bytes_sent``, or their ``RoundGrid`` (made once for many compositions).
    profile
        The emulated device (link rate and latency).
    speed_factor
        Device seconds per host CPU second (``edgelab.emulation.profiles.calibrate``).
    topology
        Where the server is and how its link carries traffic (default ``Topology()``).
    compute_s
        Device compute seconds of each record, in the records' order (e.g.
        from ``edgelab.emulation.device_model``); replaces ``cpu_s * speed_factor``.

    Returns
    -------
    pandas.DataFrame
        Per round: ``round, epoch, round_s, compute_max_s, compute_mean_s,
        comm_s, elapsed_s`` (cumulative).
    """
    if not speed_factor > 0:
        raise ConfigError("speed_factor", speed_factor, "a number > 0")
    topology = topology or Topology()
    grid = records if isinstance(records, RoundGrid) else RoundGrid.of(records)
    if compute_s is None:
        device_s = grid.cpu_s * speed_factor
    else:
        device_s = np.full(grid.cpu_s.shape, np.nan)
        device_s[grid.cells] = np.asarray(compute_s, dtype=float)[grid.counted]
    # (rounds, devices) arrays in device order; a device that sat a round out is absent from it.
    present = ~np.isnan(device_s)
    compute = np.where(present, device_s, 0.0)
    local = np.zeros_like(present)
    if topology.master_is_device and len(grid.device_index) and grid.device_index[0] == 0:
        local[:, 0] = present[:, 0]  # the master's own exchange stays local in the rounds it trains
    remote = present & ~local
    rate, latency = profile.link_bytes_per_s, profile.latency_s
    pull = np.where(remote, latency + grid.bytes_received / rate, 0.0)
    push = np.where(remote, latency + grid.bytes_sent / rate, 0.0)
    if topology.ps_link == "per_device":
        ready = pull + compute
        duration = np.where(present, ready + push, -np.inf).max(axis=1)
    else:
        ready = np.cumsum(pull, axis=1) + compute
        order = np.argsort(np.where(present, ready, np.inf), axis=1, kind="stable")
        ready_sorted, push_sorted = np.take_along_axis(ready, order, 1), np.take_along_axis(push, order, 1)
        remote_sorted = np.take_along_axis(remote, order, 1)
        receive_free = np.zeros(len(ready)) if topology.duplex == "full" else pull.sum(axis=1)
        for k in range(ready.shape[1]):
            queued = np.maximum(receive_free, ready_sorted[:, k]) + push_sorted[:, k]
            receive_free = np.where(remote_sorted[:, k], queued, receive_free)
        duration = np.maximum(receive_free, np.where(present, ready, -np.inf).max(axis=1))
    compute_max = np.where(present, compute, -np.inf).max(axis=1)
    out = pd.DataFrame(
        {
            "round": grid.rounds,
            "epoch": grid.epochs.astype(int),
            "round_s": duration,
            "compute_max_s": compute_max,
            "compute_mean_s": compute.sum(axis=1) / present.sum(axis=1),
            "comm_s": duration - compute_max,
        }
    )
    out["elapsed_s"] = out["round_s"].cumsum()
    return out


def wire_bytes(records: pd.DataFrame, topology: Topology | None = None) -> pd.DataFrame:
    """Bytes each device's own link carries over the run, by direction.

    A device sends its updates and receives the weights. When the master is the
    first device, that device's own exchange never leaves the board, but its
    link carries the server's side of everyone else's: it sends the weights
    the others pull and receives the updates they push.

    Returns
    -------
    pandas.DataFrame
        Indexed by device: ``sent, received`` (bytes).
    """
    topology = topology or Topology()
    per_device = records.groupby("device").agg(
        device_index=("device_index", "first"), sent=("bytes_sent", "sum"), received=("bytes_received", "sum")
    )
    if not topology.master_is_device:
        return per_device[["sent", "received"]].astype(float)
    master = per_device["device_index"] == 0
    others = per_device[~master]
    out = per_device[["sent", "received"]].astype(float)
    out.loc[master, "sent"] = float(others["received"].sum())
    out.loc[master, "received"] = float(others["sent"].sum())
    return out


def device_busy(records: pd.DataFrame, *, speed_factor: float = 1.0, compute_s: np.ndarray | None = None) -> pd.Series:
    """Emulated compute seconds per device over the whole run (``compute_s`` as in ``compose``)."""
    busy = records["cpu_s"].to_numpy(dtype=float) * speed_factor if compute_s is None else compute_s
    return (
        pd.Series(np.asarray(busy, dtype=float), index=records["device"].to_numpy())
        .groupby(level=0)
        .sum()
        .rename("busy_s")
    )


def emulated_cpu_percent(
    records: pd.DataFrame,
    elapsed_s: float,
    *,
    speed_factor: float = 1.0,
    cores: int,
    compute_s: np.ndarray | None = None,
) -> pd.Series:
    """Per-device CPU utilisation on the emulated device, as % of all its cores.

    A device's worker computes on one core (one TensorFlow thread), so a device
    that never waits shows ``100 / cores`` percent; waiting for the slowest
    device and for the server's link lowers it.
    """
    busy = device_busy(records, speed_factor=speed_factor, compute_s=compute_s)
    return (100.0 * busy / (cores * elapsed_s)).rename("cpu_pct")


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
