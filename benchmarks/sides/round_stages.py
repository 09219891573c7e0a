"""Where a direct round's time goes: each stage of a parameter server's round on the round channels, timed.

``bench_sync.py``'s part A says how much a round costs beside its compute;
this says where. A run of direct rounds is traced at both ends: the client
and every device stamp each stage of each round call with
``time.perf_counter`` (Linux's monotonic clock, one clock for every process
of the host), so a call's flight from one process to the other is a
difference of two stamps. The stamps come from wrappers put around
edgelab's own functions for the traced run alone and taken off after it:
nothing of it is in edgelab's code.

Stages, each the median over the traced rounds (device stages over every
device's calls):

* ``between_rounds``: the client, from the last reply of a round read to the
  first call of the next one starting out (``mean_and_step`` of it: the mean
  of the updates and the step, ``RunningMean.added_to``);
* ``sending``: the client, from the first call starting out to the last one sent;
* ``call_in_flight``: from the client's end of sending a device its call to
  that device having read the whole of it;
* ``decode``: the device, the call's task and weights made from its bytes;
* ``to_step``: the device, from the decoded call to ``train_round`` starting;
* ``step``: the step's own wall (the record's ``wall_s``: what the round's compute is);
* ``bookkeeping``: ``train_round``'s time outside its step (the data order,
  the memory readings, the record);
* ``encode`` and ``send_reply``: the device making its reply and sending it;
* ``reply_in_flight``: from the device's end of sending to the client having
  read and decoded that reply.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

#: The stages, in a round's order (``between_rounds`` ends one round and starts the next).
CLIENT_STAGES = ("between_rounds", "mean_and_step", "sending")
DEVICE_STAGES = (
    "call_in_flight",
    "decode",
    "to_step",
    "step",
    "bookkeeping",
    "encode",
    "send_reply",
    "reply_in_flight",
)
#: Rounds left out at the start (TensorFlow's and the sockets' first rounds).
WARMUP = 20


# ------------------------------------------------------------- on a device ----


def _trace_device(dask_worker: Any = None) -> None:
    """Wrap this device's round-channel stages so that each round call leaves its stamps (``_untrace_device``)."""
    import edgelab.runtime.channel as channel
    import edgelab.runtime.round_wire as round_wire
    from edgelab.runtime import protocol

    if hasattr(channel, "_stage_originals"):
        channel._stage_calls.clear()
        return
    calls: list[dict[str, float]] = []
    local = threading.local()  # the call a channel's thread is answering
    originals = (channel.receive_frame, channel.send_message, round_wire.decode_call, round_wire.encode_reply)
    receive_frame, send_message, decode_call, encode_reply = originals
    train_round = protocol.resolve(round_wire.ROUND_FN).func

    def traced_receive_frame(sock: Any, *args: Any, **kwargs: Any) -> Any:
        out = receive_frame(sock, *args, **kwargs)
        local.call = {"port": sock.getsockname()[1], "in": time.perf_counter()}
        return out

    def traced_decode_call(*args: Any) -> Any:
        out = decode_call(*args)
        local.call["decoded"] = time.perf_counter()
        return out

    def traced_train_round(task: Any, weights: Any) -> Any:
        call = getattr(local, "call", {})
        call["step_call"] = time.perf_counter()
        delta, record = train_round(task, weights)
        call["returned"], call["step"] = time.perf_counter(), record["wall_s"]
        return delta, record

    def traced_encode_reply(*args: Any) -> Any:
        out = encode_reply(*args)
        local.call["encoded"] = time.perf_counter()
        return out

    def traced_send_message(*args: Any, **kwargs: Any) -> None:
        send_message(*args, **kwargs)
        call = getattr(local, "call", {})
        if "encoded" in call:  # a round's reply (other calls' replies are pickled)
            call["sent"] = time.perf_counter()
            calls.append(call)
        local.call = {}

    channel._stage_originals = (*originals, train_round)
    channel._stage_calls = calls
    channel.receive_frame, channel.send_message = traced_receive_frame, traced_send_message
    round_wire.decode_call, round_wire.encode_reply = traced_decode_call, traced_encode_reply
    protocol.replace_call(round_wire.ROUND_FN, traced_train_round)


def _untrace_device(dask_worker: Any = None) -> list[dict[str, float]]:
    """Take this device's wrappers off; the stamps of the calls it answered meanwhile."""
    import edgelab.runtime.channel as channel
    import edgelab.runtime.round_wire as round_wire
    from edgelab.runtime import protocol

    if not hasattr(channel, "_stage_originals"):
        return []
    receive_frame, send_message, decode_call, encode_reply, train_round = channel._stage_originals
    channel.receive_frame, channel.send_message = receive_frame, send_message
    round_wire.decode_call, round_wire.encode_reply = decode_call, encode_reply
    protocol.replace_call(round_wire.ROUND_FN, train_round)
    calls = list(channel._stage_calls)
    del channel._stage_originals, channel._stage_calls
    return calls


# ------------------------------------------------------------- the client ----


def trace_client(run: Callable[[], Any]) -> tuple[Any, list[tuple[str, int, float]]]:
    """``run()`` with the client's stages stamped: its result and the events ``(kind, port, t)``.

    Kinds: ``round0``/``round1`` (a round's calls begin and end), ``send0``/``send1``
    (a call to the device whose channel listens on ``port`` starts out, is
    sent), ``reply`` (its reply read and decoded), ``mean0``/``mean1``.
    """
    import edgelab.runtime.channel as channel
    import edgelab.sync.aggregate as aggregate
    import edgelab.training.data_parallel as train

    events: list[tuple[str, int, float]] = []
    send_message, receive_reply = channel.send_message, channel._receive_reply
    round_, added_to = train._round, aggregate.RunningMean.added_to

    def traced_send(sock: Any, *args: Any, **kwargs: Any) -> None:
        port = sock.getpeername()[1]
        events.append(("send0", port, time.perf_counter()))
        send_message(sock, *args, **kwargs)
        events.append(("send1", port, time.perf_counter()))

    def traced_reply(sock: Any, *args: Any) -> Any:
        out = receive_reply(sock, *args)
        events.append(("reply", sock.getpeername()[1], time.perf_counter()))
        return out

    def traced_round(*args: Any, **kwargs: Any) -> Any:
        events.append(("round0", 0, time.perf_counter()))
        out = round_(*args, **kwargs)
        events.append(("round1", 0, time.perf_counter()))
        return out

    def traced_added_to(self: Any, *args: Any, **kwargs: Any) -> Any:
        events.append(("mean0", 0, time.perf_counter()))
        out = added_to(self, *args, **kwargs)
        events.append(("mean1", 0, time.perf_counter()))
        return out

    channel.send_message, channel._receive_reply = traced_send, traced_reply
    train._round, aggregate.RunningMean.added_to = traced_round, traced_added_to
    try:
        return run(), events
    finally:
        channel.send_message, channel._receive_reply = send_message, receive_reply
        train._round, aggregate.RunningMean.added_to = round_, added_to


def trace_rounds(client: Any, run: Callable[[], Any]) -> tuple[Any, list[tuple[str, int, float]], list[dict]]:
    """``run()`` (a direct training run on ``client``'s cluster) traced at both ends.

    Returns its result, the client's events and every device's round calls.
    """
    client.run(_trace_device)
    try:
        result, events = trace_client(run)
    finally:
        devices = client.run(_untrace_device)
    return result, events, [call for calls in devices.values() for call in calls]


# ------------------------------------------------------------ the stages ----


def stage_times(
    events: list[tuple[str, int, float]], calls: list[dict], *, warmup: int | None = None
) -> dict[str, float]:
    """Each stage's median in milliseconds (see the module's docstring), from a traced run's stamps.

    The first ``warmup`` rounds are left out, and the device calls made in
    them; by default ``WARMUP``, or a quarter of a shorter run's rounds.
    """
    rounds = _rounds(events)
    if warmup is None:
        warmup = min(WARMUP, len(rounds) // 4)
    if len(rounds) <= warmup + 1:
        raise ValueError(f"a traced run needs more than {warmup + 1} whole rounds, got {len(rounds)}")
    out: dict[str, list[float]] = {name: [] for name in (*CLIENT_STAGES, *DEVICE_STAGES)}
    sends, replies = _client_stages(events, rounds, warmup, out)
    _device_stages(calls, rounds[warmup][0][2], sends, replies, out)
    return {name: 1e3 * float(statistics.median(values)) if values else float("nan") for name, values in out.items()}


def _rounds(events: list[tuple[str, int, float]]) -> list[list[tuple[str, int, float]]]:
    """The client's events of each whole round (from its ``round0`` to its ``round1``), in order."""
    rounds: list[list[tuple[str, int, float]]] = []
    for kind, port, t in events:
        if kind == "round0":
            rounds.append([])
        elif rounds and (not rounds[-1] or rounds[-1][-1][0] != "round1"):
            rounds[-1].append((kind, port, t))
    return [r for r in rounds if r and r[-1][0] == "round1"]


def _client_stages(
    events: list[tuple[str, int, float]],
    rounds: list[list[tuple[str, int, float]]],
    warmup: int,
    out: dict[str, list[float]],
) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray]]:
    """Add the client's stages of the rounds after ``warmup`` to ``out``; every call's send and reply, by port."""
    sends: dict[int, list[float]] = {}
    replies: dict[int, list[float]] = {}
    means = list(zip(_all(events, "mean0"), _all(events, "mean1"), strict=True))
    for i, rnd in enumerate(rounds):
        for kind, port, t in rnd:
            if kind == "send1":
                sends.setdefault(port, []).append(t)
            elif kind == "reply":
                replies.setdefault(port, []).append(t)
        if i < warmup:
            continue
        times = {kind: [t for k, _, t in rnd if k == kind] for kind in ("send0", "send1", "reply")}
        out["sending"].append(times["send1"][-1] - times["send0"][0])
        if i + 1 < len(rounds):
            next_send = next(t for k, _, t in rounds[i + 1] if k == "send0")
            # The mean and the step of this round come after its calls, before the next round's.
            last_reply = times["reply"][-1]
            out["between_rounds"].append(next_send - last_reply)
            inside = [b - a for a, b in means if last_reply <= a and b <= next_send]
            if inside:
                out["mean_and_step"].append(inside[0])
    ordered_sends = {port: np.array(ts) for port, ts in sends.items()}
    ordered_replies = {port: np.array(ts) for port, ts in replies.items()}
    return ordered_sends, ordered_replies


def _device_stages(
    calls: list[dict],
    start: float,
    sends: dict[int, np.ndarray],
    replies: dict[int, np.ndarray],
    out: dict[str, list[float]],
) -> None:
    """Add the device's stages of every call made from ``start`` on to ``out``, each matched to its send and reply."""
    for call in calls:
        if call["in"] < start or call["port"] not in sends or "sent" not in call:
            continue
        sent = sends[call["port"]]
        back = replies.get(call["port"], np.array([]))
        k = int(np.searchsorted(sent, call["in"])) - 1  # the last call sent to it before it had one whole
        j = int(np.searchsorted(back, call["sent"]))  # the first reply read after it sent this one
        if k < 0 or j >= len(back):
            continue
        out["call_in_flight"].append(call["in"] - sent[k])
        out["decode"].append(call["decoded"] - call["in"])
        out["to_step"].append(call["step_call"] - call["decoded"])
        out["step"].append(call["step"])
        out["bookkeeping"].append(call["returned"] - call["step_call"] - call["step"])
        out["encode"].append(call["encoded"] - call["returned"])
        out["send_reply"].append(call["sent"] - call["encoded"])
        out["reply_in_flight"].append(back[j] - call["sent"])


def _all(events: list[tuple[str, int, float]], kind: str) -> list[float]:
    return [t for k, _, t in events if k == kind]
