"""Synchronous rounds by all-reduce: the devices average among themselves, the client sends only tasks.

The ``"allreduce"`` transport (``edgelab.train``) keeps the weights on the
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
bytes go device to device on Dask's worker comms (each device sends and
receives ``2 (n-1)/n`` of the weights a round) and the client moves none.

A round's records and the devices' byte counters are the parameter server's
(weights in, delta out): the transport changes the host's wall time, never
the result. The weights the client needs (an evaluation, the end) are fetched
from a device. Each device keeps the state it started the round from, so a
round cut by a lost device is run again from it: the client reads it from a
surviving device and installs it on all; with every device lost at once the
weights are gone and the run fails.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from distributed.protocol import to_serialize

from edgelab.errors import ConfigError, WorkerLostError
from edgelab.runtime import PEER_OP, StateMissingError
from edgelab.sync.base import DeviceUpdate
from edgelab.sync.parameter_server import ParameterServerSync
from edgelab.wire import Layout, Packed, pack, unpack

if TYPE_CHECKING:
    from edgelab.fleet import Fleet
    from edgelab.runtime import DeviceRuntime, RoundTask

#: Up to this many devices, each sends its whole delta to every other and computes the whole step:
#: for two, the same bytes as reduce-scatter + all-gather in half the messages and one hop fewer.
WHOLE_EXCHANGE_MAX = 2
#: How long a device waits for its peers' slices before it gives the round up.
SLICE_TIMEOUT_S = 300.0


class PeerStateMissingError(StateMissingError):
    """A device holds no all-reduce state of the run: its worker restarted since it was installed."""

    def __init__(self, device: str, run_id: str) -> None:
        super().__init__(device, run_id)  # both in args, so the error pickles back with the device named
        self.device, self.run_id = device, run_id

    def __str__(self) -> str:
        return f"device {self.device} holds no all-reduce state of run {self.run_id}; its worker restarted"


class RoundAbandoned(RuntimeError):
    """The client installed a new state while this device waited for its peers (a peer was lost)."""


def slice_bounds(length: int, n: int) -> list[int]:
    """Where each of ``n`` owners' slices of a ``length``-vector starts, and the end.

    Examples
    --------
    >>> slice_bounds(10, 3)
    [0, 3, 6, 10]
    """
    return [(i * length) // n for i in range(n)] + [length]


def check_weights(weights: list[np.ndarray]) -> None:
    """All-reduce flattens the weights into one vector: they must share one floating dtype."""
    dtypes = sorted({a.dtype.name for a in weights})
    if len(dtypes) != 1 or not np.issubdtype(weights[0].dtype, np.floating):
        raise ConfigError(
            "transport",
            "allreduce",
            f"models whose weights share one floating dtype (this one has {', '.join(dtypes)}); use transport='direct'",
        )


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
    inbox: dict[tuple[int, str], dict[int, tuple[int, Any]]] = field(default_factory=dict)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    abandoned: bool = False

    def arrays(self) -> list[np.ndarray]:
        """The weights as the model's arrays (views of the flat vector)."""
        return unpack(self.layout, (self.weights,))


# ------------------------------------------------------------- on devices ----


async def install(
    rt: DeviceRuntime,
    run_id: str,
    token: int,
    index: int,
    addresses: list[str],
    rnd: int,
    weights: list[np.ndarray],
    velocity: np.ndarray | None,
    server_learning_rate: float,
    momentum: float,
) -> None:
    """Start (or restart) a run's all-reduce on this device from ``weights`` at round ``rnd``."""
    old = rt.peers.get(run_id)
    if old is not None:
        old.abandoned = True  # a round still waiting for slices gives up
        old.arrived.set()
    check_weights(weights)
    layout, (flat,) = pack(weights)
    rt.peers[run_id] = PeerState(
        token, index, list(addresses), rnd, flat.copy(), layout, velocity, server_learning_rate, momentum
    )


async def state_at(rt: DeviceRuntime, run_id: str, rnd: int) -> tuple[Packed, np.ndarray | None]:
    """The weights (and momentum) this device holds at the start of round ``rnd``: now or its last round's start."""
    state = _state(rt, run_id)
    if state.round == rnd:
        return Packed(state.arrays()), state.velocity
    if state.before is not None and state.before[0] == rnd:
        _, flat, velocity = state.before
        return Packed(unpack(state.layout, (flat,))), velocity
    raise RuntimeError(f"device {rt.device} is at round {state.round}, not at round {rnd}")


async def run_round(rt: DeviceRuntime, run_id: str, token: int, task: RoundTask | None) -> dict[str, Any] | None:
    """Train this device's batches of the round (``task``; None: none this round), then all-reduce the step.

    Returns the round's record, as ``runtime.train_round`` makes it (None without a task).
    """
    from edgelab.runtime import train_round

    state = _state(rt, run_id)
    if state.token != token:
        raise RoundAbandoned(f"device {rt.device} holds installation {state.token}, not {token}")
    rnd, n = state.round, len(state.addresses)
    state.before = (rnd, state.weights, state.velocity)
    if task is None:
        delta, record = np.zeros_like(state.weights), None
    else:
        packed, record = await rt.run(train_round, (task, state.arrays()))
        _, flats = pack(packed.arrays)  # one flat buffer already (the compiled step's): no copy
        delta = flats[0] if len(flats) == 1 else np.concatenate([d.ravel() for d in packed.arrays])
    samples = 0 if record is None else int(record["samples"])

    if n <= WHOLE_EXCHANGE_MAX:
        # Every device gets every whole delta and computes the whole step itself.
        full = await _step(rt, run_id, state, rnd, "whole", samples, [delta] * n, slice(None))
    else:
        # Reduce-scatter: each owner gets its slice of every delta and computes the step for it;
        # all-gather: every device gets every owner's slice of the step.
        bounds = slice_bounds(delta.size, n)
        mine = slice(bounds[state.index], bounds[state.index + 1])
        parts = [delta[bounds[j] : bounds[j + 1]] for j in range(n)]
        own = await _step(rt, run_id, state, rnd, "reduce", samples, parts, mine)
        slices = await _exchange(rt, run_id, state, rnd, "gather", {j: (0, own) for j in range(n)})
        full = None if slices[0][1] is None else np.concatenate([slices[k][1] for k in range(n)])
    if full is not None:  # None: no device trained on anything, and the weights do not move
        state.weights = _apply(state.weights, full, state.server_learning_rate)
        if state.momentum:
            state.velocity = full
    state.round = rnd + 1
    return record


async def _step(
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
    pieces = await _exchange(rt, run_id, state, rnd, phase, {j: (samples, p) for j, p in enumerate(outgoing)})
    server = ParameterServerSync(momentum=state.momentum, server_learning_rate=state.server_learning_rate)
    server.velocity = None if state.velocity is None else [state.velocity[mine]]
    step = server.server_step([DeviceUpdate(str(k), [pieces[k][1]], pieces[k][0]) for k in range(len(pieces))])
    return None if step is None else step[0]


def _apply(weights: np.ndarray, step: np.ndarray, scale: float) -> np.ndarray:
    # apply_delta's arithmetic, on the flat vector
    from edgelab.sync.aggregate import apply_delta

    return apply_delta([weights], [step], scale=scale)[0]


async def _exchange(
    rt: DeviceRuntime,
    run_id: str,
    state: PeerState,
    rnd: int,
    phase: str,
    outgoing: dict[int, tuple[int, np.ndarray | None]],
) -> dict[int, tuple[int, Any]]:
    """Send ``outgoing[j]`` to device ``j`` and wait for every device's piece for this one, by device index."""
    key = (rnd, phase)
    inbox = state.inbox.setdefault(key, {})
    inbox[state.index] = outgoing[state.index]
    sends = [
        getattr(rt._worker.rpc(address), PEER_OP)(
            reply=False,  # no acknowledgement: a peer that is gone is found by the client
            run_id=run_id,
            token=state.token,
            rnd=rnd,
            phase=phase,
            src=state.index,
            samples=outgoing[j][0],
            data=None if outgoing[j][1] is None else to_serialize(outgoing[j][1]),
        )
        for j, address in enumerate(state.addresses)
        if j != state.index
    ]
    sent = asyncio.gather(*sends)
    deadline = asyncio.get_running_loop().time() + SLICE_TIMEOUT_S
    while len(inbox) < len(state.addresses) and not state.abandoned:
        state.arrived.clear()
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            break
        try:
            await asyncio.wait_for(state.arrived.wait(), remaining)
        except TimeoutError:
            break
    if state.abandoned or len(inbox) < len(state.addresses):
        sent.cancel()
        missing = sorted(set(range(len(state.addresses))) - set(inbox))
        raise RoundAbandoned(f"device {rt.device}: round {rnd} {phase} ended without slices from devices {missing}")
    await sent
    return state.inbox.pop(key)


async def receive(
    rt: DeviceRuntime, run_id: str, token: int, rnd: int, phase: str, src: int, samples: int, data: Any
) -> str:
    """A peer's piece for this device (the ``PEER_OP`` handler); an older installation's is dropped."""
    state = rt.peers.get(run_id)
    if state is None or token != state.token:
        return "dropped"
    state.inbox.setdefault((rnd, phase), {})[src] = (samples, data)
    state.arrived.set()
    return "OK"


def _state(rt: DeviceRuntime, run_id: str) -> PeerState:
    state = rt.peers.get(run_id)
    if state is None:
        raise PeerStateMissingError(rt.device, run_id)
    return state


#: What a client may call on a device for an all-reduce run; they run on the worker's event loop.
LOOP_FUNCTIONS = {"allreduce_install": install, "allreduce_state": state_at, "allreduce_round": run_round}


# -------------------------------------------------------------- on the client ----


class Ring:
    """The client's side of an all-reduce run: it installs the devices' state, starts rounds, fetches weights.

    ``round`` runs inside ``Fleet.attempt``: a round cut by a lost device is
    run again, after the state it started from is read from a surviving
    device and installed on every device (the revived one at its new address).
    """

    def __init__(
        self, fleet: Fleet, run_id: str, devices: list[str], weights: list[np.ndarray], strategy: ParameterServerSync
    ) -> None:
        check_weights(weights)
        self.fleet, self.run_id, self.devices, self.strategy = fleet, run_id, list(devices), strategy
        # The client's copy of the state at the start of round `held` (weights None: not held).
        self.weights: list[np.ndarray] | None = weights
        self.velocity: np.ndarray | None = None
        self.held = 0
        self.token = 0
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
        calls = fleet.direct_all({d: ("allreduce_round", self.run_id, self.token, tasks.get(d)) for d in self.devices})
        fleet.wait(calls)
        records = [calls[d].result() for d in self.devices]
        fleet.point("gather", rnd)
        self.clean, self.weights, self.velocity = True, None, None
        return [r for r in records if r is not None]

    def weights_at(self, rnd: int) -> list[np.ndarray]:
        """The global weights at the start of round ``rnd`` (the end of the one before), from a device."""
        if self.weights is None or self.held != rnd:
            self.weights, self.velocity = self._state_at(rnd)
            self.held = rnd
        return self.weights

    def _install(self, rnd: int) -> None:
        if self.weights is not None and self.held == rnd:
            weights, velocity = self.weights, self.velocity
        else:
            weights, velocity = self._state_at(rnd)
        self.token += 1
        addresses = [self.fleet.addresses[d] for d in self.devices]
        packed = Packed(weights)
        calls = {
            d: self.fleet.direct(
                d,
                "allreduce_install",
                self.run_id,
                self.token,
                i,
                addresses,
                rnd,
                packed,
                velocity,
                self.strategy.server_learning_rate,
                self.strategy.momentum,
            )
            for i, d in enumerate(self.devices)
        }
        self.fleet.wait(calls)
        for call in calls.values():
            call.result()
        self.installed = dict(zip(self.devices, addresses, strict=True))
        self.weights, self.velocity, self.held = weights, velocity, rnd

    def _state_at(self, rnd: int) -> tuple[list[np.ndarray], np.ndarray | None]:
        survivors = [d for d in self.devices if self.installed.get(d) == self.fleet.addresses[d]]
        for device in survivors:
            call = {device: self.fleet.direct(device, "allreduce_state", self.run_id, rnd)}
            self.fleet.wait(call)
            try:
                return call[device].result()  # type: ignore[no-any-return]
            except StateMissingError:
                continue  # restarted at its old address: ask the next
        raise WorkerLostError(
            f"every device of all-reduce run {self.run_id} was lost at once ({', '.join(self.devices)}): its "
            "weights lived only on them; run again, or train with transport='direct'"
        )
