"""A round's lean form on a round channel: the same task, weights, delta and record as its pickle, less Python.

A ``ChannelServer`` and ``Channels`` run in this process over loopback; the
server's handler is a stand-in device that echoes what it was given, so what
each end saw can be compared exactly. Real rounds on real devices, on
channels and on Dask's comms alike, are compared in tests/test_channel.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from edgelab.common.wire import Flat, Packed
from edgelab.models.builtin import ModelSpec
from edgelab.runtime import round_wire
from edgelab.runtime.channel import Channels, ChannelServer
from edgelab.runtime.tasks import RoundTask
from edgelab.sync.compress import build_compressor

ADDRESS = "tcp://127.0.0.1:9100"


class _Device:
    """A stand-in for a device's runtime: the delta is the weights times 2, the record says what it got."""

    def __init__(self) -> None:
        self.tasks: list[Any] = []
        self.peak: int | None = 123

    def handle(self, fn: str, args: tuple[Any, ...]) -> dict[str, Any]:
        task, weights = args
        self.tasks.append(task)
        delta = Packed([2 * w for w in weights])
        measured = {name: i for i, name in enumerate(round_wire.MEASURED)}
        measured.update(cpu_s=0.25, wall_s=1.5e-3, loss=float(np.float32(0.7)), peak_working_set_bytes=self.peak)
        monitor = [{"t": 1.0, "cpu_s": 0.5}] if task.round % 2 else []
        return {"status": "OK", "result": (delta, round_wire.record(task, "pi3b-0", measured, monitor))}


@pytest.fixture
def device() -> Iterator[tuple[_Device, ChannelServer]]:
    stand_in = _Device()
    server = ChannelServer("127.0.0.1", stand_in.handle)
    yield stand_in, server
    server.close()


def _weights(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((7, 5)).astype(np.float32), rng.standard_normal(5).astype(np.float32)]


def _task(rnd: int, **changes: Any) -> RoundTask:
    task = RoundTask("run-1", ModelSpec("mlp"), 1, rnd, 0, rnd, 1, 64, 3)
    return dataclasses.replace(task, **changes)


def _count(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    calls = [0]
    original = getattr(round_wire, name)

    def counted(*args: Any) -> Any:
        calls[0] += 1
        return original(*args)

    monkeypatch.setattr(round_wire, name, counted)
    return calls


def test_rounds_in_the_lean_form_arrive_as_their_pickles_would_and_the_plan_travels_once(
    device: tuple[_Device, ChannelServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: three rounds on one channel, their weights from the last round's reply
    stand_in, server = device
    channels = Channels(lambda _: server.endpoint)
    plans = []
    decode_call = round_wire.decode_call

    def seeing_plans(data: bytes, buffers: Any, known: dict[int, Any]) -> Any:
        plans.append(len(known))
        return decode_call(data, buffers, known)

    monkeypatch.setattr(round_wire, "decode_call", seeing_plans)
    weights = Packed(_weights(0))

    # Execute
    replies = []
    for rnd in range(3):
        reply = channels.call_all(
            {"d": (ADDRESS, round_wire.ROUND_FN, (_task(rnd), weights))}, check=lambda: None, poll_s=1
        )
        replies.append(reply["d"])
        weights = reply["d"]["result"][0]
        weights = Packed(weights)

    # Assert: the device got each task whole, the plan once; the client each delta and record exactly
    assert stand_in.tasks == [_task(0), _task(1), _task(2)]
    assert plans == [0, 1, 1]  # no plan known at the first call, the one plan after it
    expected = _weights(0)
    for rnd, reply in enumerate(replies):
        delta, record = reply["result"]
        expected = [2 * w for w in expected]
        assert isinstance(delta, Flat)
        assert [d.tobytes() for d in delta] == [e.tobytes() for e in expected]
        assert [d.dtype for d in delta] == [np.float32, np.float32]
        _, want = stand_in.handle(round_wire.ROUND_FN, (_task(rnd), expected))["result"]
        stand_in.tasks.pop()
        assert record == want and list(record) == list(want)
        assert [type(v) for v in record.values()] == [type(v) for v in want.values()]
    channels.close()


def test_an_unknown_peak_a_compressed_round_and_an_error_travel_as_they_did(
    device: tuple[_Device, ChannelServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare
    stand_in, server = device
    channels = Channels(lambda _: server.endpoint)
    leans = _count(monkeypatch, "decode_reply")
    stand_in.peak = None

    def call(task: Any, weights: Any) -> dict[str, Any]:
        return channels.call_all({"d": (ADDRESS, round_wire.ROUND_FN, (task, weights))}, check=lambda: None, poll_s=1)[
            "d"
        ]

    # Execute
    unknown_peak = call(_task(0), Packed(_weights(0)))
    compressed = call(_task(1, compressor=build_compressor("topk:0.5")), Packed(_weights(0)))
    not_packed = call(_task(2), _weights(0))  # a plain list of arrays: pickled

    # Assert: only the first came back lean; each reply is whole
    assert leans == [1]
    assert unknown_peak["result"][1]["peak_working_set_bytes"] is None
    assert compressed["result"][1]["round"] == 1
    assert not_packed["result"][1]["round"] == 2
    channels.close()


def test_a_channel_opened_again_sends_its_plan_again(device: tuple[_Device, ChannelServer]) -> None:
    # Prepare: a round, then the channel dropped (as a recovery drops it)
    stand_in, server = device
    channels = Channels(lambda _: server.endpoint)
    call = {"d": (ADDRESS, round_wire.ROUND_FN, (_task(0), Packed(_weights(0))))}
    channels.call_all(call, check=lambda: None, poll_s=1)
    channels._drop(ADDRESS)

    # Execute: the new connection's device end knows no plan
    reply = channels.call_all(call, check=lambda: None, poll_s=1)["d"]

    # Assert
    assert reply["status"] == "OK" and stand_in.tasks == [_task(0), _task(0)]
    channels.close()


def test_a_call_naming_a_plan_its_channel_never_got_is_answered_with_an_error(
    device: tuple[_Device, ChannelServer],
) -> None:
    # Prepare: the client believes the plan was sent (it was not, on this connection)
    stand_in, server = device
    channels = Channels(lambda _: server.endpoint)
    task, weights = _task(0), Packed(_weights(0))
    channels.reachable([ADDRESS])
    channels._plans[ADDRESS] = [round_wire.plan_key(task, weights)]

    # Execute
    reply = channels.call_all({"d": (ADDRESS, round_wire.ROUND_FN, (task, weights))}, check=lambda: None, poll_s=1)["d"]

    # Assert
    assert reply["status"] == "error" and "never sent" in str(reply["exception"])
    assert stand_in.tasks == []
    channels.close()


def test_plans_differ_by_any_fixed_field_or_layout_and_not_by_the_round() -> None:
    weights = Packed(_weights(0))
    key = round_wire.plan_key(_task(0), weights)

    assert round_wire.plan_key(_task(5, epoch=2, steps=3), weights) == key
    assert round_wire.plan_key(_task(0, device_index=0), weights) != key
    assert round_wire.plan_key(_task(0, seed=4), weights) != key
    assert round_wire.plan_key(_task(0), Packed([w[:3] for w in _weights(0)])) != key
    assert round_wire.plan_key(_task(0, compressor=build_compressor("topk:0.5")), weights) is None


def test_a_rounds_task_is_its_plans_task_with_the_round_fields_replaced_as_replace_would() -> None:
    @dataclasses.dataclass(frozen=True)
    class Checked:
        round: int
        steps: int
        seen: list[int] = dataclasses.field(default_factory=list, compare=False)

        def __post_init__(self) -> None:
            self.seen.append(self.round)

    # Execute: the plain task (fields copied) and one whose __init__ does more (replaced as usual)
    fast = round_wire.with_round(_task(0), {"round": 5, "epoch": 2, "first_step": 3, "steps": 4})
    checked = round_wire.with_round(Checked(1, 1), {"round": 7, "steps": 2})

    # Assert: what dataclasses.replace gives, hash and all; the other's __post_init__ ran
    want = dataclasses.replace(_task(0), round=5, epoch=2, first_step=3, steps=4)
    assert fast == want and hash(fast) == hash(want) and type(fast) is RoundTask
    assert dataclasses.asdict(fast) == dataclasses.asdict(want)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.round = 6  # type: ignore[misc]
    assert checked == Checked(7, 2) and checked.seen == [1, 7]  # the list replace() passes on
