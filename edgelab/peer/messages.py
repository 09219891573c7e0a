"""Pieces of a round sent device to device, counted as serialized.

Every device of a peer-to-peer run (``edgelab.peer.allreduce``, ``edgelab.peer.gossip``)
keeps an ``Inbox``; a peer's piece arrives on the device's round channel
(``edgelab.runtime.channel``: a plain socket from each peer, read on a thread of its
own) or, on a run whose client keeps its calls on Dask's comms, through the
runtime's ``PEER_OP`` handler; either way it wakes the round's thread that
waits for it (``collect_pieces``). Sends carry no acknowledgement: a peer that
is gone is found by the client, which installs a new state, and a device
still waiting then gives the round up (``RoundAbandoned``).

Each piece is pickled once however many peers it goes to (``serialized``:
protocol 5, its arrays' buffers out of band), and its bytes, the pickle and
the buffers, are added to the state's ``traffic``.
"""

from __future__ import annotations

import concurrent.futures
import pickle
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from edgelab.peer.state import PeerState, RoundAbandoned
from edgelab.runtime.channel import encode, send_message
from edgelab.runtime.protocol import call_name, device_call

if TYPE_CHECKING:
    from edgelab.peer.state import PeerState
    from edgelab.runtime.plugin import DeviceRuntime

#: How long a device waits for its peers' slices before it gives the round up.
SLICE_TIMEOUT_S = 300.0
#: The channel call that carries a peer's piece (one way: the receiver sends no reply).


class Piece:
    """A value pickled once for every peer it goes to: the pickle and its arrays' buffers, uncopied."""

    __slots__ = ("data", "buffers")

    def __init__(self, data: bytes, buffers: list[Any]) -> None:
        self.data, self.buffers = data, buffers

    @property
    def nbytes(self) -> int:
        """Bytes on the wire: the pickle and the buffers."""
        return len(self.data) + sum(memoryview(b).nbytes for b in self.buffers)

    def value(self) -> Any:
        """The value it was made from (its arrays views of the buffers it arrived in)."""
        return pickle.loads(self.data, buffers=self.buffers)

    def __reduce__(self) -> tuple[Any, ...]:
        # The buffers go out of band again inside the message that carries the piece.
        return (Piece, (self.data, [pickle.PickleBuffer(b) for b in self.buffers]))


def serialized(value: Any) -> tuple[Piece | None, int]:
    """``value`` pickled for its peers, and its bytes on the wire (None travels as nothing)."""
    if value is None:
        return None, 0
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    piece = Piece(data, [b.raw() for b in buffers])
    return piece, piece.nbytes


def exchange(
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
        state.inbox.put((rnd, phase), state.index, (*outgoing[state.index], 0))
    wanted = range(len(state.addresses)) if sources is None else sources
    sent = send_pieces(rt, run_id, state, rnd, phase, outgoing)
    pieces = collect_pieces(rt, state, rnd, phase, wanted)
    sent.wait()
    return pieces


class _Sent:
    """Sends still under way on Dask's comms (on channels a send is done when it returns)."""

    def __init__(self, futures: list[concurrent.futures.Future[Any]]) -> None:
        self.futures = futures

    def wait(self) -> None:
        for future in self.futures:
            future.result()


def send_pieces(
    rt: DeviceRuntime,
    run_id: str,
    state: PeerState,
    rnd: int,
    phase: str,
    outgoing: dict[int, tuple[int, Any]],
) -> _Sent:
    """Send ``outgoing[j]`` to each peer ``j`` (not this device), counting the traffic."""
    # Each piece serialized once, however many peers it goes to (an all-gather's goes to all n - 1).
    wire: dict[int, tuple[Piece | None, int]] = {}  # by the piece's id
    pending = []
    for j, (samples, value) in outgoing.items():
        if j == state.index:
            continue
        if id(value) not in wire:
            wire[id(value)] = serialized(value)
        piece, nbytes = wire[id(value)]
        state.traffic["peer_bytes_sent"] += nbytes
        state.traffic["peer_messages_sent"] += 1
        args = (run_id, state.token, (rnd, phase), state.index, samples, piece, nbytes)
        sock = None if state.channels is None else rt.peer_socket(state.channels[j])
        if sock is not None:
            try:
                send_message(sock, encode((call_name(receive), args)))
            except OSError:
                rt.drop_peer_socket(state.channels[j])  # type: ignore[index]
                raise
        else:
            # No acknowledgement: a peer that is gone is found by the client.
            pending.append(rt.send_to_peer(state.addresses[j], call_name(receive), args))
    return _Sent(pending)


def collect_pieces(
    rt: DeviceRuntime, state: PeerState, rnd: int, phase: str, sources: Iterable[int]
) -> dict[int, tuple[int, Any, int]]:
    """Wait for the pieces of ``(rnd, phase)`` from every device of ``sources``: by device index."""
    try:
        pieces = state.inbox.take((rnd, phase), sources, SLICE_TIMEOUT_S)
    except RoundAbandoned as exc:
        raise RoundAbandoned(f"device {rt.device}: {exc}") from None
    state.traffic["peer_bytes_received"] += sum(nbytes for _, _, nbytes in pieces.values())
    return pieces


@device_call(needs_runtime=True, one_way=True)
def receive(
    rt: DeviceRuntime,
    run_id: str,
    token: int,
    key: tuple[int, str],
    src: int,
    samples: int,
    piece: Piece | None,
    nbytes: int = 0,
) -> str:
    """A peer's piece of ``key`` (round, phase) for this device (on its channel, or by ``PEER_OP``).

    A piece of another run, or of an older installation (its ``token``), is dropped.
    """
    state = rt.peers.get(run_id)
    if state is None or token != state.token:
        return "dropped"
    rnd, phase = key
    state.inbox.put((rnd, phase), src, (samples, None if piece is None else piece.value(), nbytes))
    return "OK"
