"""Synchronization strategies behind one small interface."""

from __future__ import annotations

from edgelab.common.errors import ConfigError
from edgelab.sync.asynchronous import ParameterServerAsync
from edgelab.sync.base import DeviceUpdate, Strategy
from edgelab.sync.parameter_server import ParameterServerSync

#: ``ps_sync``: MXNet ``dist_sync`` (barrier, mean of the updates); ``ps_async``: MXNet ``dist_async``
#: (each update applied as it arrives); ``end_average``: Park 2020 section 2's asynchronous method
#: (devices train alone, one average at the end of training); ``gossip``: no server, each device averages
#: its own weights with its neighbours' (``edgelab.peer.gossip``; on the device-held transport, "allreduce").
STRATEGIES = ("ps_sync", "ps_async", "end_average", "gossip")
#: The strategies without a server (no global model: its mean across the devices is evaluated).
PEER_STRATEGIES = ("gossip",)

__all__ = [
    "PEER_STRATEGIES",
    "STRATEGIES",
    "DeviceUpdate",
    "ParameterServerAsync",
    "ParameterServerSync",
    "Strategy",
    "build_strategy",
]


def build_strategy(name: str, *, sync_every: str = "batch", momentum: float = 0.0) -> Strategy:
    """Build the strategy called ``name`` (a fresh one, with no state, for every run)."""
    if name == "ps_sync":
        return ParameterServerSync(sync_every=sync_every, momentum=momentum)
    if name == "ps_async":
        return ParameterServerAsync(momentum=momentum)
    if name == "gossip":
        # No server step: the devices mix their own weights (edgelab.peer.gossip); this carries the rounds' period.
        return ParameterServerSync(sync_every=sync_every, momentum=momentum)
    if name == "end_average":
        return ParameterServerSync(sync_every="epoch", momentum=momentum)
    raise ConfigError("strategy", name, f"one of {', '.join(STRATEGIES)}")
