"""Synchronization strategies behind one small interface."""

from __future__ import annotations

from edgelab.errors import ConfigError
from edgelab.sync.base import DeviceUpdate, Strategy
from edgelab.sync.parameter_server import ParameterServerSync

STRATEGIES = ("ps_sync",)

__all__ = ["STRATEGIES", "DeviceUpdate", "ParameterServerSync", "Strategy", "build_strategy"]


def build_strategy(name: str, *, sync_every: str = "batch", momentum: float = 0.0) -> Strategy:
    """Build the strategy called ``name`` (a fresh one, with no state, for every run)."""
    if name == "ps_sync":
        return ParameterServerSync(sync_every=sync_every, momentum=momentum)
    raise ConfigError("strategy", name, f"one of {', '.join(STRATEGIES)}")
