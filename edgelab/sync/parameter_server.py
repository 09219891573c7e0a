"""Synchronous SGD through a parameter server (MXNet KVStore ``dist_sync``).

Every device pulls the global weights, trains on its own batch (or epoch),
pushes its update, and the server waits for all devices before it averages.
With plain SGD and one step per round, averaging the devices' weight deltas
weighted by their samples is exactly SGD on the union of their batches. The
server may keep momentum, as MXNet's servers do when they run the optimizer
(``update_on_kvstore``): ``v = momentum * v + mean_delta; w += v``. With one
step per round that is SGD with momentum on the averaged gradient.

Paper: Park et al. 2020, section 3 (weights sent to the master after each batch).
"""

from __future__ import annotations

from edgelab.common.errors import ConfigError
from edgelab.sync.aggregate import RunningMean, apply_delta, weighted_mean
from edgelab.sync.base import DeviceUpdate, NDArrays, Strategy

SYNC_EVERY = ("batch", "epoch")


def momentum_step(mean: NDArrays, velocity: NDArrays | None, momentum: float) -> NDArrays:
    """The new velocity ``momentum * velocity + mean`` (the first round: ``mean``)."""
    return mean if velocity is None else apply_delta(mean, velocity, scale=momentum)


class ParameterServerSync(Strategy):
    """Synchronous parameter-server averaging after every batch or every epoch.

    With ``sync_every="epoch"`` and one epoch it is Park 2020's section 2
    reading of "asynchronous": every device trains on its own, and the server
    averages once, at the end of training (strategy ``end_average``).

    Parameters
    ----------
    sync_every
        ``"batch"``: one round per batch (MXNet ``dist_sync``); ``"epoch"``: each
        device trains its whole epoch locally, then the server averages.
    server_learning_rate
        Scale of the averaged delta the server applies (1.0 = plain averaging).
    momentum
        Server momentum in [0, 1); 0 applies each round's averaged delta alone.
    """

    #: whether updates are applied one by one as they arrive (no barrier)
    asynchronous = False

    def __init__(self, *, sync_every: str = "batch", server_learning_rate: float = 1.0, momentum: float = 0.0) -> None:
        if sync_every not in SYNC_EVERY:
            raise ConfigError("sync_every", sync_every, f"one of {', '.join(SYNC_EVERY)}")
        if not 0.0 <= momentum < 1.0:
            raise ConfigError("momentum", momentum, "a number in [0, 1)")
        self.sync_every = sync_every
        self.server_learning_rate = server_learning_rate
        self.momentum = momentum
        #: the server's momentum state (None until the first step)
        self.velocity: NDArrays | None = None
        self._running: RunningMean | None = None  # the last round's: the next one sums in its buffers

    def aggregate(self, weights: NDArrays, updates: list[DeviceUpdate]) -> NDArrays | None:
        """Average the deltas (weighted by samples) and apply them to ``weights``."""
        step = self.server_step(updates)
        if step is None:
            return None
        return apply_delta(weights, step, scale=self.server_learning_rate)

    def running_mean(self, n: int) -> RunningMean | None:
        """A ``RunningMean`` for a round's ``n`` deltas, taken as they arrive; None where this class changed the maths.

        Hand each device's delta over with its samples (``skip`` one with
        none), then ``aggregate_running`` with it: the same weights as
        ``aggregate``, bit for bit. It sums in the buffers of the one asked
        for before, which is done with from then on.
        """
        # A subclass's override, or a function set on this very object, changes the maths.
        own = getattr(self.aggregate, "__func__", None) is ParameterServerSync.aggregate
        own = own and getattr(self.server_step, "__func__", None) is ParameterServerSync.server_step
        if not own:
            return None
        self._running = RunningMean(n, recycle=self._running)
        return self._running

    def aggregate_running(self, weights: NDArrays, running: RunningMean) -> NDArrays | None:
        """``aggregate`` from the deltas ``running`` summed (None: no device trained on anything)."""
        if not running.folded:
            return None
        if not self.momentum:  # the mean is the step: taken and applied in one pass where it can be
            return running.added_to(weights, scale=self.server_learning_rate)
        return apply_delta(weights, self._through_momentum(running.result()), scale=self.server_learning_rate)

    def server_step(self, updates: list[DeviceUpdate]) -> NDArrays | None:
        """What the server adds to the weights (times ``server_learning_rate``): the mean delta, through momentum.

        None when no device trained on anything (the model does not move).
        Element by element, so a slice of every update gives that slice of the
        step (``edgelab.peer.allreduce`` has each device compute one slice).
        """
        usable = [u for u in updates if u.samples > 0]
        if not usable:
            return None
        return self._through_momentum(weighted_mean([u.delta for u in usable], [u.samples for u in usable]))

    def _through_momentum(self, mean: NDArrays) -> NDArrays:
        if self.momentum:
            self.velocity = momentum_step(mean, self.velocity, self.momentum)
            return self.velocity
        return mean

    def bytes_per_round(self, n_params: int, *, dtype_bytes: int = 4) -> tuple[int, int]:
        """A device pushes its delta and pulls the weights: params x 4 B each way."""
        return n_params * dtype_bytes, n_params * dtype_bytes
