"""Synchronous rounds by all-reduce: the devices average among themselves, the client sends only tasks.

The ``"allreduce"`` transport (``edgelab.training.data_parallel``) keeps the weights on the
devices. After its training step each device cuts its weight delta (all
weights flattened into one vector) into as many slices as the round has
devices; device ``i`` owns slice ``i``. Every device sends each owner its
slice and its sample count (reduce-scatter); each owner computes the server's
step for its slice, ``ParameterServerSync.server_step`` over the slices in
device order, and sends it to every device (all-gather); each device adds the
whole step to its weights. Two devices instead send each other their whole
deltas and each computes the whole step: the same bytes, half the messages.
The arithmetic is the parameter server's element by
element, so the run is bit for bit the ``"direct"`` one (tested), while the
bytes go device to device (each device sends and receives ``2 (n-1)/n`` of
the weights a round), on the devices' round channels (``edgelab.runtime.channel``)
or, when the client keeps its calls on Dask's comms, on Dask's worker comms;
the client moves none. A round runs on a thread of the device (its channel's,
or its worker's), which waits there for its peers' pieces.

A round's records and the devices' byte counters are the parameter server's
(weights in, delta out): the transport changes the host's wall time, never
the result. The weights the client needs (an evaluation, the end) are fetched
from a device. Each device keeps the state it started the round from, so a
round cut by a lost device is run again from it: the client reads it from a
surviving device and installs it on all; with every device lost at once the
weights are gone and the run fails.

With a compressor (``edgelab.sync.compress``) each device encodes its own
delta as ``runtime.train_round`` does for the parameter server (the same
seeded rng and error-feedback residual, so the same encoded update), and the
devices all-gather the ENCODED updates: compressed values cannot be summed
slice by slice, so each device sends its encoding whole to its ``n - 1``
peers, decodes all ``n`` and takes the server's step in device order, as
sign and top-k all-reduce systems do. A round run again starts from the
residual the device started it from (``runtime``); a restarted device has lost its own.
Under ``"tree"`` (``mode="tree"``) the dense deltas instead go up a binomial
tree to device 0 (device ``i`` reports to ``i`` less its lowest set bit): each
device sends its parent its subtree's samples and sample-weighted mean delta,
the root takes the server's step and the step is sent back down the tree. A
leaf sends one delta and receives one step a round, a parent receives one
delta and sends one step per child. Compressed updates are refused there (an
encoding is not summed). Under gossip (``mode="gossip"``, ``edgelab.peer.gossip``)
there is no step: each device mixes its own weights with its neighbours'.
Records add what went to peers: ``peer_bytes_sent`` (each piece's pickle and
buffers, once per peer), ``peer_bytes_received``, ``peer_messages_sent``, ``exchange``.
The messages themselves travel by ``edgelab.peer.messages``.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from edgelab.common.errors import ConfigError, WorkerLostError
from edgelab.common.wire import Packed, pack, unpack
from edgelab.peer.messages import collect_pieces, exchange, send_pieces
from edgelab.peer.state import PeerState, RoundAbandoned
from edgelab.runtime.protocol import StateMissingError, device_call
from edgelab.sync.aggregate import apply_delta, weighted_mean
from edgelab.sync.base import DeviceUpdate
from edgelab.sync.parameter_server import ParameterServerSync
from edgelab.sync.topology import metropolis_row, mix, slice_bounds

if TYPE_CHECKING:
    from edgelab.runtime.fleet import Fleet
    from edgelab.runtime.plugin import DeviceRuntime
    from edgelab.runtime.tasks import RoundTask
    from edgelab.sync.compress import Compressor

#: Up to this many devices, each sends its whole delta to every other and computes the whole step:
#: for two, the same bytes as reduce-scatter + all-gather in half the messages and one hop fewer.
WHOLE_EXCHANGE_MAX = 2
#: How dense deltas travel between the devices: reduce-scatter + all-gather, or up and down a binomial tree.
#: Under "gossip" (``edgelab.peer.gossip``) each device keeps its own weights and averages with its neighbours.
MODES = ("ring", "tree", "gossip")


class PeerStateMissingError(StateMissingError):
    """A device holds no all-reduce state of the run: its worker restarted since it was installed."""

    def __init__(self, device: str, run_id: str) -> None:
        super().__init__(device, run_id)  # both in args, so the error pickles back with the device named
        self.device, self.run_id = device, run_id

    def __str__(self) -> str:
        return f"device {self.device} holds no all-reduce state of run {self.run_id}; its worker restarted"


def check_weights(weights: list[np.ndarray]) -> None:
    """All-reduce flattens the weights into one vector: they must share one floating dtype."""
    dtypes = sorted({a.dtype.name for a in weights})
    if len(dtypes) != 1 or not np.issubdtype(weights[0].dtype, np.floating):
        raise ConfigError(
            "transport",
            "allreduce",
            f"models whose weights share one floating dtype (this one has {', '.join(dtypes)}); use transport='direct'",
        )


# ------------------------------------------------------------- on devices ----


@dataclass(frozen=True)
class PeerRun:
    """What every device of an all-reduce run is installed with: where its peers are and how a round reduces."""

    addresses: list[str]  # every device's worker, by device index
    server_learning_rate: float
    momentum: float
    compressor: Compressor | None = None
    mode: str = "ring"  # MODES
    topology: list[list[int]] | None = None  # under "gossip": every device's neighbours
    channels: list[tuple[str, int, bytes]] | None = None  # every device's round channel (None: Dask's comms)


@device_call(needs_runtime=True, waits=True)
def install(
    rt: DeviceRuntime,
    run_id: str,
    token: int,
    index: int,
    rnd: int,
    weights: list[np.ndarray],
    velocity: np.ndarray | None,
    peers: PeerRun,
) -> None:
    """Start (or restart) a run's all-reduce on device ``index`` of ``peers`` from ``weights`` at round ``rnd``."""
    old = rt.peers.get(run_id)
    if old is not None:
        old.inbox.abandon()  # a round still waiting for slices gives up
    check_weights(weights)
    layout, (flat,) = pack(weights)
    rt.peers[run_id] = PeerState(
        token,
        index,
        list(peers.addresses),
        rnd,
        flat.copy(),
        layout,
        velocity,
        peers.server_learning_rate,
        peers.momentum,
        compressor=peers.compressor,
        mode=peers.mode,
        topology=list(peers.topology or []),
        channels=None if peers.channels is None else [tuple(c) for c in peers.channels],  # type: ignore[misc]
    )


@device_call(needs_runtime=True, waits=True)
def state_at(rt: DeviceRuntime, run_id: str, rnd: int) -> tuple[Packed, np.ndarray | None]:
    """The weights (and momentum) this device holds at the start of round ``rnd``: now or its last round's start."""
    state = _state(rt, run_id)
    if state.round == rnd:
        return Packed(state.arrays()), state.velocity
    if state.before is not None and state.before[0] == rnd:
        _, flat, velocity = state.before
        return Packed(unpack(state.layout, (flat,))), velocity
    raise RuntimeError(f"device {rt.device} is at round {state.round}, not at round {rnd}")


@device_call(needs_runtime=True, waits=True)
def run_round(rt: DeviceRuntime, run_id: str, token: int, task: RoundTask | None) -> dict[str, Any] | None:
    """Train this device's batches of the round (``task``; None: none this round), then all-reduce the step.

    Returns the round's record, as ``runtime.train_round`` makes it (None without a task).
    """
    from edgelab.runtime.tasks import train_round

    state = _state(rt, run_id)
    if state.token != token:
        raise RoundAbandoned(f"device {rt.device} holds installation {state.token}, not {token}")
    rnd, n = state.round, len(state.addresses)
    state.before = (rnd, state.weights, state.velocity)
    state.traffic = dict.fromkeys(("peer_bytes_sent", "peer_bytes_received", "peer_messages_sent"), 0)
    if task is None:
        delta, record = np.zeros_like(state.weights), None
    else:
        packed, record = train_round(task, state.arrays())
        if state.compressor is None:
            _, flats = pack(packed.arrays)  # one flat buffer already (the compiled step's): no copy
            delta = flats[0] if len(flats) == 1 else np.concatenate([d.ravel() for d in packed.arrays])
    samples = 0 if record is None else int(record["samples"])

    if state.compressor is not None:
        # All-gather of the encoded updates: every device decodes every one and computes the whole step.
        how = "allgather_encoded"
        full = _encoded_step(rt, run_id, state, rnd, samples, None if record is None else packed)
    elif state.mode == "gossip":
        from edgelab.peer.allreduce import average

        # Each device steps its own weights, then takes the Metropolis average with its neighbours'.
        how, full = "gossip", None
        local = state.weights if record is None else _apply(state.weights, delta, state.server_learning_rate)
        state.weights = average(rt, run_id, state, rnd, local)
    elif state.mode == "tree":
        how = "tree"
        full = _tree_step(rt, run_id, state, rnd, samples, delta)
    elif n <= WHOLE_EXCHANGE_MAX:
        # Every device gets every whole delta and computes the whole step itself.
        how = "whole"
        full = _step(rt, run_id, state, rnd, "whole", samples, [delta] * n, slice(None))
    else:
        how = "reduce_scatter"
        # Reduce-scatter: each owner gets its slice of every delta and computes the step for it;
        # all-gather: every device gets every owner's slice of the step.
        bounds = slice_bounds(delta.size, n)
        mine = slice(bounds[state.index], bounds[state.index + 1])
        parts = [delta[bounds[j] : bounds[j + 1]] for j in range(n)]
        own = _step(rt, run_id, state, rnd, "reduce", samples, parts, mine)
        slices = exchange(rt, run_id, state, rnd, "gather", {j: (0, own) for j in range(n)})
        full = None if slices[0][1] is None else np.concatenate([slices[k][1] for k in range(n)])
    if full is not None:  # None: no device trained on anything, and the weights do not move
        state.weights = _apply(state.weights, full, state.server_learning_rate)
        if state.momentum:
            state.velocity = full
    state.round = rnd + 1
    if record is not None:
        record.update(state.traffic, exchange=how)
    return record


def _step(
    rt: DeviceRuntime,
    run_id: str,
    state: PeerState,
    rnd: int,
    phase: str,
    samples: int,
    outgoing: list[np.ndarray],
    mine: slice,
) -> np.ndarray | None:
    """Send device ``j`` ``outgoing[j]``, then compute the server's step on this device's part, ``mine``."""
    pieces = exchange(rt, run_id, state, rnd, phase, {j: (samples, p) for j, p in enumerate(outgoing)})
    return _server_step(state, [DeviceUpdate(str(k), [pieces[k][1]], pieces[k][0]) for k in range(len(pieces))], mine)


def _encoded_step(
    rt: DeviceRuntime, run_id: str, state: PeerState, rnd: int, samples: int, encoded: Any
) -> np.ndarray | None:
    """Send this device's encoded update (None: it trained nothing) to every peer; the step over all, decoded."""
    assert state.compressor is not None
    n = len(state.addresses)
    pieces = exchange(rt, run_id, state, rnd, "encoded", dict.fromkeys(range(n), (samples, encoded)))
    # Decoded as the parameter server decodes (training.data_parallel._decoded), flattened in the weights' order.
    updates = [
        DeviceUpdate(str(k), [np.concatenate([a.ravel() for a in state.compressor.decode(data)])], got)
        for k, (got, data, *_) in sorted(pieces.items())
        if got > 0
    ]
    return _server_step(state, updates, slice(None))


def tree_links(index: int, n: int) -> tuple[int | None, list[int]]:
    """Device ``index``'s parent (None: the root, device 0) and children in a binomial tree of ``n`` devices.

    Device ``i`` reports to ``i`` less its lowest set bit, as in ``edgelab.collectives.schedules``' tree schedule.

    Examples
    --------
    >>> [tree_links(i, 5) for i in range(5)]
    [(None, [1, 2, 4]), (0, []), (0, [3]), (2, []), (0, [])]
    """
    low = index & -index  # the root's lowest set bit is "infinite": every power of two below n is a child
    children = [index + 2**k for k in range(max(n, 1).bit_length()) if (index == 0 or 2**k < low) and index + 2**k < n]
    return (None if index == 0 else index - low), children


def subtree_mean(pieces: list[tuple[int, np.ndarray | None]]) -> tuple[int, np.ndarray | None]:
    """The samples and sample-weighted mean delta of a subtree, from its devices' (samples, mean delta) pieces."""
    usable = [(s, d) for s, d in pieces if s > 0]
    if not usable:
        return 0, None
    samples = sum(s for s, _ in usable)
    return samples, weighted_mean([[d] for _, d in usable], [s for s, _ in usable])[0]


def _tree_step(
    rt: DeviceRuntime, run_id: str, state: PeerState, rnd: int, samples: int, delta: np.ndarray
) -> np.ndarray | None:
    """Reduce the subtrees' mean deltas up the tree to device 0, which takes the server's step; broadcast it down.

    Up, each device waits for its children's (samples, mean delta) and sends
    its parent the mean over its subtree; the root computes the step in the
    order own, children (``ParameterServerSync.server_step``), so with every
    child a leaf (three devices or fewer) it is the parameter server's
    arithmetic bit for bit; deeper trees round each subtree's mean once more.
    """
    parent, children = tree_links(state.index, len(state.addresses))
    got = collect_pieces(rt, state, rnd, "up", children)
    pieces = [(samples, delta if samples > 0 else None)] + [got[c][:2] for c in children]
    if parent is not None:
        send_pieces(rt, run_id, state, rnd, "up", {parent: subtree_mean(pieces)}).wait()
        step = collect_pieces(rt, state, rnd, "down", [parent])[parent][1]
    else:
        updates = [DeviceUpdate(str(k), [d], s) for k, (s, d) in enumerate(pieces) if s > 0]
        step = _server_step(state, updates, slice(None))
    send_pieces(rt, run_id, state, rnd, "down", dict.fromkeys(children, (0, step))).wait()
    return step


def _server_step(state: PeerState, updates: list[DeviceUpdate], mine: slice) -> np.ndarray | None:
    """``ParameterServerSync.server_step`` over the updates' part ``mine``, from this device's momentum."""
    server = ParameterServerSync(momentum=state.momentum, server_learning_rate=state.server_learning_rate)
    server.velocity = None if state.velocity is None else [state.velocity[mine]]
    step = server.server_step(updates)
    return None if step is None else step[0]


def _apply(weights: np.ndarray, step: np.ndarray, scale: float) -> np.ndarray:
    # apply_delta's arithmetic, on the flat vector
    return apply_delta([weights], [step], scale=scale)[0]


def _state(rt: DeviceRuntime, run_id: str) -> PeerState:
    state = rt.peers.get(run_id)
    if state is None:
        raise PeerStateMissingError(rt.device, run_id)
    return state


#: What a client may call on a device for an all-reduce run; a round waits for its peers, so these never run on
#: the worker's event loop (``edgelab.runtime.plugin``), where the peers' pieces may arrive.


# -------------------------------------------------------------- on the client ----


class Ring:
    """The client's side of an all-reduce run: it installs the devices' state, starts rounds, fetches weights.

    ``round`` runs inside ``Fleet.attempt``: a round cut by a lost device is
    run again, after the state it started from is read from a surviving
    device and installed on every device (the revived one at its new address).
    With a ``compressor`` the devices all-gather their encoded updates; with
    ``mode="tree"`` the deltas go up a binomial tree and the step comes down it.
    """

    def __init__(
        self,
        fleet: Fleet,
        run_id: str,
        devices: list[str],
        weights: list[np.ndarray],
        strategy: ParameterServerSync,
        *,
        compressor: Compressor | None = None,
        mode: str = "ring",
    ) -> None:
        check_weights(weights)
        if mode not in MODES:
            raise ConfigError("mode", mode, f"one of {', '.join(MODES)}")
        if mode == "tree" and compressor is not None:
            raise ConfigError("compressor", compressor, "none under transport='tree' (encoded updates do not sum)")
        self.fleet, self.run_id, self.devices, self.strategy = fleet, run_id, list(devices), strategy
        self.compressor, self.mode = compressor, mode
        self.topology: list[list[int]] | None = None  # under "gossip" (edgelab.peer.gossip.GossipRing): the neighbours
        # The client's copy of the state at the start of round `held` (weights None: not held).
        self.weights: list[np.ndarray] | None = weights
        self.velocity: np.ndarray | None = None
        self.held = 0
        self.token = 0  # each installation draws a new one (_install): a piece with another is dropped
        self.installed: dict[str, str] = {}  # device -> its worker's address when installed
        self.clean = False  # whether the devices' state is the last completed round's

    def round(self, tasks: dict[str, RoundTask], rnd: int) -> list[dict[str, Any]]:
        """Round ``rnd`` on every device (those without a task only average): the records, in device order."""
        fleet = self.fleet
        if not self.clean or any(fleet.addresses[d] != self.installed.get(d) for d in self.devices):
            self._install(rnd)
        self.clean = False
        fleet.point("broadcast", rnd)
        fleet.point("train", rnd)
        replies = fleet.call_all({d: (run_round, self.run_id, self.token, tasks.get(d)) for d in self.devices})
        records = [replies[d] for d in self.devices]
        fleet.point("gather", rnd)
        self.clean, self.weights, self.velocity = True, None, None
        return [r for r in records if r is not None]

    def weights_at(self, rnd: int) -> list[np.ndarray]:
        """The global weights at the start of round ``rnd`` (the end of the one before), from a device."""
        if self.weights is None or self.held != rnd:
            self.weights, self.velocity = self._state_at(rnd)
            self.held = rnd
        return self.weights

    def _install_states(self, rnd: int) -> list[tuple[list[np.ndarray], np.ndarray | None]]:
        """What each device starts round ``rnd`` from: here, the one global state, read from a survivor if not held."""
        weights = self.weights_at(rnd)
        return [(weights, self.velocity)] * len(self.devices)

    def _install(self, rnd: int) -> None:
        states = self._install_states(rnd)
        # Unguessable, not a counter: a piece with any other token, forged or from an older installation, is dropped.
        self.token = secrets.randbits(63)
        addresses = [self.fleet.addresses[d] for d in self.devices]
        channels = self.fleet.channel_endpoints(self.devices)
        packed = {id(w): Packed(w) for w, _ in states}  # the same weights packed once for every device
        peers = PeerRun(
            addresses,
            self.strategy.server_learning_rate,
            self.strategy.momentum,
            compressor=self.compressor,
            mode=self.mode,
            topology=self.topology,
            channels=channels,
        )
        self.fleet.call_all(
            {
                d: (install, self.run_id, self.token, i, rnd, packed[id(states[i][0])], states[i][1], peers)
                for i, d in enumerate(self.devices)
            }
        )
        self.installed = dict(zip(self.devices, addresses, strict=True))

    def _state_at(self, rnd: int) -> tuple[list[np.ndarray], np.ndarray | None]:
        survivors = [d for d in self.devices if self.installed.get(d) == self.fleet.addresses[d]]
        for device in survivors:
            try:
                return self.fleet.call_all({device: (state_at, self.run_id, rnd)})[device]  # type: ignore[no-any-return]
            except StateMissingError:
                continue  # restarted at its old address: ask the next
        raise WorkerLostError(
            f"every device of all-reduce run {self.run_id} was lost at once ({', '.join(self.devices)}): its "
            "weights lived only on them; run again, or train with transport='direct'"
        )


def average(rt: DeviceRuntime, run_id: str, state: PeerState, rnd: int, mine: np.ndarray) -> np.ndarray:
    """Send ``mine`` (this device's weights after its round) to its neighbours; their Metropolis average."""
    near = state.topology[state.index]
    got = exchange(rt, run_id, state, rnd, "gossip", dict.fromkeys(near, (0, mine)), sources=near)
    return mix(metropolis_row(state.topology, state.index), {**{j: got[j][1] for j in near}, state.index: mine})
