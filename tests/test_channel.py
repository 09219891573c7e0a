"""The round channel: calls and their arrays over a plain socket, and the run they carry equal to Dask's comms'.

Unit tests run a ``ChannelServer`` and ``Channels`` in this process over
loopback; the integration tests run real rounds on a two-device cluster
(tests/conftest.py), with and without channels (``EDGELAB_CHANNELS=0``).
"""

from __future__ import annotations

import gc
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask.config as dask_config
import numpy as np
import pytest

from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.cluster.tls import make_certificates
from edgelab.common.wire import Flat, Packed
from edgelab.data import Dataset
from edgelab.runtime import channel
from edgelab.runtime.channel import (
    ChannelClosed,
    ChannelRefused,
    Channels,
    ChannelServer,
    encode,
    receive_frame,
    receive_message,
    send_message,
)
from edgelab.runtime.devices import connect
from edgelab.runtime.fleet import CHANNELS_ENV
from edgelab.runtime.protocol import PLUGIN_NAME
from edgelab.training.data_parallel import TrainConfig, train


def _echo_back(value: Any) -> Any:
    a, b = socket.socketpair()
    with a, b:
        sender = threading.Thread(target=send_message, args=(a, encode(value)))
        sender.start()
        got = receive_message(b)
        sender.join()
    return got


def test_arrays_arrive_equal_with_their_dtype_and_shape_and_packed_weights_as_the_list() -> None:
    # Prepare: contiguous arrays go out of band, a strided view and a scalar in the pickle
    rng = np.random.default_rng(0)
    weights = [rng.standard_normal((784, 128)).astype(np.float32), np.arange(10, dtype=np.int64)]
    value = {
        "weights": Packed(weights),
        "strided": np.arange(12.0).reshape(3, 4)[:, ::2],
        "empty": np.zeros((0, 3), np.float32),
        "fortran": np.asfortranarray(np.arange(6, dtype=np.int16).reshape(2, 3)),
        "note": "round 3",
    }

    # Execute
    got = _echo_back(value)

    # Assert
    assert isinstance(got["weights"], Flat) and len(got["weights"]) == 2
    for sent, back in zip(weights, got["weights"], strict=True):
        assert back.dtype == sent.dtype and back.shape == sent.shape
        np.testing.assert_array_equal(back, sent)
    for key in ("strided", "empty", "fortran"):
        assert got[key].dtype == value[key].dtype
        np.testing.assert_array_equal(got[key], value[key])
    assert got["note"] == "round 3"
    assert got["weights"][0].flags.writeable  # received into memory of its own, not a read-only view


def test_the_arrays_buffers_travel_uncopied_out_of_the_pickle() -> None:
    # A LeNet-MLP's weights: the pickle itself stays small, the 437 KB go as one buffer per dtype
    weights = [np.ones((784, 128), np.float32), np.ones(128, np.float32), np.ones((128, 10), np.float32)]

    views = encode(Packed(weights))

    assert len(views) == 3  # head with the buffer's length, pickle, one buffer
    assert views[1].nbytes < 1000
    assert views[2].nbytes == sum(w.nbytes for w in weights)


def test_a_message_larger_than_the_socket_buffers_arrives_whole() -> None:
    # Prepare: 20 MB through buffers of a few KB: many partial sends and receives
    big = np.random.default_rng(1).integers(0, 255, 20_000_000, dtype=np.uint8)
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)

    # Execute
    with a, b:
        sender = threading.Thread(target=send_message, args=(a, encode([big, big[::-1].copy()])))
        sender.start()
        got = receive_message(b)
        sender.join()

    # Assert
    np.testing.assert_array_equal(got[0], big)
    np.testing.assert_array_equal(got[1], big[::-1])


def test_a_peer_that_closes_mid_message_is_a_closed_channel() -> None:
    a, b = socket.socketpair()
    with b:
        views = encode(np.zeros(1000, np.float64))
        a.sendall(b"".join(bytes(v) for v in views)[:500])  # half the message, then the peer dies
        a.close()

        with pytest.raises(ChannelClosed, match="closed after"):
            receive_message(b)


_GATE = threading.Event()


def _handle(fn: str, args: tuple[Any, ...]) -> dict[str, Any]:
    if fn == "double":
        return {"status": "OK", "result": [2 * a for a in args[0]]}
    if fn == "sleep":
        time.sleep(args[0])
        return {"status": "OK", "result": args[0]}
    if fn == "wait_for_gate":  # answers whether the client opened the gate while the call waited
        return {"status": "OK", "result": _GATE.wait(args[0])}
    if fn == "unpicklable":
        return {"status": "OK", "result": threading.Lock()}
    return {"status": "error", "exception": ValueError(f"no {fn}")}


@pytest.fixture
def servers() -> Iterator[dict[str, ChannelServer]]:
    made = {f"tcp://127.0.0.1:{9000 + i}": ChannelServer("127.0.0.1", _handle) for i in range(3)}
    yield made
    for server in made.values():
        server.close()


def _channels(servers: dict[str, ChannelServer]) -> Channels:
    return Channels(lambda address: servers[address].endpoint)


def test_calls_on_several_channels_come_back_in_order_each_with_its_own_reply(
    servers: dict[str, ChannelServer],
) -> None:
    # Prepare
    channels = _channels(servers)
    addresses = list(servers)
    assert channels.reachable(addresses)
    calls = {f"d{i}": (a, "double", ([np.full(3, i, np.float32)],)) for i, a in enumerate(addresses)}

    # Execute: twice, over the same connections
    first = channels.call_all(calls, check=lambda: None, poll_s=0.5)
    again = channels.call_all(calls, check=lambda: None, poll_s=0.5)

    # Assert
    assert list(first) == ["d0", "d1", "d2"]
    for i, reply in enumerate(first.values()):
        np.testing.assert_array_equal(reply["result"][0], np.full(3, 2 * i, np.float32))
    assert [r["result"][0][0] for r in again.values()] == [0, 2, 4]
    channels.close()


def test_each_reply_is_handed_over_as_it_arrives_while_slower_ones_are_still_on_their_way(
    servers: dict[str, ChannelServer],
) -> None:
    # Prepare: one device answers at once, one after 0.5 s, one with an error after 0.8 s
    channels = _channels(servers)
    fast, slow, failing = list(servers)
    assert channels.reachable([fast, slow, failing])
    handed: list[tuple[str, float]] = []
    start = time.monotonic()

    # Execute
    replies = channels.call_all(
        {"fast": (fast, "sleep", (0.0,)), "slow": (slow, "sleep", (0.5,))},
        check=lambda: None,
        poll_s=0.05,
        on_reply=lambda key, reply: handed.append((key, time.monotonic() - start)),
    )
    failed = channels.call_all(
        {"ok": (fast, "sleep", (0.0,)), "bad": (failing, "no_such", ())},
        check=lambda: None,
        poll_s=0.05,
        failed=lambda reply: reply["status"] != "OK",
        on_reply=lambda key, reply: handed.append((key, -1.0)),
    )

    # Assert: the fast reply was handed over long before the slow one came; a failed reply never is
    assert [key for key, _ in handed[:2]] == ["fast", "slow"]
    assert handed[0][1] < 0.25 <= 0.5 <= handed[1][1]
    assert list(replies) == ["fast", "slow"]
    assert "bad" in failed and all(key != "bad" for key, _ in handed)
    channels.close()


def test_after_send_runs_once_every_call_went_out_while_the_devices_still_work(
    servers: dict[str, ChannelServer],
) -> None:
    # Prepare: each device waits up to 5 s for a gate only the client's after_send opens
    channels = _channels(servers)
    addresses = list(servers)
    assert channels.reachable(addresses)
    _GATE.clear()
    ran: list[int] = []

    def after_send() -> None:
        ran.append(len(ran))
        _GATE.set()

    # Execute
    start = time.monotonic()
    replies = channels.call_all(
        {f"d{i}": (a, "wait_for_gate", (5.0,)) for i, a in enumerate(addresses)},
        check=lambda: None,
        poll_s=0.05,
        after_send=after_send,
    )

    # Assert: it ran once, before the replies were waited for (else every device would have given up)
    assert ran == [0]
    assert [reply["result"] for reply in replies.values()] == [True, True, True]
    assert time.monotonic() - start < 4.0
    channels.close()


def test_an_error_and_an_unpicklable_reply_come_back_as_values_and_the_channel_stays_open(
    servers: dict[str, ChannelServer],
) -> None:
    channels = _channels(servers)
    address = next(iter(servers))
    assert channels.reachable([address])

    replies = channels.call_all(
        {"bad": (address, "no_such", ())},
        check=lambda: None,
        poll_s=0.5,
    )
    assert replies["bad"]["status"] == "error" and "no no_such" in str(replies["bad"]["exception"])
    replies = channels.call_all({"lock": (address, "unpicklable", ())}, check=lambda: None, poll_s=0.5)
    assert replies["lock"]["status"] == "error" and "could not be pickled" in str(replies["lock"]["exception"])
    # the same connection still answers
    assert channels.call_all({"ok": (address, "double", ([1],))}, check=lambda: None, poll_s=0.5)["ok"]["result"] == [2]
    channels.close()


def test_a_wait_checks_on_every_poll_and_its_error_ends_the_calls_with_their_channels_closed(
    servers: dict[str, ChannelServer],
) -> None:
    # Prepare: a device that takes 1 s; the check gives up at its third poll
    channels = _channels(servers)
    address = next(iter(servers))
    assert channels.reachable([address])
    polls: list[float] = []

    def check() -> None:
        polls.append(time.monotonic())
        if len(polls) == 3:
            raise TimeoutError("given up")

    # Execute
    with pytest.raises(TimeoutError, match="given up"):
        channels.call_all({"slow": (address, "sleep", (1.0,))}, check=check, poll_s=0.05)

    # Assert: the late reply of the call given up is never read as the next call's
    assert len(polls) == 3
    time.sleep(1.1)
    reply = channels.call_all({"next": (address, "double", ([5],))}, check=lambda: None, poll_s=0.5)
    assert reply["next"]["result"] == [10]
    channels.close()


def test_a_device_gone_mid_call_is_a_closed_channel(servers: dict[str, ChannelServer]) -> None:
    channels = _channels(servers)
    address = next(iter(servers))
    assert channels.reachable([address])
    threading.Timer(0.2, servers[address].close).start()

    with pytest.raises(ChannelClosed):
        channels.call_all({"slow": (address, "sleep", (0.5,))}, check=lambda: None, poll_s=0.05)


def test_a_channel_its_device_closed_shows_without_a_wait(servers: dict[str, ChannelServer]) -> None:
    # A device that died closes its end: the fleet looks for the others lost with a first one this way
    channels = _channels(servers)
    first, second, third = servers
    assert channels.reachable([first, second, third])
    time.sleep(0.1)  # each server took its connection

    servers[second].close()
    time.sleep(0.1)

    assert channels.closed_by_peer() == [second]
    channels.close()


def test_a_channel_that_cannot_be_reached_leaves_the_device_on_dasks_comms() -> None:
    # The worker says where it listens, but nothing is there (a firewall in front of a real board)
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    channels = Channels(lambda address: ("127.0.0.1", port, channel.new_key()))

    assert not channels.reachable(["tcp://board:1234"])
    assert not channels.reachable(["tcp://board:1234"])  # remembered, not tried again


def test_a_server_listens_on_its_host_only() -> None:
    # Safe by default: a device on 127.0.0.1 is not reachable at another address of this machine
    server = ChannelServer("127.0.0.1", _handle)
    try:
        assert server.address[0] == "127.0.0.1"
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.2", server.address[1]), timeout=2).close()
    finally:
        server.close()


# ------------------------------------------------------------- attacks ----


class _CreatesFile:
    """A pickle that, loaded, creates a file: what an attacker would send to run code on a device."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (open, (self.path, "w"))


def _attack(path: Path) -> bytes:
    """One whole frame whose pickle, if loaded, creates ``path``."""
    return b"".join(bytes(v) for v in encode(("double", (_CreatesFile(path),))))


def _closed_by_server(sock: socket.socket, timeout_s: float = 10.0) -> bool:
    """Whether the other end closes ``sock`` (reading and dropping what it sends first) within ``timeout_s``."""
    sock.settimeout(timeout_s)
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    return True


@pytest.fixture
def server() -> Iterator[ChannelServer]:
    made = ChannelServer("127.0.0.1", _handle)
    yield made
    made.close()


def _wait_for(condition: Any, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_a_frame_from_a_caller_that_did_not_prove_the_key_runs_nothing(server: ChannelServer, tmp_path: Path) -> None:
    # Prepare: a frame whose pickle would create a file, sent without a handshake
    target = tmp_path / "created-by-the-attacker"

    # Execute
    with socket.create_connection(server.address, timeout=10) as sock:
        sock.sendall(_attack(target))
        assert _closed_by_server(sock)

    # Assert: refused, nothing unpickled, nothing called
    assert _wait_for(lambda: server.refused == 1)
    assert not target.exists()
    assert server.calls == 0


def test_a_caller_with_another_key_is_refused_and_runs_nothing(server: ChannelServer, tmp_path: Path) -> None:
    # Prepare: a caller that knows the address but not the key
    target = tmp_path / "created-by-the-attacker"
    host, port = server.address

    # Execute: its handshake fails; even if it sends its frame after, nothing runs
    with pytest.raises(OSError):
        channel.connect((host, port, channel.new_key()))
    with socket.create_connection(server.address, timeout=10) as sock:
        sock.recv(channel.NONCE_BYTES)
        sock.sendall(bytes(channel.NONCE_BYTES) + bytes(32) + _attack(target))
        assert _closed_by_server(sock)

    # Assert
    assert _wait_for(lambda: server.refused == 2)
    assert not target.exists() and server.calls == 0


def test_a_caller_that_proves_the_key_is_served(server: ChannelServer) -> None:
    with channel.connect(server.endpoint) as sock:
        send_message(sock, encode(("double", ([1, 2],))))
        assert receive_message(sock) == {"status": "OK", "result": [2, 4]}
    assert server.refused == 0


def test_a_device_that_cannot_prove_the_key_is_not_used(tmp_path: Path) -> None:
    # Prepare: something listens where the device said, answers the challenge, but does not know the key
    listener = socket.create_server(("127.0.0.1", 0))

    def impostor() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.sendall(bytes(channel.NONCE_BYTES))
            conn.recv(channel.NONCE_BYTES + 32)
            conn.sendall(bytes(32))  # a proof it cannot compute
            time.sleep(1)

    threading.Thread(target=impostor, daemon=True).start()
    endpoint = ("127.0.0.1", listener.getsockname()[1], channel.new_key())

    # Execute / Assert: the caller refuses it, and the client leaves the device on Dask's comms
    with pytest.raises(ChannelRefused, match="did not prove"):
        channel.connect(endpoint)
    listener.close()


def test_an_oversized_declared_length_is_refused_before_anything_is_allocated() -> None:
    import tracemalloc

    # Prepare: heads declaring 2**60 bytes of data, 2**20 buffers, and two buffers of 2**40 bytes each
    lies = [
        channel.HEAD.pack(channel.PICKLED, 1 << 60, 0),
        channel.HEAD.pack(channel.PICKLED, 8, 1 << 20),
        channel.HEAD.pack(channel.PICKLED, 8, 2) + channel.LENGTH.pack(1 << 40) * 2,
    ]
    for lie in lies:
        a, b = socket.socketpair()
        with a, b:
            a.sendall(lie)
            tracemalloc.start()
            try:
                # Execute
                with pytest.raises(ChannelRefused, match="at most"):
                    receive_frame(b)
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            # Assert: nothing near the declared size was allocated
            assert peak < 1 << 20


def test_an_authenticated_caller_declaring_too_much_is_cut_off(server: ChannelServer) -> None:
    with channel.connect(server.endpoint) as sock:
        sock.sendall(channel.HEAD.pack(channel.PICKLED, 1 << 60, 0))
        assert _closed_by_server(sock)
    assert _wait_for(lambda: server.refused == 1)
    assert server.calls == 0


def test_a_device_holds_a_bounded_number_of_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare: a device that holds two connections at most
    monkeypatch.setattr(channel, "MAX_CONNECTIONS", 2)
    server = ChannelServer("127.0.0.1", _handle)
    try:
        held = [channel.connect(server.endpoint) for _ in range(2)]

        # Execute: a third is closed at once, before any byte is exchanged
        with socket.create_connection(server.address, timeout=10) as third:
            assert _closed_by_server(third)
        assert _wait_for(lambda: server.refused == 1)

        # Assert: a slot freed is a slot taken again
        held.pop().close()
        time.sleep(0.2)
        with channel.connect(server.endpoint) as again:
            send_message(again, encode(("double", ([3],))))
            assert receive_message(again)["result"] == [6]
        for sock in held:
            sock.close()
    finally:
        server.close()


def test_a_caller_that_never_answers_the_challenge_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare: a device that gives the handshake a fifth of a second
    monkeypatch.setattr(channel, "HANDSHAKE_S", 0.2)
    server = ChannelServer("127.0.0.1", _handle)
    try:
        # Execute: connect and say nothing
        with socket.create_connection(server.address, timeout=10) as sock:
            start = time.monotonic()
            assert _closed_by_server(sock)
            waited = time.monotonic() - start

        # Assert: closed by the device after the handshake's time, well before the read's own 10 s
        assert waited < 5
    finally:
        server.close()


def test_an_idle_channel_is_closed_by_the_device_and_the_client_opens_a_new_one_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Prepare: a device that closes a connection idle for 0.6 s
    monkeypatch.setattr(channel, "IDLE_TIMEOUT_S", 0.6)
    server = ChannelServer("127.0.0.1", _handle)
    channels = Channels(lambda address: server.endpoint)
    try:
        # Execute / Assert: an idle raw connection is closed by the device
        with channel.connect(server.endpoint) as idle:
            assert _closed_by_server(idle)
        # The client's channel, idle for more than half the timeout, is opened again before the next call
        assert channels.reachable(["tcp://d:1"])
        calls = {"d": ("tcp://d:1", "double", ([1],))}
        assert channels.call_all(calls, check=lambda: None, poll_s=0.05)["d"]["result"] == [2]
        time.sleep(0.4)
        assert channels.call_all(calls, check=lambda: None, poll_s=0.05)["d"]["result"] == [2]
    finally:
        channels.close()
        server.close()


def test_a_forged_piece_for_another_run_or_installation_is_dropped() -> None:
    from types import SimpleNamespace

    from edgelab.peer.messages import receive
    from edgelab.peer.state import Inbox

    # Prepare: a device in run "r1", installation token 7
    inbox = Inbox()
    rt = SimpleNamespace(peers={"r1": SimpleNamespace(token=7, inbox=inbox)})

    # Execute: a piece for another run, one with a wrong token, then the real one
    other_run = receive(rt, "r2", 7, (0, "reduce"), 1, 10, None)  # type: ignore[arg-type]
    wrong_token = receive(rt, "r1", 8, (0, "reduce"), 1, 10, None)  # type: ignore[arg-type]
    real = receive(rt, "r1", 7, (0, "reduce"), 1, 10, None)  # type: ignore[arg-type]

    # Assert: only the real one is taken
    assert (other_run, wrong_token, real) == ("dropped", "dropped", "OK")
    assert inbox.take((0, "reduce"), [1], 1.0) == {1: (10, None, 0)}


# ------------------------------------------------------------- on a cluster ----


def _channel_state(dask_worker: Any) -> tuple[tuple[str, int], int] | None:
    """Where the device's channel listens and how many calls it answered (None: never opened)."""
    channel = dask_worker.plugins[PLUGIN_NAME].channel
    return None if channel is None else (channel.address, channel.calls)


def _open_channel(dask_worker: Any) -> tuple[str, int, bytes]:
    return dask_worker.plugins[PLUGIN_NAME].open_channel()


def _refused(dask_worker: Any) -> int:
    return dask_worker.plugins[PLUGIN_NAME].channel.refused


@pytest.mark.integration
def test_on_the_embedded_cluster_a_frame_without_the_key_runs_nothing_on_any_device(
    cluster: DeviceCluster, tmp_path: Path
) -> None:
    # Prepare: every device's channel open, as a run opens it; the attacker knows where they listen, not the keys
    endpoints = cluster.client.run(_open_channel)
    before = cluster.client.run(_refused)

    # Execute: to each device, a frame whose pickle would create a file on it
    targets = []
    for i, (host, port, _) in enumerate(endpoints.values()):
        targets.append(tmp_path / f"created-on-device-{i}")
        with socket.create_connection((host, port), timeout=10) as sock:
            sock.sendall(_attack(targets[-1]))
            assert _closed_by_server(sock)

    # Assert: no device created its file, and each counted the refusal
    assert not any(t.exists() for t in targets)
    assert _wait_for(lambda: all(cluster.client.run(_refused)[w] == before[w] + 1 for w in endpoints))


@pytest.mark.integration
@pytest.mark.parametrize(
    ("transport", "compressor"),
    [("direct", "none"), ("allreduce", "none"), ("allreduce", "topk:0.1"), ("tree", "none")],
)
def test_rounds_on_channels_equal_rounds_on_dasks_comms_bit_for_bit(
    cluster: DeviceCluster, dataset: Dataset, monkeypatch: pytest.MonkeyPatch, transport: str, compressor: str
) -> None:
    # Prepare: momentum, uneven shards (the last round trains one device), an evaluation every 3 rounds
    cfg = TrainConfig(
        model="mlp",
        n_devices=2,
        worker_data="shard",
        batch_size=25,
        momentum=0.9,
        eval_every=3,
        compressor=compressor,
    )
    data = dataset.limited(sample_limit=251)

    # Execute: on channels (the client's calls, and the peers' pieces under all-reduce), then on Dask's comms
    before = {w: (s or (None, 0))[1] for w, s in cluster.client.run(_channel_state).items()}
    on_channels = train(cluster, data, cfg, transport=transport, log=lambda _: None)
    carried = {w: s[1] - before[w] for w, s in cluster.client.run(_channel_state).items()}
    monkeypatch.setenv(CHANNELS_ENV, "0")
    on_dask = train(cluster, data, cfg, transport=transport, log=lambda _: None)

    # Assert: every round came on the channels (with its peers' pieces), and the runs are the same
    assert min(carried.values()) > 0 and sum(carried.values()) >= len(on_channels.records)
    assert on_channels.weights_sha256 == on_dask.weights_sha256
    columns = ["round", "device", "samples", "bytes_received", "bytes_sent", "loss"]
    if transport != "direct":
        columns += ["peer_bytes_sent", "peer_bytes_received", "peer_messages_sent"]
    assert on_channels.records[columns].equals(on_dask.records[columns])
    assert on_channels.progress.equals(on_dask.progress)


def _open_connections(dask_worker: Any) -> int:
    channel = dask_worker.plugins[PLUGIN_NAME].channel
    return 0 if channel is None else len(channel._connections)


@pytest.mark.integration
def test_a_finished_run_leaves_no_channel_open_on_its_devices(cluster: DeviceCluster, dataset: Dataset) -> None:
    # Prepare: no cycle collection meanwhile (a run and its fleet hold each other: only the collector frees them);
    # what is open after one run (the peers' connections of earlier all-reduce runs stay, by design) is the mark
    cfg = TrainConfig(model="mlp", n_devices=2, worker_data="shard", batch_size=25)
    data = dataset.limited(sample_limit=100)
    gc.disable()
    try:
        train(cluster, data, cfg, log=lambda _: None)
        time.sleep(0.5)  # the devices' ends see the close
        mark = sum(cluster.client.run(_open_connections).values())
        before = cluster.client.run(_channel_state)

        # Execute: two more runs, each opening a channel to every device
        for _ in range(2):
            train(cluster, data, cfg, log=lambda _: None)

        # Assert: the runs came on channels, and each device's end of them closed once its run ended
        after = cluster.client.run(_channel_state)
        assert all(after[w][1] > before[w][1] for w in after)
        assert _wait_for(lambda: sum(cluster.client.run(_open_connections).values()) <= mark)
    finally:
        gc.enable()


@pytest.mark.integration
def test_on_a_tls_cluster_the_channel_speaks_tls_only_and_carries_the_same_run(
    tmp_path: Path, dataset: Dataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: a scheduler and two device workers that speak TLS only, with the cluster's own CA
    certificates = make_certificates(tmp_path / "certificates", ["127.0.0.1"])
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    address = f"tls://127.0.0.1:{port}"
    env = {**os.environ, "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}
    dask = str(Path(sys.executable).parent / "dask")
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "env": env}
    processes = [
        subprocess.Popen(
            [dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--dashboard-address", "127.0.0.1:0"]
            + certificates.dask_arguments("scheduler"),
            **quiet,
        )
    ]
    processes += [
        subprocess.Popen(
            [dask, "worker", address, "--name", f"board-{i}", "--nthreads", "1", "--host", "127.0.0.1"]
            + ["--no-nanny", "--no-dashboard", *certificates.dask_arguments("worker")],
            **quiet,
        )
        for i in range(2)
    ]
    # The client's side of the cluster's TLS, as the DASK_DISTRIBUTED__COMM__TLS__* variables would set it
    tls = {
        "distributed.comm.tls.ca-file": certificates.ca_file,
        "distributed.comm.tls.client.cert": certificates.cert("client"),
        "distributed.comm.tls.client.key": certificates.key("client"),
        "distributed.comm.require-encryption": True,
    }
    cfg = TrainConfig(model="mlp", n_devices=2, worker_data="shard", batch_size=32)
    data = dataset.limited(sample_limit=192)
    try:
        with dask_config.set(tls), connect(2, scheduler_address=address, timeout_s=90) as cluster:
            # Execute
            on_channels = train(cluster, data, cfg, transport="direct", log=lambda _: None)
            # (a lambda travels by value: these workers cannot import the test module)
            channels = cluster.client.run(
                lambda dask_worker: (
                    dask_worker.plugins[PLUGIN_NAME].channel.address,
                    dask_worker.plugins[PLUGIN_NAME].channel.calls,
                )
            )
            monkeypatch.setenv(CHANNELS_ENV, "0")
            on_dask = train(cluster, data, cfg, transport="direct", log=lambda _: None)

            # Assert: the run is the same, and a plain-TCP caller gets no answer from a channel
            assert on_channels.weights_sha256 == on_dask.weights_sha256
            assert [calls for _, calls in channels.values()] == [3, 3]  # every round came on its channel
            (host, channel_port), _ = next(iter(channels.values()))
            with socket.create_connection((host, channel_port), timeout=10) as sock:
                sock.sendall(b"".join(bytes(v) for v in encode(("train_round", ()))))
                try:
                    answer = sock.recv(100)
                except ConnectionResetError:
                    answer = b""
            assert answer == b""  # the TLS handshake failed and the device closed the connection
    finally:
        for process in processes[::-1]:
            process.terminate()
            process.wait(timeout=30)
