"""What runs on each device worker: its data, its model, its counters.

``DeviceRuntime`` is a Dask ``WorkerPlugin``: per-worker state is created in
``setup`` and released in ``teardown``. The task functions below run on a
worker, find the plugin, and keep the model built once per worker (building and
tracing a model costs far more than a training step). Only numpy arrays cross
the wire: weights in, weight deltas out; the bytes are counted exactly here.

A round's task need not go through the scheduler: the runtime answers a direct
call from the client (``DIRECT_OP``, ``edgelab.runtime.fleet.Fleet.direct``) by running
the device call it names (``edgelab.runtime.protocol.device_call``) on the worker's own thread, so a synchronous round
costs one round trip on Dask's comms instead of a scatter, a scheduled task and
a gather; or, once the client opened it (``OPEN_CHANNEL``), on the device's
round channel (``edgelab.runtime.channel``), a plain socket beside the worker. The
function, its arguments and its accounting are the task's own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import math
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from distributed import WorkerPlugin, get_worker
from distributed.protocol import to_serialize

from edgelab.cluster import device_scheduling
from edgelab.common import process_memory
from edgelab.common.wire import Bundle
from edgelab.emulation.monitor import ResourceSampler
from edgelab.models.builtin import ModelSpec, build_model
from edgelab.models.user import UserModel, UserModelPayload
from edgelab.runtime.channel import ChannelServer, connect
from edgelab.runtime.protocol import DIRECT_OP, OPEN_CHANNEL, PEER_OP, PLUGIN_NAME, Weights, resolve
from edgelab.runtime.steps import Shard

#: A direct call whose last run took less than this runs on the worker's event loop (``DeviceRuntime.run``).
INLINE_MAX_S = 0.05


@dataclass
class DeviceRuntime(WorkerPlugin):
    """Per-worker state of one emulated (or real) device."""

    name: str = PLUGIN_NAME
    bytes_sent: int = 0
    bytes_received: int = 0
    baseline_rss: int = 0
    shards: dict[str, Shard] = field(default_factory=dict)
    models: dict[ModelSpec, Any] = field(default_factory=dict)
    # The seeded weights each model started from; the model itself keeps training.
    initial: dict[ModelSpec, Weights] = field(default_factory=dict)
    sampler: ResourceSampler | None = None
    # Pipeline stages and ensemble members this device holds, by (run id, stage name): edgelab.pipeline.worker.
    stages: dict[tuple[str, str], Any] = field(default_factory=dict)
    # All-reduce runs' weights and peers, by run id: edgelab.peer.allreduce.
    peers: dict[str, Any] = field(default_factory=dict)
    # What a compressor with error feedback has not sent yet, by run id (edgelab.sync.compress):
    # (round, the residual before it, the residual after it).
    residuals: dict[str, tuple[int, Any, Any]] = field(default_factory=dict)
    # Users' models handed over with the data (load_shard), by digest: rounds name them only.
    user_models: dict[str, UserModelPayload] = field(default_factory=dict)
    # How long each kind of direct call last took here: a short one runs on the event loop (run()).
    _last_s: dict[tuple[Callable[..., Any], Any], float] = field(default_factory=dict)
    # The device's round channel (edgelab.runtime.channel), open once the client asked for it.
    channel: ChannelServer | None = None
    # Connections to peer devices' channels, by (host, port), and those that could not be opened or verified.
    _peer_socks: dict[tuple[str, int], socket.socket] = field(default_factory=dict)
    _unreachable_peers: set[tuple[str, int]] = field(default_factory=set)

    async def setup(self, worker: Any) -> None:  # noqa: D102 - WorkerPlugin hook
        # The device's memory budget is what training needs above the
        # framework's own footprint, so take the baseline after importing it.
        # Imported on a thread: a worker that is not forked with it loaded spends
        # seconds on it, and its event loop must keep heartbeating meanwhile (a
        # scheduler with a short worker TTL would otherwise drop it).
        await asyncio.get_running_loop().run_in_executor(None, importlib.import_module, "tensorflow")
        self.device = worker.name
        self.baseline_rss = process_memory.rss_bytes()
        # Set by the embedded cluster only: an attached cluster's workers keep their owner's scheduling.
        if device_scheduling.ENV in os.environ:
            device_scheduling.apply(os.environ[device_scheduling.ENV])
        # A worker forked from the fork server inherits the temporary folder that process had looked up;
        # look again, so that the folder the cluster gave this worker (TMPDIR) is the one used.
        tempfile.tempdir = None
        self._worker = worker
        worker.handlers[DIRECT_OP] = self._direct
        worker.handlers[PEER_OP] = self._peer

    def teardown(self, worker: Any) -> None:  # noqa: D102 - WorkerPlugin hook
        worker.handlers.pop(DIRECT_OP, None)
        worker.handlers.pop(PEER_OP, None)
        if self.channel is not None:
            self.channel.close()
            self.channel = None
        for endpoint in list(self._peer_socks):
            self.drop_peer_socket(endpoint)
        if self.sampler is not None:
            self.sampler.stop()
        self.shards.clear()
        self.stages.clear()
        self.peers.clear()
        self.residuals.clear()
        self.models.clear()
        self.initial.clear()
        self.user_models.clear()

    async def _direct(self, fn: str, args: tuple[Any, ...]) -> dict[str, Any]:
        """Run the device call ``fn`` names (``protocol.device_call``) for a direct call from the client.

        Errors travel back as values, as an actor's do: an expected one (a
        device that restarted and lost its shard) must not log a traceback here.
        """
        try:
            if fn == OPEN_CHANNEL:
                result: Any = self.open_channel()
            else:
                call = resolve(fn)
                args = (self, *args) if call.needs_runtime else args
                if call.waits:  # they wait for peers' pieces, which arrive on this loop: never inline
                    executor = self._worker.executors["default"]
                    result = await asyncio.get_running_loop().run_in_executor(
                        executor, _as_device, self, call.func, args
                    )
                else:
                    result = await self.run(call.func, args)
        except Exception as exc:
            return {"status": "error", "exception": to_serialize(exc)}
        return {"status": "OK", "result": to_serialize(Bundle(result))}

    def open_channel(self) -> tuple[str, int, bytes]:
        """Listen for round channels beside the worker (its host; TLS if it speaks TLS): the host, port and key.

        The client's calls and the peers' pieces of all-reduce rounds come on
        it. The key goes back on Dask's comms only: whoever proves it is the
        client or a peer the client handed it to.
        """
        if self.channel is None:
            from distributed.comm import get_address_host

            tls = self._worker.security.get_listen_args("worker")["ssl_context"] if self._speaks_tls() else None
            self.channel = ChannelServer(get_address_host(self._worker.address), self._channel_call, ssl_context=tls)
        return self.channel.endpoint

    def _speaks_tls(self) -> bool:
        from distributed.comm import parse_address

        return bool(parse_address(self._worker.address)[0] == "tls")

    def _channel_call(self, fn: str, args: tuple[Any, ...]) -> dict[str, Any] | None:
        """A call that came on a round channel, run on the channel's thread; errors travel back as values.

        A one-way call (a peer's piece) gets no reply (None).
        """
        try:
            call = resolve(fn)
            result = _as_device(self, call.func, (self, *args) if call.needs_runtime else args)
        except Exception as exc:
            return {"status": "error", "exception": exc}
        return None if call.one_way else {"status": "OK", "result": result}

    def peer_socket(self, endpoint: tuple[str, int, bytes]) -> socket.socket | None:
        """A connection to a peer device's round channel at ``endpoint`` (host, port, key), opened on first use.

        None if the peer cannot be reached or verified (its pieces then go on
        Dask's comms). Only a device's round thread sends to its peers, one
        piece at a time.
        """
        where = endpoint[:2]
        if where in self._peer_socks:
            return self._peer_socks[where]
        if where in self._unreachable_peers:
            return None
        tls = self._worker.security.get_connection_args("worker")["ssl_context"] if self._speaks_tls() else None
        try:
            sock = connect(endpoint, ssl_context=tls)
        except OSError:
            self._unreachable_peers.add(where)  # its pieces go on Dask's comms
            return None
        self._peer_socks[where] = sock
        return sock

    def drop_peer_socket(self, endpoint: tuple[str, int, bytes]) -> None:
        """Close a peer connection that failed (the peer is gone); the next send opens a new one."""
        sock = self._peer_socks.pop(endpoint[:2], None)
        if sock is not None:
            sock.close()

    async def run(self, func: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        """``func(*args)`` as this device, for a direct call: on the event loop when short, else the worker's thread.

        A call whose last run took under ``INLINE_MAX_S`` runs right here,
        when no task is executing: the hop to the worker's thread and back
        (each a wake-up and a hand-over of the GIL) cost a LeNet-MLP round a
        third of a millisecond, and blocking the loop for a few milliseconds
        delays nothing that matters. Longer calls go to the worker's one
        thread, where its tasks run too: one thing at a time per device, and
        the loop free for heartbeats.
        """
        # Calls alike cost alike: a function's ``cost_key`` says which (a one-batch round and a whole epoch's
        # of the same function are not alike, and an epoch must never block the loop).
        # The call's own time decides, not the hop's: on a loaded host the hand-over to the worker's thread
        # and back alone can take longer than INLINE_MAX_S, and would keep a short call off the loop.
        key = (func, getattr(func, "cost_key", lambda *_: None)(*args))
        if self._last_s.get(key, math.inf) < INLINE_MAX_S and self._worker.state.executing_count == 0:
            result, self._last_s[key] = _timed_as_device(self, func, args)
        else:
            executor = self._worker.executors["default"]
            timed = await asyncio.get_running_loop().run_in_executor(executor, _timed_as_device, self, func, args)
            result, self._last_s[key] = timed
        return result

    def send_to_peer(self, address: str, fn: str, args: tuple[Any, ...]) -> concurrent.futures.Future[Any]:
        """Send the one-way call ``fn(*args)`` to the peer device at ``address`` on Dask's comms (its ``PEER_OP``).

        No acknowledgement: the future is done once the message is sent; a peer that is gone is found by the client.
        """
        call = getattr(self._worker.rpc(address), PEER_OP)(reply=False, fn=fn, args=to_serialize(Bundle(args)))
        return asyncio.run_coroutine_threadsafe(call, self._worker.loop.asyncio_loop)

    async def _peer(self, fn: str, args: tuple[Any, ...]) -> Any:
        """A peer device's one-way call on Dask's comms (a piece of an all-reduce round): run on the event loop."""
        call = resolve(fn)
        return call.func(self, *args) if call.needs_runtime else call.func(*args)

    def counters(self) -> tuple[int, int]:
        """Cumulative payload bytes (sent, received) of this device."""
        return self.bytes_sent, self.bytes_received

    def model(self, spec: ModelSpec) -> Any:
        """The device's model for ``spec``, built on first use and kept until another spec is asked for."""
        if spec not in self.models:
            # One model at a time: a sweep over depths would otherwise keep every model and its traced
            # steps (ResNet-32, -80 and -110 took a worker past its 2 GiB limit, and ten workers at once).
            self.models.clear()
            self.initial.clear()
            user = spec.name.digest if isinstance(spec.name, UserModel) else None
            model = build_model(spec, self.user_models.get(user) if user else None)
            initial = model.get_weights()
            model.optimizer.build(model.trainable_variables)
            self.models[spec] = model
            self.initial[spec] = initial
        return self.models[spec]


# The runtime a direct call runs for, on the thread running it (get_worker() knows only tasks).
_direct_call = threading.local()


def _as_device(rt: DeviceRuntime, func: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    _direct_call.runtime = rt
    try:
        return func(*args)
    finally:
        _direct_call.runtime = None


def _timed_as_device(rt: DeviceRuntime, func: Callable[..., Any], args: tuple[Any, ...]) -> tuple[Any, float]:
    """``_as_device``'s result and the seconds the call itself took (on the thread that ran it)."""
    start = time.perf_counter()
    result = _as_device(rt, func, args)
    return result, time.perf_counter() - start


def current(worker: Any = None) -> DeviceRuntime:
    """The device runtime of the calling thread's direct call, else of ``worker`` (or the current task's)."""
    if worker is None and getattr(_direct_call, "runtime", None) is not None:
        return _direct_call.runtime  # type: ignore[no-any-return]
    plugin = (worker or get_worker()).plugins.get(PLUGIN_NAME)
    if plugin is None:
        raise RuntimeError("edgelab device runtime is not installed on this worker")
    return plugin  # type: ignore[no-any-return]
