"""What the client and a device worker agree on: the handlers' names, the plugin's, the errors a device returns."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

PLUGIN_NAME = "edgelab-device"


#: The worker handler a direct call from the client reaches (``edgelab.runtime.fleet.Fleet.direct``).
DIRECT_OP = "edgelab_direct"


#: The worker handler a peer device's all-reduce piece reaches (``edgelab.peer.allreduce``).
PEER_OP = "edgelab_peer"


#: The direct call that opens the device's round channel and returns its (host, port).
OPEN_CHANNEL = "open_channel"


Weights = list[np.ndarray]


def nbytes(arrays: Weights) -> int:
    """Payload size of a list of arrays, as it crosses the wire."""
    return int(sum(a.nbytes for a in arrays))


class StateMissingError(RuntimeError):
    """A device lacks state a run gave it (data, a stage): its worker restarted since.

    ``device`` names it, so a recovery knows which device to prepare again.
    """

    device: str


class ShardMissingError(StateMissingError):
    """A device holds no data for the run: its worker restarted since the data was sent."""

    def __init__(self, device: str, run_id: str) -> None:
        # Both in args, so the error pickles back to the client with the device named.
        super().__init__(device, run_id)
        self.device, self.run_id = device, run_id

    def __str__(self) -> str:
        return f"device {self.device} holds no shard of run {self.run_id}; its worker restarted"


# -------------------------------------------------------------- device calls ----


@dataclass(frozen=True)
class DeviceCall:
    """A function a device runs when the client (or a peer) asks it by name, and how it runs there.

    ``needs_runtime``: it takes the device's ``DeviceRuntime`` as its first
    argument; ``waits``: it waits for other devices' pieces (which arrive on
    the worker's event loop), so it never runs there; ``one_way``: it sends
    no reply (a peer's piece).
    """

    name: str
    func: Callable[..., Any]
    needs_runtime: bool = False
    waits: bool = False
    one_way: bool = False


_CALLS: dict[str, DeviceCall] = {}


def device_call(
    func: Callable[..., Any] | None = None, *, needs_runtime: bool = False, waits: bool = False, one_way: bool = False
) -> Any:
    """Mark ``func`` as one a device runs when asked: the callable travels, by its module and name.

    The client passes the function itself (``Fleet.direct(device, train_round,
    ...)``), so a reader follows it to its definition; what crosses the wire is
    its name, and a device runs only functions registered here, importing the
    module that defines them on first use (only ``edgelab`` modules).
    """

    def register(f: Callable[..., Any]) -> Callable[..., Any]:
        name = call_name_of(f)
        _CALLS[name] = DeviceCall(name, f, needs_runtime, waits, one_way)
        return f

    return register(func) if func is not None else register


def call_name_of(func: Callable[..., Any]) -> str:
    """``module:qualified name``, what a call to ``func`` carries."""
    return f"{func.__module__}:{func.__qualname__}"


def call_name(func: Callable[..., Any] | str) -> str:
    """The name a call to ``func`` carries; raises if ``func`` is not a device call."""
    name = func if isinstance(func, str) else call_name_of(func)
    if name not in _CALLS and not isinstance(func, str):
        raise ValueError(f"{name} is not a device call (decorate it with edgelab.runtime.protocol.device_call)")
    return name


def resolve(name: str) -> DeviceCall:
    """The registered call ``name`` names, importing its ``edgelab`` module first if needed."""
    if name not in _CALLS:
        module, sep, _ = name.partition(":")
        if sep and (module == "edgelab" or module.startswith("edgelab.")):
            importlib.import_module(module)  # registers its calls
    call = _CALLS.get(name)
    if call is None:
        raise ValueError(f"fn={name!r} is not a device call: an edgelab function decorated with device_call")
    return call


def replace_call(name: str, func: Callable[..., Any] | None) -> DeviceCall | None:
    """Run ``func`` for the call ``name`` from now on, or forget the call (None): what it replaced, if anything.

    For instrumenting a device (the benchmarks' stage stamps) and tests; the call keeps how it runs.
    """
    before = _CALLS.get(name)
    if func is None:
        _CALLS.pop(name, None)
    else:
        _CALLS[name] = DeviceCall(name, func, *(before.needs_runtime, before.waits, before.one_way) if before else ())
    return before
