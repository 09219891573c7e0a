"""Asynchronous SGD through a parameter server (MXNet KVStore ``dist_async``).

Each device pulls the weights, trains one batch, pushes its update, and the
server applies that update alone, as it arrives, with no barrier; the device
then pulls again and goes on. An update may have been computed from weights
that other devices' updates have since moved: its *staleness* is the number of
updates applied between its pull and its own (``edgelab.emulation.async_schedule``
decides the order on the emulated clock; ``edgelab.training.data_parallel`` records it).

The server's arithmetic is the synchronous server's with one update at a time
(``ParameterServerSync.aggregate``), so with one device asynchronous SGD is
plain SGD, bit for bit; with N devices each update moves the weights by a full
step, where the synchronous server moves them by the mean of N.

Paper: Park et al. 2020, Figure 3 ("asynchronous method", MXNet 0.9.5 KVStore).
"""

from __future__ import annotations

from edgelab.sync.base import DeviceUpdate, NDArrays
from edgelab.sync.parameter_server import ParameterServerSync


class ParameterServerAsync(ParameterServerSync):
    """Apply each device's update the moment it arrives (server momentum kept across updates)."""

    asynchronous = True

    def __init__(self, *, server_learning_rate: float = 1.0, momentum: float = 0.0) -> None:
        super().__init__(sync_every="batch", server_learning_rate=server_learning_rate, momentum=momentum)

    def apply(self, weights: NDArrays, update: DeviceUpdate) -> NDArrays:
        """The weights after ``update`` alone (unchanged if it trained on nothing)."""
        return self.aggregate(weights, [update]) or weights
