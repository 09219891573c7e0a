"""A synchronous round's call and reply on a round channel, without pickles: a few numbers and the raw arrays.

A parameter server's round sends each device the weights and what to train
(``runtime.RoundTask``) and gets back the delta and what was measured (the
round's record). As pickles, the task, the reply and the record cost about a
third of a millisecond of Python a round on each side of a LeNet-MLP round on
this 2-core host, where the least a round can cost beside its compute is about
one millisecond (``benchmarks/sides/bare_round.py``). Most of what they carry
is the same every round, so a round's lean form carries only what changes:

* a **plan**, once per channel: the task's fields that stay fixed for a run
  on that device (run, model, device index, batch size, seed, local epochs)
  and the weights' layout (``edgelab.common.wire.Layout``). It travels pickled in
  the first call that needs it; a channel opened again (a device restarted)
  starts with no plans, on both ends.
* a **call**: the plan's number, the round, epoch, first step and number of
  steps, then the weights' flat buffers.
* a **reply**: the record's measured numbers in one struct, the device's
  name, the resource monitor's samples pickled only when there are any, then
  the delta's flat buffers. The client knows the task, so it rebuilds the
  record, field for field, the very dict the device's ``train_round`` made.

Anything else (a compressed delta, an error, a reply of another layout) goes
as a pickle, as every other call does (``edgelab.runtime.channel``).
"""

from __future__ import annotations

import dataclasses
import functools
import pickle
import struct
from typing import Any

import numpy as np

from edgelab.common.wire import Flat, Layout, Packed

#: The device call whose calls travel in the lean form: ``edgelab.runtime.tasks.train_round``, by its call name.
ROUND_FN = "edgelab.runtime.tasks:train_round"
#: A task's fields a round call carries; every other field is the plan's.
PER_ROUND = ("round", "epoch", "first_step", "steps")
#: A task's fields its record leaves out (the record is per device and round; these say which run).
NOT_RECORDED = ("spec", "run_id", "compressor")
#: What a device measures in a round, in the record's order after the task's fields and the device's name.
MEASURED = (
    "pid",
    "samples",
    "cpu_s",
    "wall_s",
    "bytes_received",
    "bytes_sent",
    "bytes_sent_dense",
    "loss",
    "rss_bytes",
    "working_set_bytes",
    "peak_working_set_bytes",
)

# The call: plan number, whether the plan follows, then the per-round fields.
_CALL = struct.Struct("<IBqqqq")
# The reply: the measured numbers (the peak may be unknown: a flag says), the name's length, the monitor's.
_REPLY = struct.Struct("<qqddqqqdqqqBHI")


def record(task: Any, device: str, measured: dict[str, Any], monitor: list[Any]) -> dict[str, Any]:
    """A round's record: the task's fields (but those that name the run), the device, what it measured, its samples."""
    return {
        **{name: getattr(task, name) for name in _recorded(type(task))},
        "device": device,
        **{name: measured[name] for name in MEASURED},
        "monitor": monitor,
    }


@functools.cache
def _recorded(task_type: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(task_type) if f.name not in NOT_RECORDED)


# ------------------------------------------------------------- the client ----


def plan_key(task: Any, weights: Any) -> tuple[Any, ...] | None:
    """What makes two rounds' calls share a plan (compared with ==); None when a call cannot go lean.

    A call that cannot (a compressor, weights not ``Packed``) is pickled.
    """
    if (
        not isinstance(weights, Packed)
        or not dataclasses.is_dataclass(task)
        or getattr(task, "compressor", 1) is not None
    ):
        return None
    # Not hashed: hashing the model's spec and the layout every round cost more than the rest of the call.
    return (type(task), *(getattr(task, name) for name in _fixed(type(task))), weights.flat()[0])


@functools.cache
def _fixed(task_type: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(task_type) if f.name not in PER_ROUND)


def encode_call(plan: int, new: bool, task: Any, weights: Packed) -> tuple[bytes, list[memoryview]]:
    """A round call's numbers (and the plan, when ``new`` on this channel) and the weights' flat buffers."""
    layout, flats = weights.flat()
    head = _CALL.pack(plan, new, *(getattr(task, name) for name in PER_ROUND))
    if new:
        head += pickle.dumps((task, layout), protocol=5)
    return head, _raw(flats)


def decode_reply(data: bytes, buffers: list[np.ndarray], task: Any, layout: Layout) -> dict[str, Any]:
    """A lean reply as the device's ``train_round`` returned it: ``{"status": "OK", "result": (delta, record)}``."""
    *numbers, has_peak, name_len, monitor_len = _REPLY.unpack_from(data)
    measured = dict(zip(MEASURED, numbers, strict=True))
    if not has_peak:
        measured["peak_working_set_bytes"] = None
    start = _REPLY.size
    device = data[start : start + name_len].decode()
    monitor = pickle.loads(data[start + name_len : start + name_len + monitor_len]) if monitor_len else []
    return {"status": "OK", "result": (_flat(layout, buffers), record(task, device, measured, monitor))}


# ------------------------------------------------------------- on a device ----


def decode_call(data: bytes, buffers: list[np.ndarray], plans: dict[int, tuple[Any, Layout]]) -> tuple[Any, Flat]:
    """A lean call's task and weights; ``plans`` (this channel's) learns a new plan from it."""
    plan, new, *per_round = _CALL.unpack_from(data)
    if new:
        plans[plan] = pickle.loads(data[_CALL.size :])
    if plan not in plans:
        raise RuntimeError(f"round plan {plan} was never sent on this channel")
    template, layout = plans[plan]
    return with_round(template, dict(zip(PER_ROUND, per_round, strict=True))), _flat(layout, buffers)


def with_round(template: Any, per_round: dict[str, int]) -> Any:
    """``dataclasses.replace(template, **per_round)``; for a plain frozen dataclass, its fields copied as a dict.

    replace() runs the class's ``__init__``: 16 µs of a device's 48 µs to decode
    a call, against 2 µs to copy the fields (the client makes each round's
    tasks so too). A class whose instances are not just their fields
    (``__post_init__``, ``__slots__``) is replaced as usual.
    """
    if not _plain(type(template)):
        return dataclasses.replace(template, **per_round)
    task = object.__new__(type(template))
    task.__dict__.update(template.__dict__)
    task.__dict__.update(per_round)
    return task


@functools.cache
def _plain(task_type: type) -> bool:
    return not hasattr(task_type, "__post_init__") and all("__slots__" not in vars(k) for k in task_type.__mro__[:-1])


def encode_reply(reply: dict[str, Any], layout: Layout) -> tuple[bytes, list[memoryview]] | None:
    """A successful round's reply in the lean form; None when it must be pickled (an error, another layout)."""
    if reply.get("status") != "OK":
        return None
    delta, rec = reply["result"]
    if not isinstance(delta, Packed):  # a compressed delta
        return None
    delta_layout, flats = delta.flat()
    if delta_layout != layout:
        return None
    peak = rec["peak_working_set_bytes"]
    device = str(rec["device"]).encode()
    monitor = pickle.dumps(rec["monitor"], protocol=5) if rec["monitor"] else b""
    numbers = [rec[name] for name in MEASURED[:-1]]
    head = _REPLY.pack(*numbers, 0 if peak is None else peak, peak is not None, len(device), len(monitor))
    return head + device + monitor, _raw(flats)


def _raw(flats: tuple[np.ndarray, ...]) -> list[memoryview]:
    """Flat buffers as the bytes a message sends, uncopied."""
    return [memoryview(np.ascontiguousarray(f)).cast("B") for f in flats]


def _flat(layout: Layout, buffers: list[np.ndarray]) -> Flat:
    return Flat.of_bytes(layout, buffers)
