"""The interface every synchronization strategy implements.

A strategy never touches Dask: the runtime hands it what the devices sent back
and it returns the new global weights (or ``None`` when nothing usable came
back). Aggregation is plain numpy.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from edgelab.sync.aggregate import RunningMean

NDArrays = list[np.ndarray]


@dataclass(frozen=True)
class DeviceUpdate:
    """What one device sent back after a round."""

    device: str
    delta: NDArrays  # local weights after the round minus the weights it started from
    samples: int  # training samples behind the delta


class Strategy(ABC):
    """How devices' updates become the next global weights."""

    #: synchronize after every ``"batch"`` or every ``"epoch"``
    sync_every: str

    @abstractmethod
    def aggregate(self, weights: NDArrays, updates: list[DeviceUpdate]) -> NDArrays | None:
        """Return the next global weights, or ``None`` if no update is usable."""

    def running_mean(self, n: int) -> RunningMean | None:
        """A ``RunningMean`` to sum a round's ``n`` deltas into as they come, for ``aggregate_running``; None: no such.

        Only a strategy whose ``aggregate`` is the deltas' mean weighted by
        samples (updates with none left out) gives one.
        """
        return None

    def aggregate_running(self, weights: NDArrays, running: RunningMean) -> NDArrays | None:
        """``aggregate`` from the deltas a ``running_mean`` summed (None: no update was usable)."""
        raise NotImplementedError(f"{type(self).__name__} takes whole rounds: its running_mean is None")

    @abstractmethod
    def bytes_per_round(self, n_params: int, *, dtype_bytes: int = 4) -> tuple[int, int]:
        """Bytes one device (sends, receives) in one round."""
