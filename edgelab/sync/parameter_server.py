"""Synchronous SGD through a parameter server (MXNet KVStore ``dist_sync``).

Every device pulls the global weights, trains on its own batch (or epoch),
pushes its update, and the server waits for all devices before it averages.
With plain SGD and one step per round, averaging the devices' weight deltas
weighted by their samples is exactly SGD on the union of their batches.

Paper: Park et al. 2020, section 3 (weights sent to the master after each batch).
"""

from __future__ import annotations

from edgelab.errors import ConfigError
from edgelab.sync.aggregate import apply_delta, weighted_mean
from edgelab.sync.base import DeviceUpdate, NDArrays, Strategy

SYNC_EVERY = ("batch", "epoch")


class ParameterServerSync(Strategy):
    """Synchronous parameter-server averaging after every batch or every epoch.

    Parameters
    ----------
    sync_every
        ``"batch"``: one round per batch (MXNet ``dist_sync``); ``"epoch"``: each
        device trains its whole epoch locally, then the server averages.
    server_learning_rate
        Scale of the averaged delta the server applies (1.0 = plain averaging).
    """

    def __init__(self, *, sync_every: str = "batch", server_learning_rate: float = 1.0) -> None:
        if sync_every not in SYNC_EVERY:
            raise ConfigError("sync_every", sync_every, f"one of {', '.join(SYNC_EVERY)}")
        self.sync_every = sync_every
        self.server_learning_rate = server_learning_rate

    def aggregate(self, weights: NDArrays, updates: list[DeviceUpdate]) -> NDArrays | None:
        """Average the deltas (weighted by samples) and apply them to ``weights``."""
        usable = [u for u in updates if u.samples > 0]
        # Do not move the model when no device trained on anything this round
        if not usable:
            return None
        mean = weighted_mean([u.delta for u in usable], [u.samples for u in usable])
        return apply_delta(weights, mean, scale=self.server_learning_rate)

    def bytes_per_round(self, n_params: int, *, dtype_bytes: int = 4) -> tuple[int, int]:
        """A device pushes its delta and pulls the weights: params x 4 B each way."""
        return n_params * dtype_bytes, n_params * dtype_bytes
