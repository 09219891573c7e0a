"""One device's part of a peer-to-peer run: its weights, its peers, and the pieces they sent it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from edgelab.common.wire import Layout, unpack

if TYPE_CHECKING:
    from edgelab.sync.compress import Compressor


class RoundAbandoned(RuntimeError):
    """The client installed a new state while this device waited for its peers (a peer was lost)."""


class Inbox:
    """The pieces a device's peers sent it, by (round, phase) and sender; a round's thread waits for them."""

    def __init__(self) -> None:
        self._ready = threading.Condition()
        self._pieces: dict[tuple[int, str], dict[int, tuple[int, Any, int]]] = {}
        self.abandoned = False

    def put(self, key: tuple[int, str], src: int, piece: tuple[int, Any, int]) -> None:
        """Add ``src``'s piece (samples, value, bytes) for ``key`` and wake whoever waits."""
        with self._ready:
            self._pieces.setdefault(key, {})[src] = piece
            self._ready.notify_all()

    def abandon(self) -> None:
        """Give up every wait: the client installed a new state."""
        with self._ready:
            self.abandoned = True
            self._ready.notify_all()

    def take(self, key: tuple[int, str], sources: Iterable[int], timeout_s: float) -> dict[int, tuple[int, Any, int]]:
        """The pieces of ``key`` from every device of ``sources``, waited for; ``RoundAbandoned`` if they never come."""
        wanted = set(sources)
        deadline = time.monotonic() + timeout_s
        with self._ready:
            while not self.abandoned and not wanted <= self._pieces.get(key, {}).keys():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._ready.wait(remaining)
            got = self._pieces.get(key, {})
            if self.abandoned or not wanted <= got.keys():
                missing = sorted(wanted - got.keys())
                raise RoundAbandoned(f"round {key[0]} {key[1]} ended without slices from devices {missing}")
            return self._pieces.pop(key, {})


@dataclass
class PeerState:
    """One device's part of an all-reduce run: its weights and where its peers are."""

    token: int  # which installation this is: slices of an older one are dropped
    index: int
    addresses: list[str]
    round: int  # the round these weights start
    weights: np.ndarray  # flat
    layout: Layout
    velocity: np.ndarray | None
    server_learning_rate: float
    momentum: float
    # The state this device started its last round from: a round run again starts there.
    before: tuple[int, np.ndarray, np.ndarray | None] | None = None
    compressor: Compressor | None = None  # None: dense deltas, reduce-scattered
    mode: str = "ring"  # how dense deltas travel (MODES): reduce-scattered, up a tree, or gossiped
    topology: list[list[int]] = field(default_factory=list)  # under "gossip": every device's neighbours
    traffic: dict[str, int] = field(default_factory=dict)  # this round's peer messages and bytes
    # Each peer's piece of a (round, phase): its samples, data and bytes on the wire.
    inbox: Inbox = field(default_factory=Inbox)
    # Where each device's round channel listens (None: pieces go on Dask's worker comms).
    channels: list[tuple[str, int, bytes]] | None = None

    def arrays(self) -> list[np.ndarray]:
        """The weights as the model's arrays (views of the flat vector)."""
        return unpack(self.layout, (self.weights,))
