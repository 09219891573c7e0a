"""Gossip averaging: every device keeps its own weights and averages them with its neighbours'; no global model.

``strategy="gossip"`` (``edgelab.training.data_parallel``, on the device-held path,
``transport="allreduce"``) trains each round on each device's OWN weights;
each device then sends its new weights to its neighbours in
``TrainConfig.gossip_topology`` (``"ring"``, or ``"random:<degree>"`` drawn
with the run's seed, by ``edgelab.sync.topology.neighbours``) and replaces its
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

from edgelab.common.errors import WorkerLostError
from edgelab.peer.allreduce import Ring, state_at
from edgelab.runtime.protocol import StateMissingError
from edgelab.sync.aggregate import weighted_mean

if TYPE_CHECKING:
    from edgelab.runtime.fleet import Fleet
    from edgelab.sync.parameter_server import ParameterServerSync


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
        calls = self.fleet.direct_all({d: (state_at, self.run_id, rnd) for d in survivors})
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
