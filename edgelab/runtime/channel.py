"""A device's round channel: one plain TCP connection from the client to a device worker, for direct calls.

A direct call (``edgelab.runtime.fleet.Fleet.direct``) on Dask's comms goes through
msgpack framing, tornado's streams and the event loops of both processes,
and a hand-over to the client's loop thread and back. For the few large
messages of a synchronous round that machinery is most of the round: on a
2-core host, Dask's own echo of a LeNet-MLP's weights (437 KB) to two workers
took 1.85 ms, against 0.34 ms for the same bytes to another process over a
plain loopback socket, and a round's overhead beside its compute was 3.7 ms.

A channel carries those calls alone. The device's runtime listens beside its
Dask worker, on the worker's own host (TLS when the worker speaks TLS, with
the cluster's certificates); the client connects once per device and then
sends each call as one pickle (protocol 5) whose arrays travel out of band:
sent from and received into their numpy buffers, uncopied. The device answers
on a thread of its own, so neither side's event loop is involved. Dask stays
the engine: it starts, names, watches and restarts the devices, and every
other exchange uses its comms. A channel that cannot be opened (a firewall
between the client and a real board) leaves the device on Dask's comms.

Nobody else gets in. A device's channel has a random key of its own, handed
out only over Dask's comms (TLS wherever the cluster leaves the machine): to
the client in the reply that opens the channel, and by the client to the
device's peers. Every connection starts with a challenge and response
(``handshake``): the device sends a fresh nonce, the caller answers with its
own nonce and an HMAC-SHA256 of both under the key, and the device answers
with its own HMAC, so each end proves the key without sending it. The device
compares in constant time and reads no frame, so unpickles no byte, from a
caller that has not proved the key; it gives the handshake ``HANDSHAKE_S`` and
holds at most ``MAX_CONNECTIONS`` connections, each closed after
``IDLE_TIMEOUT_S`` without a message. A caller that cannot verify the device
leaves it on Dask's comms. Declared lengths are checked against
``MAX_DATA_BYTES``, ``MAX_BUFFERS`` and ``MAX_MESSAGE_BYTES`` before anything
is allocated.

Wire format of a message: ``HEAD`` (its kind, its data's length, the number
of buffers), each buffer's length (8 bytes each), the data, the buffers. The
data is a pickle whose arrays are the buffers, or, for a parameter server's
round, a few numbers (``edgelab.runtime.round_wire``: the round's lean form).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import pickle
import secrets
import select
import selectors
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from edgelab.common.wire import aligned_empty
from edgelab.runtime import round_wire

#: A message's head: its kind, its data's length and the number of buffers that follow it.
HEAD = struct.Struct("!BQI")
#: Kinds of message: a pickle (any call or reply), a round's call and reply in their lean form.
PICKLED, ROUND_CALL, ROUND_REPLY = 0, 1, 2
#: Each buffer's length.
LENGTH = struct.Struct("!Q")
#: How long connecting to a device's channel may take before the device is left on Dask's comms.
CONNECT_TIMEOUT_S = 5.0
#: A device's channel key, and each end's nonce of a handshake.
KEY_BYTES, NONCE_BYTES = 32, 16
#: What the handshake's MACs are computed over besides the nonces: the protocol and which end speaks.
_CALLER, _DEVICE = b"edgelab-channel/1 caller", b"edgelab-channel/1 device"
#: How long a caller has to prove the key after connecting.
HANDSHAKE_S = 5.0
#: Connections a device holds at once (the client and its peers); one more is closed at once.
MAX_CONNECTIONS = int(os.environ.get("EDGELAB_CHANNEL_MAX_CONNECTIONS", "64"))
#: A connection with no message for this long is closed by the device; the client opens a new one before then.
IDLE_TIMEOUT_S = float(os.environ.get("EDGELAB_CHANNEL_IDLE_S", "3600"))
#: The largest declared lengths a device accepts: a message's data, its buffers' count and all its bytes.
MAX_DATA_BYTES = 64 << 20
MAX_BUFFERS = 1 << 16
MAX_MESSAGE_BYTES = int(os.environ.get("EDGELAB_CHANNEL_MAX_BYTES", str(4 << 30)))


class ChannelClosed(ConnectionError):
    """The other end closed the channel (its process died, or it was closed) in the middle of a message."""


class ChannelRefused(ConnectionError):
    """A handshake failed: the other end did not prove the channel's key (or sent a message too large)."""


# -------------------------------------------------------------- handshake ----


def _timed_out() -> None:
    """A wait's end for a socket whose timeout is a limit (a handshake, an idle connection), not a poll."""
    raise TimeoutError("the channel's other end sent nothing in time")


def new_key() -> bytes:
    """A device channel's random key."""
    return secrets.token_bytes(KEY_BYTES)


def _mac(key: bytes, who: bytes, device_nonce: bytes, caller_nonce: bytes) -> bytes:
    return hmac.new(key, who + device_nonce + caller_nonce, hashlib.sha256).digest()


def accept_handshake(sock: socket.socket, key: bytes) -> None:
    """The device's end: challenge the caller and check its proof of ``key`` before any message is read."""
    device_nonce = secrets.token_bytes(NONCE_BYTES)
    sock.sendall(device_nonce)
    answer = bytearray(NONCE_BYTES + hashlib.sha256().digest_size)
    _recv_into(sock, memoryview(answer), _timed_out)
    caller_nonce, proof = bytes(answer[:NONCE_BYTES]), bytes(answer[NONCE_BYTES:])
    if not hmac.compare_digest(proof, _mac(key, _CALLER, device_nonce, caller_nonce)):
        raise ChannelRefused(f"{_peer(sock)} did not prove the channel's key")
    sock.sendall(_mac(key, _DEVICE, device_nonce, caller_nonce))


def offer_handshake(sock: socket.socket, key: bytes) -> None:
    """The caller's end: answer the device's challenge with a proof of ``key``, and check the device's proof."""
    device_nonce = bytearray(NONCE_BYTES)
    _recv_into(sock, memoryview(device_nonce), _timed_out)
    caller_nonce = secrets.token_bytes(NONCE_BYTES)
    sock.sendall(caller_nonce + _mac(key, _CALLER, bytes(device_nonce), caller_nonce))
    proof = bytearray(hashlib.sha256().digest_size)
    _recv_into(sock, memoryview(proof), _timed_out)
    if not hmac.compare_digest(bytes(proof), _mac(key, _DEVICE, bytes(device_nonce), caller_nonce)):
        raise ChannelRefused(f"{_peer(sock)} did not prove the channel's key")


def connect(endpoint: tuple[str, int, bytes], *, ssl_context: Any = None) -> socket.socket:
    """A connection to the channel at ``endpoint`` (host, port, key), TLS-wrapped if asked, its handshake done.

    Raises ``OSError`` (``ChannelRefused`` among them) when the device cannot be reached or verified.
    """
    host, port, key = endpoint
    sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if ssl_context is not None:
            sock = ssl_context.wrap_socket(sock, server_hostname=None)
        sock.settimeout(HANDSHAKE_S)
        offer_handshake(sock, key)
        sock.settimeout(None)
    except BaseException:
        sock.close()
        raise
    return sock


# ------------------------------------------------------------------- wire ----


def encode(value: Any) -> list[memoryview]:
    """``value`` as the views one message sends: head, lengths, pickle, then its arrays' buffers uncopied."""
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    return frame(PICKLED, data, [b.raw() for b in buffers])


def frame(kind: int, data: bytes, raws: list[memoryview]) -> list[memoryview]:
    """The views one message of ``kind`` sends: head, lengths, ``data``, then the buffers ``raws`` uncopied."""
    head = HEAD.pack(kind, len(data), len(raws)) + b"".join(LENGTH.pack(r.nbytes) for r in raws)
    return [memoryview(head), memoryview(data), *raws]


def send_message(sock: socket.socket, views: list[memoryview], check: Callable[[], None] | None = None) -> None:
    """Send every byte of ``views``; on each socket timeout ``check()`` may raise to give up."""
    pending = [v for v in views if v.nbytes]
    if not hasattr(sock, "sendmsg") or _is_tls(sock):  # TLS sockets send one buffer at a time
        for view in pending:
            _send_all(sock, view, check)
        return
    while pending:
        try:
            sent = sock.sendmsg(pending)
        except TimeoutError:
            if check is not None:
                check()
            continue
        while sent:
            first = pending[0].nbytes
            if sent >= first:
                sent -= first
                pending.pop(0)
            else:
                pending[0] = pending[0][sent:]
                sent = 0


def _send_all(sock: socket.socket, view: memoryview, check: Callable[[], None] | None) -> None:
    while view.nbytes:
        try:
            view = view[sock.send(view) :]
        except TimeoutError:
            if check is not None:
                check()


def _is_tls(sock: socket.socket) -> bool:
    return isinstance(sock, ssl.SSLSocket)


def _recv_into(sock: socket.socket, view: memoryview, check: Callable[[], None] | None) -> None:
    got = 0
    while got < view.nbytes:
        try:
            n = sock.recv_into(view[got:])
        except TimeoutError:
            if check is not None:
                check()
            continue
        if n == 0:
            raise ChannelClosed(f"the channel to {_peer(sock)} closed after {got} of {view.nbytes} bytes")
        got += n


def receive_message(sock: socket.socket, check: Callable[[], None] | None = None) -> Any:
    """The next message on ``sock``, a pickle, its arrays views of buffers received straight into numpy memory."""
    kind, data, buffers = receive_frame(sock, check)
    if kind != PICKLED:
        raise ValueError(f"expected a pickled message on the channel to {_peer(sock)}, got one of kind {kind}")
    return pickle.loads(data, buffers=buffers)


def receive_frame(
    sock: socket.socket, check: Callable[[], None] | None = None
) -> tuple[int, bytearray, list[np.ndarray]]:
    """The next message on ``sock`` as it came: its kind, its data and its buffers (uint8, each freshly allocated)."""
    head = bytearray(HEAD.size)
    _recv_into(sock, memoryview(head), check)
    kind, size, count = HEAD.unpack(head)
    if size > MAX_DATA_BYTES or count > MAX_BUFFERS:
        raise ChannelRefused(
            f"{_peer(sock)} declared {size:,} bytes of data and {count:,} buffers; "
            f"at most {MAX_DATA_BYTES:,} and {MAX_BUFFERS:,} are accepted"
        )
    lengths = bytearray(LENGTH.size * count)
    _recv_into(sock, memoryview(lengths), check)
    total = size + sum(length for (length,) in LENGTH.iter_unpack(lengths))
    if total > MAX_MESSAGE_BYTES:
        raise ChannelRefused(f"{_peer(sock)} declared a message of {total:,} bytes; at most {MAX_MESSAGE_BYTES:,}")
    data = bytearray(size)
    _recv_into(sock, memoryview(data), check)
    buffers = []
    for (length,) in LENGTH.iter_unpack(lengths):
        # Not zeroed: every byte is received into it. Aligned: a device's step takes the weights uncopied.
        buffer = aligned_empty(length, np.uint8)
        _recv_into(sock, memoryview(buffer), check)
        buffers.append(buffer)
    return kind, data, buffers


def _peer(sock: socket.socket) -> str:
    try:
        name = sock.getpeername()
    except OSError:
        return "a closed peer"
    return f"{name[0]}:{name[1]}" if isinstance(name, tuple) else repr(name)


# ------------------------------------------------------------- on a device ----


class ChannelServer:
    """A device's end: listens on ``host`` and answers each verified connection's calls on a thread of its own.

    Parameters
    ----------
    host
        The address to listen on: the device worker's own host, never every interface.
    handle
        ``handle(fn, args)`` runs one call and returns the reply to send, or None for none (it must not raise).
    ssl_context
        The worker's server-side TLS context when the cluster speaks TLS.
    key
        The channel's key (default: a new random one); callers prove it before anything they send is read.
    """

    def __init__(
        self,
        host: str,
        handle: Callable[[str, tuple[Any, ...]], Any | None],
        *,
        ssl_context: Any = None,
        key: bytes | None = None,
    ) -> None:
        self._listener = socket.create_server((host, 0), family=_family(host))
        self.address: tuple[str, int] = (host, self._listener.getsockname()[1])
        self.key = key if key is not None else new_key()
        self._handle, self._ssl = handle, ssl_context
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        #: calls answered so far, and connections refused (no TLS certificate of the cluster's CA, no proof of
        #: the key, too many, a message too large)
        self.calls = 0
        self.refused = 0
        threading.Thread(target=self._accept, name="edgelab-channel", daemon=True).start()

    @property
    def endpoint(self) -> tuple[str, int, bytes]:
        """Where to connect and the key to prove: what the client and the device's peers are given."""
        return (*self.address, self.key)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:  # closed
                return
            if not self._slots.acquire(blocking=False):
                self.refused += 1  # one more than it may hold: no thread, nothing read
                conn.close()
                continue
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._serve, args=(conn,), name="edgelab-channel-call", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(HANDSHAKE_S)
            if self._ssl is not None:
                try:
                    conn = self._ssl.wrap_socket(conn, server_side=True)
                except ssl.SSLError as exc:  # not TLS, or no certificate of the cluster's CA
                    raise ChannelRefused(f"TLS handshake failed: {exc.reason}") from exc
            accept_handshake(conn, self.key)
            conn.settimeout(IDLE_TIMEOUT_S)
            with self._lock:
                self._connections.add(conn)
            plans: dict[int, Any] = {}  # the round plans this connection sent (edgelab.runtime.round_wire)
            while True:
                kind, data, buffers = receive_frame(conn, _timed_out)
                if kind == ROUND_CALL:
                    try:
                        fn, args = round_wire.ROUND_FN, round_wire.decode_call(data, buffers, plans)
                    except Exception as exc:  # a plan never sent: a bug, said to the caller
                        send_message(conn, encode({"status": "error", "exception": exc}))
                        continue
                else:
                    fn, args = pickle.loads(data, buffers=buffers)
                reply = self._handle(fn, args)
                self.calls += 1
                if reply is None:  # a one-way message (a peer's piece)
                    continue
                lean = round_wire.encode_reply(reply, args[1].layout) if kind == ROUND_CALL else None
                send_message(conn, frame(ROUND_REPLY, *lean) if lean is not None else _pickled_reply(fn, reply))
        except ChannelRefused:  # no proof of the key, or a message larger than allowed: nothing of it ran
            self.refused += 1
        except (OSError, EOFError):  # the client closed the channel, went away, or stayed idle too long
            pass
        finally:
            with self._lock:
                self._connections.discard(conn)
            conn.close()
            self._slots.release()

    def close(self) -> None:
        """Stop listening and close every open channel."""
        self._listener.close()
        with self._lock:
            for conn in list(self._connections):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)


def _pickled_reply(fn: str, reply: Any) -> list[memoryview]:
    try:
        return encode(reply)
    except Exception as exc:  # an unpicklable result or error: say so rather than drop the channel
        error = RuntimeError(f"the reply to {fn} could not be pickled: {exc!r}")
        return encode({"status": "error", "exception": error})


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


# ------------------------------------------------------------- the client ----


class Channels:
    """The client's open channels, one per device worker address, opened on first use.

    Parameters
    ----------
    open_remote
        ``open_remote(address)`` asks the worker at ``address`` (on Dask's
        comms) to listen, and returns the host and port of its channel.
    ssl_context
        The client's TLS context when the cluster speaks TLS.
    """

    def __init__(self, open_remote: Callable[[str], tuple[str, int, bytes]], *, ssl_context: Any = None) -> None:
        self._open_remote, self._ssl = open_remote, ssl_context
        self._socks: dict[str, socket.socket] = {}
        self._unreachable: set[str] = set()
        # When each channel last carried a call: one idle for half the device's timeout is opened again first.
        self._used: dict[str, float] = {}
        # The round plans each open channel has been sent (edgelab.runtime.round_wire), their keys numbered in order.
        self._plans: dict[str, list[Any]] = {}
        #: where each worker address's channel listens and its key, once opened
        self.endpoints: dict[str, tuple[str, int, bytes]] = {}

    def reachable(self, addresses: list[str]) -> bool:
        """Whether every one of ``addresses`` has a channel open (opening those that have none yet)."""
        return all(self._connect(a) is not None for a in addresses)

    def _connect(self, address: str) -> socket.socket | None:
        if address in self._socks:
            if time.monotonic() - self._used[address] < IDLE_TIMEOUT_S / 2:
                return self._socks[address]
            self._drop(address)  # the device may close it as idle any time now: a new one, before it does
        if address in self._unreachable:
            return None
        endpoint = self._open_remote(address)  # a worker that is gone raises: the caller's recovery finds it
        try:
            sock = connect(endpoint, ssl_context=self._ssl)
        except OSError:
            # Not reachable from here (a firewall in front of a real board), or not verified: Dask's comms carry
            # its calls.
            self._unreachable.add(address)
            return None
        self._socks[address] = sock
        self._used[address] = time.monotonic()
        self.endpoints[address] = endpoint
        return sock

    def call_all(
        self,
        calls: Mapping[str, tuple[str, str, tuple[Any, ...]]],
        *,
        check: Callable[[], None],
        poll_s: float,
        failed: Callable[[Any], bool] = lambda reply: False,
        on_reply: Callable[[str, Any], None] | None = None,
        after_send: Callable[[], None] | None = None,
    ) -> dict[str, Any]:
        """Send every call, then read every reply: ``{key: (address, fn, args)}`` -> ``{key: reply}``.

        ``check()`` runs whenever a socket waits ``poll_s`` and may raise to
        give the calls up. ``on_reply(key, reply)`` runs on each reply that is
        not ``failed`` as soon as it is read, while the others are still on
        their way; ``after_send()`` once every call went out, before any
        reply is read. A reply that is ``failed`` ends the wait at once:
        only it is returned (its peers may be waiting for the failed device).
        Any error leaves the channels of these calls closed (a reply still on
        its way would otherwise be read as the next one's), and so does a
        failed reply; they are opened again on their next use.
        """
        socks = {}
        now = time.monotonic()
        for key, (address, _, _) in calls.items():
            sock = self._connect(address)  # open again if an earlier error closed it
            if sock is None:
                raise ConnectionError(f"no channel to {address}: ask reachable() first")
            socks[key] = sock
            self._used[address] = now
        try:
            leans = {}  # the calls sent in the lean form: what their replies are decoded with
            for key, (address, fn, args) in calls.items():
                sock = socks[key]
                sock.settimeout(poll_s)
                views, leans[key] = self._encode(address, fn, args)
                send_message(sock, views, check)
            if after_send is not None:
                after_send()
            replies = _receive_all(socks, check, poll_s, failed, on_reply, leans)
            if len(replies) < len(calls):  # one failed: the others' replies are left unread
                self._drop_all(calls)
                return replies
            return {key: replies[key] for key in calls}
        except BaseException:
            self._drop_all(calls)
            raise

    def _encode(self, address: str, fn: str, args: tuple[Any, ...]) -> tuple[list[memoryview], Any]:
        """A call's message: a round in its lean form where it can go so (and the task and layout of its reply)."""
        key = round_wire.plan_key(*args) if fn == round_wire.ROUND_FN and len(args) == 2 else None
        if key is None:
            return encode((fn, args)), None
        plans = self._plans.setdefault(address, [])
        new = key not in plans  # a few plans at most: compared with ==, element by element, often by identity
        if new:
            plans.append(key)
        plan = len(plans) - 1 if new else plans.index(key)
        task, weights = args
        return frame(ROUND_CALL, *round_wire.encode_call(plan, new, task, weights)), (task, weights.flat()[0])

    def closed_by_peer(self) -> list[str]:
        """The addresses whose channel the other end closed (its process died): read without waiting.

        A hint for whoever looks for the devices lost with one that failed; a
        TLS channel, which cannot be peeked at, never shows here.
        """
        closed = []
        for address, sock in self._socks.items():
            if _is_tls(sock):
                continue
            try:
                readable, _, _ = select.select([sock], [], [], 0)
                if readable and not sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT):
                    closed.append(address)
            except (OSError, ValueError):  # reset by the peer, or closed here
                closed.append(address)
        return closed

    def _drop_all(self, calls: Mapping[str, tuple[str, str, tuple[Any, ...]]]) -> None:
        for address, _, _ in calls.values():
            self._drop(address)

    def _drop(self, address: str) -> None:
        sock = self._socks.pop(address, None)
        self._used.pop(address, None)
        self._plans.pop(address, None)  # a channel opened again starts with no plans, at both ends
        if sock is not None:
            sock.close()

    def close(self) -> None:
        """Close every channel."""
        for address in list(self._socks):
            self._drop(address)


def _receive_all(
    socks: dict[str, socket.socket],
    check: Callable[[], None],
    poll_s: float,
    failed: Callable[[Any], bool],
    on_reply: Callable[[str, Any], None] | None = None,
    leans: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A reply from every socket, read as they come: a device that died is seen at once, not in its turn.

    Stops at the first ``failed`` reply. ``leans[key]``: the task and layout
    that decode a lean reply to a round call (``edgelab.runtime.round_wire``).
    """
    replies = {}
    with selectors.DefaultSelector() as selector:
        for key, sock in socks.items():
            selector.register(sock, selectors.EVENT_READ, key)
        while len(replies) < len(socks):
            ready = selector.select(poll_s)
            if not ready:
                check()
            for selected, _ in ready:
                reply = replies[selected.data] = _receive_reply(
                    socks[selected.data], check, (leans or {}).get(selected.data)
                )
                if failed(reply):
                    return {selected.data: reply}
                selector.unregister(selected.fileobj)
                if on_reply is not None:
                    on_reply(selected.data, reply)
    return replies


def _receive_reply(sock: socket.socket, check: Callable[[], None], lean: tuple[Any, Any] | None) -> Any:
    """The next reply on ``sock``: a pickle, or a round's lean reply decoded with ``lean`` (its task and layout)."""
    kind, data, buffers = receive_frame(sock, check)
    if kind == PICKLED:
        return pickle.loads(data, buffers=buffers)
    if kind == ROUND_REPLY and lean is not None:
        return round_wire.decode_reply(data, buffers, *lean)
    raise ValueError(f"a reply of kind {kind} on the channel to {_peer(sock)} answers no lean call")
