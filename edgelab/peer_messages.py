"""Pieces of a round sent device to device on Dask's worker comms, counted as serialized.

Every device of a peer-to-peer run (``edgelab.allreduce``, ``edgelab.gossip``)
keeps an inbox per (round, phase); a peer's piece arrives through the device
runtime's ``PEER_OP`` handler (``receive``) and wakes whoever waits for it
(``collect_pieces``). Sends carry no acknowledgement: a peer that is gone is
found by the client, which installs a new state, and a device still waiting
then gives the round up (``RoundAbandoned``). Each piece is serialized once
however many peers it goes to, and its bytes (header and frames) are added to
the state's ``traffic``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import msgpack
from distributed.protocol import Serialized
from distributed.protocol.serialize import serialize_and_split

from edgelab.runtime import PEER_OP

if TYPE_CHECKING:
    from edgelab.allreduce import PeerState
    from edgelab.runtime import DeviceRuntime

#: How long a device waits for its peers' slices before it gives the round up.
SLICE_TIMEOUT_S = 300.0


class RoundAbandoned(RuntimeError):
    """The client installed a new state while this device waited for its peers (a peer was lost)."""


async def exchange(
    rt: DeviceRuntime,
    run_id: str,
    state: PeerState,
    rnd: int,
    phase: str,
    outgoing: dict[int, tuple[int, Any]],
    sources: Iterable[int] | None = None,
) -> dict[int, tuple[int, Any, int]]:
    """Send ``outgoing[j]`` to device ``j`` and wait for the pieces of ``sources`` (None: every device), by index.

    This device's own piece, if ``outgoing`` holds one, is among the pieces returned.
    """
    if state.index in outgoing:
        state.inbox.setdefault((rnd, phase), {})[state.index] = (*outgoing[state.index], 0)
    wanted = range(len(state.addresses)) if sources is None else sources
    sent = send_pieces(rt, run_id, state, rnd, phase, outgoing)
    try:
        pieces = await collect_pieces(rt, state, rnd, phase, wanted)
    except RoundAbandoned:
        sent.cancel()
        raise
    await sent
    return pieces


def send_pieces(
    rt: DeviceRuntime,
    run_id: str,
    state: PeerState,
    rnd: int,
    phase: str,
    outgoing: dict[int, tuple[int, Any]],
) -> asyncio.Future[Any]:
    """Start sending ``outgoing[j]`` to each peer ``j`` (not this device), counting the traffic; await the result."""
    # Each piece serialized once, however many peers it goes to (an all-gather's goes to all n - 1).
    wire: dict[int, tuple[Serialized | None, int]] = {}  # by the piece's id
    sends = []
    for j, (samples, piece) in outgoing.items():
        if j == state.index:
            continue
        if id(piece) not in wire:
            wire[id(piece)] = serialized(piece)
        frames, nbytes = wire[id(piece)]
        state.traffic["peer_bytes_sent"] += nbytes
        state.traffic["peer_messages_sent"] += 1
        sends.append(
            getattr(rt._worker.rpc(state.addresses[j]), PEER_OP)(
                reply=False,  # no acknowledgement: a peer that is gone is found by the client
                run_id=run_id,
                token=state.token,
                rnd=rnd,
                phase=phase,
                src=state.index,
                samples=samples,
                data=frames,
                nbytes=nbytes,
            )
        )
    return asyncio.gather(*sends)


async def collect_pieces(
    rt: DeviceRuntime, state: PeerState, rnd: int, phase: str, sources: Iterable[int]
) -> dict[int, tuple[int, Any, int]]:
    """Wait for the pieces of ``(rnd, phase)`` from every device of ``sources``: by device index."""
    key, wanted = (rnd, phase), set(sources)
    inbox = state.inbox.setdefault(key, {})
    deadline = asyncio.get_running_loop().time() + SLICE_TIMEOUT_S
    while not wanted <= inbox.keys() and not state.abandoned:
        state.arrived.clear()
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            break
        try:
            await asyncio.wait_for(state.arrived.wait(), remaining)
        except TimeoutError:
            break
    if state.abandoned or not wanted <= inbox.keys():
        missing = sorted(wanted - inbox.keys())
        raise RoundAbandoned(f"device {rt.device}: round {rnd} {phase} ended without slices from devices {missing}")
    pieces = state.inbox.pop(key)
    state.traffic["peer_bytes_received"] += sum(nbytes for _, _, nbytes in pieces.values())
    return pieces


def serialized(value: Any) -> tuple[Serialized | None, int]:
    """``value`` serialized as Dask's comms send it (uncompressed: Dask's default), and its bytes: header and frames."""
    if value is None:
        return None, 0
    header, frames = serialize_and_split(value, on_error="raise")
    size = len(msgpack.dumps(header, use_bin_type=True)) + sum(memoryview(f).nbytes for f in frames)
    return Serialized(header, frames), size


async def receive(
    rt: DeviceRuntime,
    run_id: str,
    token: int,
    rnd: int,
    phase: str,
    src: int,
    samples: int,
    data: Any,
    nbytes: int = 0,
) -> str:
    """A peer's piece for this device (the ``PEER_OP`` handler); an older installation's is dropped."""
    state = rt.peers.get(run_id)
    if state is None or token != state.token:
        return "dropped"
    state.inbox.setdefault((rnd, phase), {})[src] = (samples, data, nbytes)
    state.arrived.set()
    return "OK"
