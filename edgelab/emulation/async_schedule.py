"""When each device's update reaches the parameter server under asynchronous SGD.

Under MXNet's ``dist_async`` a device pulls the weights, trains one batch,
pushes its update, and the server applies it the moment it arrives, with no
barrier; the device then pulls again. Which weights a device trained from,
and so how stale its update is, depends on when every other update arrived:
on the devices' clocks, not the host's. ``simulate`` plays the run on the
emulated clock (the same link rules as ``edgelab.emulation.timeline``: one shared
server link, full or half duplex, the master's own exchange local), and the
training loop (``edgelab.training.data_parallel``) then applies the updates in that order, so
an asynchronous run is as reproducible as a synchronous one.
``run_schedule`` gives ``simulate`` a run's inputs as the training loop times
them, so a run's schedule can be played again (a straggler added) off-line.

Events at the same instant: an update is applied before a pull that starts
then (the pull sees it), and devices go in index order.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import pandas as pd

from edgelab.emulation.timeline import Topology
from edgelab.models.costs import weight_count

if TYPE_CHECKING:
    from edgelab.emulation.device_model import DeviceModel
    from edgelab.emulation.profiles import DeviceProfile
    from edgelab.models.user import UserModel

_APPLY, _PULL, _PUSH = 0, 1, 2  # tie order at equal times


def simulate(
    compute_s: Sequence[Sequence[float]],
    pull_s: Sequence[float],
    push_s: Sequence[float],
    topology: Topology | None = None,
) -> pd.DataFrame:
    """Play an asynchronous run on the emulated clock.

    Parameters
    ----------
    compute_s
        Per device, the compute seconds of each of its steps, in order.
    pull_s, push_s
        Per device, the link seconds of one pull (weights in) and one push
        (update out), latency included; 0 for a device whose exchange is local.
    topology
        Shared or per-device server link, and duplex (``edgelab.emulation.timeline.Topology``).

    Returns
    -------
    pandas.DataFrame
        One row per update in the order the server applies them: ``update``
        (0, 1, ...), ``device_index``, ``step``, ``pulled_version`` (updates
        applied before the device's pull began), ``staleness`` (updates applied
        between its pull and its own: 0 means none), ``t_pull``, ``t_applied``.

    Examples
    --------
    Two devices, 1 s steps, no network: both pull version 0, device 0's
    update is applied first, device 1's is one update stale.

    >>> simulate([[1.0], [1.0]], [0, 0], [0, 0])[["device_index", "staleness"]].values.tolist()
    [[0, 0], [1, 1]]
    """
    topology = topology or Topology()
    shared = topology.ps_link == "shared"
    send_free = receive_free = 0.0
    version = 0
    events: list[tuple[float, int, int, int]] = []  # (time, kind, device, step)
    pulled: dict[int, tuple[int, float]] = {}
    rows = []

    def request_pull(t: float, device: int, step: int) -> None:
        nonlocal send_free
        start = t
        if shared and pull_s[device] > 0:
            start = max(t, send_free)
            send_free = start + pull_s[device]
        heapq.heappush(events, (start, _PULL, device, step))

    for device, steps in enumerate(compute_s):
        if len(steps):
            request_pull(0.0, device, 0)
    while events:
        t, kind, device, step = heapq.heappop(events)
        if kind == _PULL:
            pulled[device] = (version, t)
            heapq.heappush(events, (t + pull_s[device] + compute_s[device][step], _PUSH, device, step))
        elif kind == _PUSH:
            start = t
            if shared and push_s[device] > 0:
                # Full duplex: updates queue on the receive side; half: behind everything the link sends too.
                free = receive_free if topology.duplex == "full" else max(receive_free, send_free)
                start = max(t, free)
                receive_free = start + push_s[device]
                if topology.duplex == "half":
                    send_free = receive_free
            heapq.heappush(events, (start + push_s[device], _APPLY, device, step))
        else:
            pulled_version, t_pull = pulled[device]
            rows.append(
                {
                    "update": version,
                    "device_index": device,
                    "step": step,
                    "pulled_version": pulled_version,
                    "staleness": version - pulled_version,
                    "t_pull": t_pull,
                    "t_applied": t,
                }
            )
            version += 1
            if step + 1 < len(compute_s[device]):
                request_pull(t, device, step + 1)
    columns = ["update", "device_index", "step", "pulled_version", "staleness", "t_pull", "t_applied"]
    return pd.DataFrame(rows, columns=columns)


def run_schedule(
    model: str | UserModel,
    samples: Sequence[Sequence[int]],
    *,
    device_model: DeviceModel,
    profile: DeviceProfile,
    topology: Topology,
    slowdown: Mapping[int, float] | None = None,
) -> pd.DataFrame:
    """The schedule an asynchronous run of ``model`` runs in (``edgelab.train``; ``simulate`` on its inputs).

    Each step of a device takes the device model's time for its samples, each
    pull and push carries every weight (4 bytes each) over the profile's
    link, and the first device's exchange is local when the server runs on it
    (``topology.master_is_device``).

    Parameters
    ----------
    model
        A built-in model's name or a user's model (``edgelab.models.user.UserModel``).
    samples
        Per device, the samples of each of its steps, in order.
    device_model, profile, topology
        The device's clock, its link, and the server's link and place.
    slowdown
        Device index to a factor its compute takes longer by (a straggler); the others run as timed.

    Returns
    -------
    pandas.DataFrame
        ``simulate``'s rows: one per update, in the order the server applies them.
    """
    slowdown = slowdown or {}
    # x * 1.0 is x exactly: an unslowed device's times are the run's own.
    compute = [
        [float(device_model.compute_s(model, 1, n)) * slowdown.get(i, 1.0) for n in steps]
        for i, steps in enumerate(samples)
    ]
    payload = weight_count(model) * 4
    link = [
        link_seconds(payload, profile.link_bytes_per_s, profile.latency_s, local=i == 0 and topology.master_is_device)
        for i in range(len(samples))
    ]
    return simulate(compute, link, link, topology)


def link_seconds(bytes_: float, rate_bytes_per_s: float, latency_s: float, *, local: bool) -> float:
    """Seconds one transfer takes on a link (0 when it never leaves the board)."""
    return 0.0 if local else latency_s + bytes_ / rate_bytes_per_s
