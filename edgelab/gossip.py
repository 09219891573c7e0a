"""Gossip averaging: every device keeps its own weights and averages them with its neighbours'; no global model.

``strategy="gossip"`` (``edgelab.train``, on the device-held path,
``transport="allreduce"``) trains each round on each device's OWN weights;
each device then sends its new weights to its neighbours in
``TrainConfig.gossip_topology`` (``"ring"``, or ``"random:<degree>"`` drawn
with the run's seed, by ``edgelab.collectives.neighbours``) and replaces its
weights by their Metropolis-Hastings average with its neighbours'
(``w_ij = 1 / (1 + max(deg_i, deg_j))``, the rest on itself): symmetric, rows
summing to one, so the devices' mean moves by the mean of their updates each
round, and on a regular graph it is the uniform average of the device and its
neighbours. On a complete graph (a ring of two or three devices) every device
averages the same vectors in the same order: they agree bit for bit after each
round, and with equal samples per device follow the parameter server's
synchronous SGD to float rounding. Each device sends ``degree`` copies of its
serialized weights a round and receives as many.

The client evaluates the consensus model, the uniform mean of every device's
weights (fetched from each device); ``TrainRun.weights`` is that mean, and each
evaluation records ``consensus_spread``, the largest distance of a device's
weight from it. A device lost mid-run has lost its own weights: the cut round
is run again from each survivor's state at its start and the lost device's
mean of its surviving neighbours' (of all survivors, if none of its neighbours
survived) - on a complete graph exactly what it held, elsewhere an
approximation, and the run then differs from an undisturbed one.

Paper: Boyd et al. 2006, "Randomized gossip algorithms" (Metropolis-Hastings weights, section 5).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from edgelab.allreduce import PeerState, Ring
from edgelab.common.errors import ConfigError, WorkerLostError
from edgelab.peer_messages import exchange
from edgelab.runtime import StateMissingError
from edgelab.sync.aggregate import weighted_mean

if TYPE_CHECKING:
    from edgelab.fleet import Fleet
    from edgelab.runtime import DeviceRuntime
    from edgelab.sync.parameter_server import ParameterServerSync

TOPOLOGY_ALLOWED = "'ring' or 'random:<degree>' (an integer degree >= 1, drawn with the run's seed)"


def build_topology(spec: str, n: int, seed: int) -> list[list[int]]:
    """Each device's neighbours in the gossip topology ``spec`` over ``n`` devices.

    Raises
    ------
    ConfigError
        ``gossip_topology`` unknown, or leaving a device unconnected.

    Examples
    --------
    >>> build_topology("ring", 4, 0)
    [[1, 3], [0, 2], [1, 3], [0, 2]]
    """
    from edgelab.collectives import neighbours

    kind, _, degree = spec.partition(":") if isinstance(spec, str) else ("", "", "")
    if not (spec == "ring" or (kind == "random" and degree.isdigit() and int(degree) >= 1)):
        raise ConfigError("gossip_topology", spec, TOPOLOGY_ALLOWED)
    if n == 1:
        return [[]]  # a lone device has no one to average with
    try:
        adjacency = neighbours(kind, n, degree=int(degree or 2), seed=seed)
    except ConfigError as refused:
        raise ConfigError("gossip_topology", spec, f"{refused.allowed} with n_devices={n}, seed={seed}") from None
    return [[j for j in row if j != i] for i, row in enumerate(adjacency)]


def metropolis_row(adjacency: list[list[int]], i: int) -> dict[int, float]:
    """Device ``i``'s mixing weights over itself and its neighbours (Metropolis-Hastings), by device index.

    Examples
    --------
    >>> metropolis_row([[1], [0, 2], [1]], 0)
    {0: 0.6666666666666667, 1: 0.3333333333333333}
    """
    own = 1.0 / (1 + len(adjacency[i]))
    row = {j: 1.0 / (1 + max(len(adjacency[i]), len(adjacency[j]))) for j in adjacency[i]}
    # 1 - sum(row), written so that on a regular graph it is exactly the neighbours' weight
    row[i] = own + sum(own - w for w in row.values())
    return dict(sorted(row.items()))


def mix(row: dict[int, float], vectors: dict[int, np.ndarray]) -> np.ndarray:
    """``sum_k row[k] * vectors[k]``, accumulated in float64 in device order (devices averaging alike agree)."""
    total = sum(w * vectors[k].astype(np.float64) for k, w in sorted(row.items()))
    return np.asarray(total).astype(vectors[min(row)].dtype)


def average(rt: DeviceRuntime, run_id: str, state: PeerState, rnd: int, mine: np.ndarray) -> np.ndarray:
    """Send ``mine`` (this device's weights after its round) to its neighbours; their Metropolis average."""
    near = state.topology[state.index]
    got = exchange(rt, run_id, state, rnd, "gossip", dict.fromkeys(near, (0, mine)), sources=near)
    return mix(metropolis_row(state.topology, state.index), {**{j: got[j][1] for j in near}, state.index: mine})


class GossipRing(Ring):
    """The client's side of a gossip run: it installs each device's own weights and reads the consensus."""

    def __init__(
        self,
        fleet: Fleet,
        run_id: str,
        devices: list[str],
        weights: list[np.ndarray],
        strategy: ParameterServerSync,
        *,
        topology: list[list[int]],
    ) -> None:
        super().__init__(fleet, run_id, devices, weights, strategy, mode="gossip")
        self.topology = topology
        # Each device's weights at the start of round `held` (None: not held).
        self.states: list[list[np.ndarray]] | None = [weights] * len(devices)
        self.spread = 0.0  # the largest distance of a device's weight from the consensus last read

    def round(self, tasks: dict, rnd: int) -> list[dict]:  # type: ignore[type-arg]
        """As ``Ring.round``; afterwards the devices' weights are only on the devices."""
        records = super().round(tasks, rnd)
        self.states = None
        return records

    def weights_at(self, rnd: int) -> list[np.ndarray]:
        """The consensus model at the start of round ``rnd``: the uniform mean of every device's weights."""
        states = self._states(rnd)
        mean = weighted_mean(states, [1.0] * len(states))
        self.spread = max(float(np.abs(w - m).max(initial=0.0)) for s in states for w, m in zip(s, mean, strict=True))
        return mean

    def _install_states(self, rnd: int) -> list[tuple[list[np.ndarray], np.ndarray | None]]:
        return [(weights, None) for weights in self._states(rnd)]

    def _states(self, rnd: int) -> list[list[np.ndarray]]:
        if self.states is None or self.held != rnd:
            self.states, self.held = self._fetch(rnd), rnd
        return self.states

    def _fetch(self, rnd: int) -> list[list[np.ndarray]]:
        """Every device's weights at round ``rnd``; a lost device's, its surviving neighbours' mean."""
        survivors = [d for d in self.devices if self.installed.get(d) == self.fleet.addresses[d]]
        calls = self.fleet.direct_all({d: ("allreduce_state", self.run_id, rnd) for d in survivors})
        self.fleet.wait(calls)
        held: dict[int, list[np.ndarray]] = {}
        for device, call in calls.items():
            try:
                held[self.devices.index(device)] = list(call.result()[0])
            except StateMissingError:
                continue  # restarted at its old address: its weights are gone too
        if not held:
            raise WorkerLostError(
                f"every device of gossip run {self.run_id} was lost at once ({', '.join(self.devices)}): its "
                "weights lived only on them; run again"
            )
        assert self.topology is not None
        alive = dict(held)
        for i in range(len(self.devices)):
            if i not in alive:
                near = [alive[j] for j in self.topology[i] if j in alive] or list(alive.values())
                held[i] = weighted_mean(near, [1.0] * len(near))
        return [held[i] for i in range(len(self.devices))]
