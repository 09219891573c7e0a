"""Fault injection: kill device workers, or cut, slow and restore their links, at chosen points of a run.

A ``KillSchedule`` is a scenario: a list of ``Kill(device, phase, at,
action)`` steps, each done when the run reaches ``phase`` for the ``at``-th
time (a round for the per-round phases, an epoch for evaluation, 0 for the
phases that happen once). The default action SIGKILLs the device's worker
process; its nanny restarts it, as a board that lost power reboots, and the
run has to notice, bring the device back and go on with the result it would
have had. On shaped hosts (``edgelab.cluster.shaped_hosts``, given as ``links``) a
step can instead ``"cut"`` the device's link, ``"slow"`` it to ``rate_mbit``,
or ``"restore"`` it. Each step fires once, even when its step of the run is
done again after a recovery. ``shut_down`` kills a device for good instead
(its nanny told not to restart it), as a device that switches itself off.

The phases are the runtime's (``edgelab.training.data_parallel.PHASES`` for data-parallel
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

from edgelab.common import checks
from edgelab.common.errors import ClusterError, ConfigError

ACTIONS = ("kill", "cut", "slow", "restore")
LINK_ACTIONS = ("cut", "slow", "restore")


@dataclass(frozen=True)
class Kill:
    """When the run reaches ``phase`` for the ``at``-th time (from 0), do ``action`` to ``device``.

    ``action``: ``"kill"`` its worker (the default), or on shaped hosts
    ``"cut"`` its link, ``"slow"`` it to ``rate_mbit``, ``"restore"`` it (up,
    at its normal rate). ``for_s`` restores a cut or slowed link after that
    many seconds. A cut needs it: a synchronous round cannot reach a later
    step while one of its devices is unreachable, so only time can end a cut;
    a slow-down can also end at a later ``"restore"`` step.
    """

    device: str
    phase: str
    at: int = 0
    action: str = "kill"
    rate_mbit: float | None = None
    for_s: float | None = None


class KillSchedule:
    """Kills to inject into one run.

    Parameters
    ----------
    kills
        ``Kill`` objects or mappings with keys ``device``, ``phase`` and ``at``.
    phases
        Phase name -> how many times the run reaches it (``at`` must be below).
    action
        ``action(client, address)`` does a ``"kill"`` step; by default the
        worker process gets SIGKILL and its nanny restarts it
        (``kill_worker``), as a board that lost power reboots. A test can
        switch a device off for good.
    links
        The running shaped hosts (``edgelab.cluster.shaped_hosts.ShapedHosts``) whose
        links the ``"cut"``, ``"slow"`` and ``"restore"`` steps change.
    """

    def __init__(
        self,
        kills: Iterable[Kill | Mapping[str, Any]],
        *,
        phases: Mapping[str, int],
        action: Callable[[Any, str], Any] | None = None,
        links: Any = None,
    ) -> None:
        self.phases = dict(phases)
        self.links = links
        self.kills = [self._parse(k) for k in kills]
        self.action = action
        self._fired: set[int] = set()
        self._timers: list[threading.Timer] = []

    def _parse(self, kill: Kill | Mapping[str, Any]) -> Kill:
        if isinstance(kill, Mapping):
            unknown = sorted(set(kill) - {"device", "phase", "at", "action", "rate_mbit", "for_s"})
            if unknown or "device" not in kill or "phase" not in kill:
                raise ConfigError(
                    "kills", dict(kill), "entries with keys device, phase and (optional) at, action, rate_mbit, for_s"
                )
            kill = Kill(
                str(kill["device"]),
                str(kill["phase"]),
                kill.get("at", 0),
                kill.get("action", "kill"),
                kill.get("rate_mbit"),
                kill.get("for_s"),
            )
        if not isinstance(kill, Kill):
            raise ConfigError("kills", kill, "Kill(device, phase, at) or {'device': ..., 'phase': ..., 'at': ...}")
        if kill.action not in ACTIONS:
            raise ConfigError("kills.action", kill.action, f"one of {', '.join(ACTIONS)}")
        if kill.action in LINK_ACTIONS and self.links is None:
            raise ConfigError(
                "kills.action", kill.action, "'kill' (a link step needs shaped hosts: KillSchedule(..., links=hosts))"
            )
        slow = kill.action == "slow"
        if slow and not (isinstance(kill.rate_mbit, int | float) and kill.rate_mbit > 0):
            raise ConfigError("kills.rate_mbit", kill.rate_mbit, "a link rate in Mbit/s > 0 for a 'slow' step")
        if not slow and kill.rate_mbit is not None:
            raise ConfigError(
                "kills.rate_mbit", kill.rate_mbit, f"None for a {kill.action!r} step (only 'slow' has one)"
            )
        timed = kill.for_s is not None
        if timed and (
            kill.action not in ("cut", "slow") or not (isinstance(kill.for_s, int | float) and kill.for_s > 0)
        ):
            raise ConfigError("kills.for_s", kill.for_s, "seconds > 0, on a 'cut' or 'slow' step only")
        if kill.action == "cut" and not timed:
            raise ConfigError(
                "kills.for_s", None, "seconds > 0 for a 'cut' (a synchronous round cannot reach a later restore step)"
            )
        if kill.phase not in self.phases:
            raise ConfigError("kills.phase", kill.phase, f"one of {', '.join(self.phases)}")
        count = self.phases[kill.phase]
        checks.integer("kills.at", kill.at, at_most=count - 1)  # an index of the phase's points
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
        """JSON-ready form (a run's results are keyed by it); a plain kill keeps its three keys."""
        defaults = {"action": "kill", "rate_mbit": None, "for_s": None}
        return [{k: v for k, v in asdict(kill).items() if defaults.get(k, ...) != v} for kill in self.kills]

    def fire(self, kill: Kill, client: Any, address: str, *, local: bool) -> str:
        """Do ``kill``'s step to the device at ``address``; return what was done (``kill``, ``cut`` ...)."""
        if kill.action == "kill":
            if self.action is not None:
                self.action(client, address)
                return "kill"
            kill_worker(client, address, local=local)
            return "kill"
        from edgelab.cluster import shaped_hosts

        device = shaped_hosts.device_of(self.links, address)
        if kill.action == "cut":
            shaped_hosts.set_link(self.links, device, up=False)
        else:  # slow, or restore: up at the step's rate or the normal one
            shaped_hosts.set_link(self.links, device, rate_mbit=kill.rate_mbit)
        if kill.for_s is not None:
            timer = threading.Timer(kill.for_s, shaped_hosts.set_link, (self.links, device))
            timer.daemon = True
            timer.start()
            self._timers.append(timer)
        return kill.action

    def wait_restored(self) -> None:
        """Wait until every link a timed step changed is restored."""
        for timer in self._timers:
            timer.join()

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
    from edgelab.cluster.device_cluster import scheduler_workers

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
