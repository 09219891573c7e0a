"""Fault injection: kill device workers at chosen points of a run.

A ``KillSchedule`` lists ``Kill(device, phase, at)``: SIGKILL the device's
worker process when the run reaches ``phase`` for the ``at``-th time (a round
for the per-round phases, an epoch for evaluation, 0 for the phases that
happen once). The worker's nanny restarts it, as a board that lost power
reboots; the run has to notice, bring the device back and go on with the
result it would have had. Each kill fires once, even when its step is run
again after a recovery. ``shut_down`` kills a device for good instead (its
nanny told not to restart it), as a device that switches itself off.

The phases are the runtime's (``edgelab.train.PHASES`` for data-parallel
training); a schedule is checked against them, the run's devices and its
number of rounds and epochs before any cluster work.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from edgelab.errors import ClusterError, ConfigError


@dataclass(frozen=True)
class Kill:
    """Kill ``device``'s worker when the run reaches ``phase`` for the ``at``-th time (from 0)."""

    device: str
    phase: str
    at: int = 0


class KillSchedule:
    """Kills to inject into one run.

    Parameters
    ----------
    kills
        ``Kill`` objects or mappings with keys ``device``, ``phase`` and ``at``.
    phases
        Phase name -> how many times the run reaches it (``at`` must be below).
    action
        ``action(client, address)`` does the killing; by default the worker
        process gets SIGKILL and its nanny restarts it (``kill_worker``), as a
        board that lost power reboots. A test can switch a device off for good.
    """

    def __init__(
        self,
        kills: Iterable[Kill | Mapping[str, Any]],
        *,
        phases: Mapping[str, int],
        action: Callable[[Any, str], Any] | None = None,
    ) -> None:
        self.phases = dict(phases)
        self.kills = [self._parse(k) for k in kills]
        self.action = action
        self._fired: set[int] = set()

    def _parse(self, kill: Kill | Mapping[str, Any]) -> Kill:
        if isinstance(kill, Mapping):
            unknown = sorted(set(kill) - {"device", "phase", "at"})
            if unknown or "device" not in kill or "phase" not in kill:
                raise ConfigError("kills", dict(kill), "entries with keys device, phase and (optional) at")
            kill = Kill(str(kill["device"]), str(kill["phase"]), kill.get("at", 0))
        if not isinstance(kill, Kill):
            raise ConfigError("kills", kill, "Kill(device, phase, at) or {'device': ..., 'phase': ..., 'at': ...}")
        if kill.phase not in self.phases:
            raise ConfigError("kills.phase", kill.phase, f"one of {', '.join(self.phases)}")
        count = self.phases[kill.phase]
        if not isinstance(kill.at, int) or isinstance(kill.at, bool) or not 0 <= kill.at < count:
            raise ConfigError("kills.at", kill.at, f"an integer in [0, {count}) for phase {kill.phase!r}")
        return kill

    def check_devices(self, devices: Sequence[str]) -> None:
        """Reject kills of devices the run does not have."""
        for kill in self.kills:
            if kill.device not in devices:
                raise ConfigError("kills.device", kill.device, f"one of the run's devices: {', '.join(devices)}")

    def due(self, phase: str, at: int) -> list[Kill]:
        """Kills to fire now; each fires once."""
        due = [i for i, k in enumerate(self.kills) if k.phase == phase and k.at == at and i not in self._fired]
        self._fired.update(due)
        return [self.kills[i] for i in due]

    def to_list(self) -> list[dict[str, Any]]:
        """JSON-ready form (a run's results are keyed by it)."""
        return [asdict(k) for k in self.kills]

    def __len__(self) -> int:
        return len(self.kills)

    @classmethod
    def seeded(
        cls,
        seed: int,
        n_kills: int,
        *,
        devices: Sequence[str],
        phases: Mapping[str, int],
        runs_on: Mapping[str, str] | None = None,
    ) -> list[KillSchedule]:
        """``n_kills`` one-kill schedules at seeded random points, every phase at least once (when n_kills allows).

        ``runs_on`` names the one device a phase runs on (the evaluation runs on
        the first device): killing another device there would not disturb it.
        """
        rng = np.random.default_rng(seed)
        names = list(phases)
        order = [names[i % len(names)] for i in range(n_kills)]
        rng.shuffle(order)
        runs_on = dict(runs_on or {})
        return [
            cls(
                [
                    Kill(
                        runs_on.get(phase) or str(rng.choice(list(devices))),
                        phase,
                        int(rng.integers(0, phases[phase])),
                    )
                ],
                phases=phases,
            )
            for phase in order
        ]


class LinkFault:
    """A ``KillSchedule`` action that cuts or slows a device's link instead of killing it, for ``duration_s``.

    ``links`` is a running set of shaped hosts (``edgelab.shaped_hosts``): a
    cut takes the device's link down, a slow-down sets its rate to
    ``rate_mbit``; after ``duration_s`` a timer restores it. A cut longer than
    the scheduler's worker TTL loses the device: the scheduler drops it, the
    worker (its heartbeats answered again once the link is back) shuts down,
    its nanny starts it again, and the run recovers as from a kill. A shorter
    cut, or a slow-down, only delays the run.
    """

    def __init__(self, links: Any, kind: str, *, duration_s: float, rate_mbit: float | None = None) -> None:
        if kind not in ("cut", "slow"):
            raise ConfigError("kind", kind, "'cut' or 'slow'")
        if not (isinstance(duration_s, int | float) and duration_s > 0):
            raise ConfigError("duration_s", duration_s, "seconds > 0")
        if kind == "slow" and not (isinstance(rate_mbit, int | float) and rate_mbit > 0):
            raise ConfigError("rate_mbit", rate_mbit, "a link rate in Mbit/s > 0 for a slow-down")
        self.links, self.kind, self.duration_s, self.rate_mbit = links, kind, float(duration_s), rate_mbit
        self.timers: list[threading.Timer] = []

    def __call__(self, client: Any, address: str) -> None:
        """Cut or slow the link of the device at ``address`` now; restore it after ``duration_s``."""
        from edgelab import shaped_hosts

        device = shaped_hosts.device_of(self.links, address)
        if self.kind == "cut":
            shaped_hosts.set_link(self.links, device, up=False)
        else:
            shaped_hosts.set_link(self.links, device, rate_mbit=self.rate_mbit)
        timer = threading.Timer(self.duration_s, shaped_hosts.set_link, (self.links, device))
        timer.daemon = True
        timer.start()
        self.timers.append(timer)

    def wait(self) -> None:
        """Wait until every link this fault touched is restored."""
        for timer in self.timers:
            timer.join()


def kill_worker(client: Any, address: str, *, local: bool) -> int:
    """SIGKILL the worker process at ``address``; return its pid.

    ``local``: the worker runs on this host (an emulated cluster), so the signal
    is sent from here and has landed when this returns. Otherwise the worker
    kills itself (a real device: the only way in).
    """
    pid = int(client.run(os.getpid, workers=[address])[address])
    if local:
        os.kill(pid, signal.SIGKILL)
    else:
        client.run(_kill_self, workers=[address], wait=False)
    return pid


async def _kill_self() -> None:
    # A coroutine: Dask's run(wait=False) takes only those, and replies before the worker dies.
    os.kill(os.getpid(), signal.SIGKILL)


def shut_down(client: Any, address: str, *, local: bool, timeout_s: float = 10.0) -> int:
    """Kill the worker at ``address`` for good; return its pid once it is gone.

    Its nanny is first told not to start it again (Dask's own signal for a
    worker that leaves on purpose), then the process gets SIGKILL: no goodbye
    to the scheduler, its tasks and results lost, as when a device switches
    itself off. Returns when its address refuses connections and the
    scheduler no longer lists it.
    """
    from edgelab.cluster import scheduler_workers

    client.run(_no_restart, workers=[address], nanny=True)
    pid = kill_worker(client, address, local=local)
    deadline = time.monotonic() + timeout_s
    while reachable(address, timeout_s=0.2) or address in scheduler_workers(client):
        if time.monotonic() > deadline:
            raise ClusterError(f"the worker at {address} (pid {pid}) was killed but is still there after {timeout_s} s")
        time.sleep(0.01)
    return pid


def reachable(address: str, *, timeout_s: float) -> bool:
    """Whether a TCP connection to a worker's ``address`` (``tcp://host:port``) opens within ``timeout_s``.

    What any transfer to a device first does. On loopback a dead worker's port
    refuses at once; across a network a switched-off device answers nothing
    and the attempt waits out ``timeout_s``.
    """
    from distributed.comm.addressing import get_address_host_port

    host, port = get_address_host_port(address)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _no_restart(dask_worker: Any) -> None:
    """On a worker's nanny: do not start the worker again when its process ends."""
    dask_worker.close_gracefully(reason="the device shuts down for good")
