"""What runs on each device worker: its data, its model, its counters.

``DeviceRuntime`` is a Dask ``WorkerPlugin``: per-worker state is created in
``setup`` and released in ``teardown``. The task functions below run on a
worker, find the plugin, and keep the model built once per worker (building and
tracing a model costs far more than a training step). Only numpy arrays cross
the wire: weights in, weight deltas out; the bytes are counted exactly here.

A round's task need not go through the scheduler: the runtime answers a direct
call from the client (``DIRECT_OP``, ``edgelab.fleet.Fleet.direct``) by running
one of ``DIRECT_FUNCTIONS`` on the worker's own thread, so a synchronous round
costs one round trip on Dask's comms instead of a scatter, a scheduled task and
a gather; or, once the client opened it (``OPEN_CHANNEL``), on the device's
round channel (``edgelab.channel``), a plain socket beside the worker. The
function, its arguments and its accounting are the task's own.
"""

from __future__ import annotations

import asyncio
import importlib
import math
import os
import socket
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from distributed import WorkerPlugin, get_worker
from distributed.protocol import to_serialize

from edgelab import device_scheduling, round_wire
from edgelab.channel import ChannelServer, connect
from edgelab.common import process_memory
from edgelab.common.wire import TENSOR_ALIGNMENT, Bundle, Layout, Packed, aligned_empty, pack
from edgelab.emulation.monitor import DEFAULT_INTERVAL_S, ResourceSampler
from edgelab.models.builtin import ModelSpec, build_model, prepare_images
from edgelab.models.user import UserModel, UserModelPayload

PLUGIN_NAME = "edgelab-device"
#: The worker handler a direct call from the client reaches (``edgelab.fleet.Fleet.direct``).
DIRECT_OP = "edgelab_direct"
#: The worker handler a peer device's all-reduce piece reaches (``edgelab.allreduce``).
PEER_OP = "edgelab_peer"
#: A direct call whose last run took less than this runs on the worker's event loop (``DeviceRuntime.run``).
INLINE_MAX_S = 0.05
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


@dataclass
class _Shard:
    # The images stay uint8 (a quarter of float32: 154 MB, not 614 MB, for all
    # of CIFAR-10 on one device) and each batch is scaled as it is gathered, to
    # the very floats ``edgelab.models.builtin.prepare_images`` gives, in numpy (bit for
    # bit TensorFlow's eager gather and scaling, tested on every uint8 value, at
    # a twentieth of its cost).
    x: np.ndarray  # (n, 28, 28) or (n, 32, 32, 3) uint8
    y: np.ndarray  # (n,) int64
    channel_axis: bool  # the model wants a trailing channel axis the images lack (LeNet-CNN)
    _order: tuple[tuple[int, int, int], np.ndarray] | None = None

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def order(self, seed: int, device_index: int, epoch: int) -> np.ndarray:
        """The device's seeded order of its samples in ``epoch``, made once per epoch (not once per round)."""
        key = (seed, device_index, epoch)
        if self._order is None or self._order[0] != key:
            self._order = key, np.random.default_rng(key).permutation(len(self))
        return self._order[1]

    def take(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The samples ``idx`` (sorted first), prepared for the model."""
        x, y = self.take_batches(np.asarray(idx)[None])
        return x[0], y[0]

    def take_batches(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Batches ``idx`` (one row each, sorted within it), prepared and stacked: ``(rows, batch, ...)``.

        One gather into the stacked array: gathering each batch and stacking
        them copied every image once more.
        """
        idx = np.sort(idx, axis=1)
        # Cast and scaled in one pass (the same float32 division), into memory TensorFlow takes uncopied.
        x = np.divide(self.x[idx], np.float32(255.0), out=aligned_empty((*idx.shape, *self.x.shape[1:]), np.float32))
        return (x[..., None] if self.channel_axis else x), self.y[idx]


@dataclass
class DeviceRuntime(WorkerPlugin):
    """Per-worker state of one emulated (or real) device."""

    name: str = PLUGIN_NAME
    bytes_sent: int = 0
    bytes_received: int = 0
    baseline_rss: int = 0
    shards: dict[str, _Shard] = field(default_factory=dict)
    models: dict[ModelSpec, Any] = field(default_factory=dict)
    # The seeded weights each model started from; the model itself keeps training.
    initial: dict[ModelSpec, Weights] = field(default_factory=dict)
    sampler: ResourceSampler | None = None
    # Pipeline stages and ensemble members this device holds, by (run id, stage name): edgelab.pipeline.worker.
    stages: dict[tuple[str, str], Any] = field(default_factory=dict)
    # All-reduce runs' weights and peers, by run id: edgelab.allreduce.
    peers: dict[str, Any] = field(default_factory=dict)
    # What a compressor with error feedback has not sent yet, by run id (edgelab.sync.compress):
    # (round, the residual before it, the residual after it).
    residuals: dict[str, tuple[int, Any, Any]] = field(default_factory=dict)
    # Users' models handed over with the data (load_shard), by digest: rounds name them only.
    user_models: dict[str, UserModelPayload] = field(default_factory=dict)
    # How long each kind of direct call last took here: a short one runs on the event loop (run()).
    _last_s: dict[tuple[Callable[..., Any], Any], float] = field(default_factory=dict)
    # The device's round channel (edgelab.channel), open once the client asked for it.
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
        """Run ``DIRECT_FUNCTIONS[fn](*args)`` on the worker's thread, for a direct call from the client.

        Errors travel back as values, as an actor's do: an expected one (a
        device that restarted and lost its shard) must not log a traceback here.
        """
        from edgelab.allreduce import PEER_FUNCTIONS

        if fn not in DIRECT_FUNCTIONS and fn not in PEER_FUNCTIONS and fn != OPEN_CHANNEL:
            return {"status": "error", "exception": to_serialize(_unknown_direct(fn))}
        try:
            if fn == OPEN_CHANNEL:
                result: Any = self.open_channel()
            elif fn in PEER_FUNCTIONS:  # they wait for peers' pieces, which arrive on this loop: never inline
                executor = self._worker.executors["default"]
                call = (_as_device, self, PEER_FUNCTIONS[fn], (self, *args))
                result = await asyncio.get_running_loop().run_in_executor(executor, *call)
            else:
                result = await self.run(DIRECT_FUNCTIONS[fn], args)
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

        A peer's piece gets no reply (None).
        """
        from edgelab.allreduce import PEER_FUNCTIONS
        from edgelab.peer_messages import PEER_PIECE, receive

        try:
            if fn == PEER_PIECE:
                receive(self, *args)
                return None
            if fn in DIRECT_FUNCTIONS:
                result = _as_device(self, DIRECT_FUNCTIONS[fn], args)
            elif fn in PEER_FUNCTIONS:
                result = _as_device(self, PEER_FUNCTIONS[fn], (self, *args))
            else:
                raise _unknown_direct(fn)
        except Exception as exc:
            return {"status": "error", "exception": exc}
        return {"status": "OK", "result": result}

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
        key = (func, getattr(func, "cost_key", lambda *_: None)(*args))
        start = time.perf_counter()
        if self._last_s.get(key, math.inf) < INLINE_MAX_S and self._worker.state.executing_count == 0:
            result = _as_device(self, func, args)
        else:
            executor = self._worker.executors["default"]
            result = await asyncio.get_running_loop().run_in_executor(executor, _as_device, self, func, args)
        self._last_s[key] = time.perf_counter() - start
        return result

    async def _peer(self, args: tuple[Any, ...]) -> str:
        """A peer device's piece of an all-reduce round on Dask's comms (``edgelab.peer_messages.receive``)."""
        from edgelab.peer_messages import receive

        return receive(self, *args)

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


def _unknown_direct(fn: str) -> ValueError:
    from edgelab.allreduce import PEER_FUNCTIONS

    return ValueError(f"fn={fn!r} is not a direct function: one of {', '.join([*DIRECT_FUNCTIONS, *PEER_FUNCTIONS])}")


# The runtime a direct call runs for, on the thread running it (get_worker() knows only tasks).
_direct_call = threading.local()


def _as_device(rt: DeviceRuntime, func: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    _direct_call.runtime = rt
    try:
        return func(*args)
    finally:
        _direct_call.runtime = None


def _runtime(worker: Any = None) -> DeviceRuntime:
    if worker is None and getattr(_direct_call, "runtime", None) is not None:
        return _direct_call.runtime  # type: ignore[no-any-return]
    plugin = (worker or get_worker()).plugins.get(PLUGIN_NAME)
    if plugin is None:
        raise RuntimeError("edgelab device runtime is not installed on this worker")
    return plugin  # type: ignore[no-any-return]


# ----------------------------------------------------------------- tasks ----


def load_shard(
    run_id: str,
    spec: ModelSpec,
    x: np.ndarray,
    y: np.ndarray,
    batch_size: int,
    steps: int,
    user_model: UserModelPayload | None = None,
) -> dict[str, Any]:
    """Keep a shard of the training data on this device (sent by the master) and warm its model.

    The model is traced on real batches of the run's size now, the way its
    rounds will run them (``steps`` batches per round), so that no round's
    measured CPU time holds tracing. A user's model (``edgelab.models.user``)
    comes with its first shard: its architecture and initial weights.
    """
    rt = _runtime()
    if user_model is not None:
        rt.user_models = {user_model.digest: user_model}  # one at a time, as the models themselves
    rt.bytes_received += int(x.nbytes + y.nbytes)
    images = np.asarray(x)
    shard = _Shard(
        x=images,
        y=np.asarray(y, dtype=np.int64),
        channel_axis=np.shape(prepare_images(spec.name, images[:1]))[1:] != images.shape[1:],
    )
    cpu0 = time.process_time()
    _warm(rt.model(spec), shard, batch_size, steps)
    rt.shards[run_id] = shard
    return {
        "device": rt.device,
        "samples": len(shard),
        "bytes": int(x.nbytes + y.nbytes),
        "warm_cpu_s": time.process_time() - cpu0,
    }


def _warm(model: Any, shard: _Shard, batch_size: int, steps: int) -> None:
    # Run a round's own code on real batches, so whatever its first call costs (tracing,
    # eager kernels of the gather, set/get_weights) is paid here. Both compiled steps take
    # any number and size of batches (an epoch's short last one too), so one trace serves all.
    steps = min(steps, 2)
    order = np.arange(min(len(shard), steps * batch_size))
    for _ in range(2):
        _train_steps(model, shard, get_weights(model), order, steps, batch_size)
    # No reset needed: every round and evaluation starts with set_weights, and plain SGD keeps no state.


# Each model's variables in ``model.weights`` order, listed once, with their shapes: Keras walks
# every layer and converts every value for each ``set_weights`` and ``get_weights``, which cost
# more than a LeNet-MLP training step; the raw ops below are the very kernels its assignments run.
_variables: weakref.WeakKeyDictionary[Any, list[tuple[Any, tuple[int, ...]]]] = weakref.WeakKeyDictionary()


def _tf_variables(model: Any) -> list[tuple[Any, tuple[int, ...]]]:
    if model not in _variables:
        _variables[model] = [(v.value, tuple(v.shape)) for v in model.weights]
    return _variables[model]


def set_weights(model: Any, weights: Weights) -> None:
    """``model.set_weights(weights)``: the same values assigned, without the walk over the layers."""
    import tensorflow as tf

    _check_weights(model, weights)
    for (variable, _), value in zip(_tf_variables(model), weights, strict=True):
        tf.raw_ops.AssignVariableOp(resource=variable.handle, value=tf.constant(value, dtype=variable.dtype))


def get_weights(model: Any) -> Weights:
    """``model.get_weights()``, without the walk over the layers."""
    import tensorflow as tf

    return [tf.raw_ops.ReadVariableOp(resource=v.handle, dtype=v.dtype).numpy() for v, _ in _tf_variables(model)]


# A round of one batch as one compiled call per model: the weights go in as one flat buffer per dtype
# (as they travelled, ``edgelab.common.wire``), are assigned, Keras' own train step runs, and the delta comes
# out flat. ``train_on_batch`` with ``set_weights`` and ``get_weights`` around it gives the same values
# bit for bit (tested) but spent 2.5 of its 4 ms on a LeNet-MLP batch in Python around the kernels;
# a concrete function of one tensor per dtype costs 1.5 ms in all.
_fused: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], Any]] = weakref.WeakKeyDictionary()


def _batch_step(model: Any, layout: Layout, x: np.ndarray, y: np.ndarray) -> Any:
    """The compiled one-batch round of ``model`` for flat weights of ``layout`` and batches like ``x``, ``y``."""
    key = (tuple((dtype, shape) for dtype, shape, _ in layout), x.shape[1:], x.dtype.str, y.dtype.str)
    steps = _fused.setdefault(model, {})
    if key not in steps:
        import tensorflow as tf

        _build_metrics(model, x[:1], y[:1])
        variables = [variable for variable, _ in _tf_variables(model)]
        groups = [[i for i, (_, _, g) in enumerate(layout) if g == group] for group in range(_groups(layout))]

        @tf.function(autograph=False)
        def step(flats: tuple[Any, ...], x: Any, y: Any) -> tuple[tuple[Any, ...], Any]:
            values: list[Any] = [None] * len(layout)
            for members, flat in zip(groups, flats, strict=True):
                pieces = tf.split(flat, [int(np.prod(layout[i][1])) for i in members])
                for i, piece in zip(members, pieces, strict=True):
                    values[i] = tf.reshape(piece, layout[i][1])
            for variable, value in zip(variables, values, strict=True):
                variable.assign(value)
            model.reset_metrics()  # the loss of this batch alone, as train_on_batch reports it
            logs = model.train_step((x, y))
            deltas = [tf.reshape(v.read_value() - value, [-1]) for v, value in zip(variables, values, strict=True)]
            return tuple(tf.concat([deltas[i] for i in members], 0) for members in groups), logs["loss"]

        flat_specs = tuple(
            tf.TensorSpec([sum(int(np.prod(layout[i][1])) for i in members)], np.dtype(layout[members[0]][0]))
            for members in groups
        )
        steps[key] = step.get_concrete_function(
            flat_specs, tf.TensorSpec([None, *x.shape[1:]], x.dtype), tf.TensorSpec([None], y.dtype)
        )
    return steps[key]


def _build_metrics(model: Any, x: np.ndarray, y: np.ndarray) -> None:
    """Make the compiled metrics' variables now, from one sample run eagerly (no weight or statistic changes).

    Keras makes them in the first train step. Made inside a traced function,
    they are variables created while tracing, and TensorFlow traces the whole
    step a second time (ResNet-32: 9.1 s of CPU to trace, 4.5 s traced once).
    """
    model.compute_metrics(x, y, model(x, training=False), sample_weight=None)
    model.reset_metrics()


def _tensor(array: np.ndarray) -> Any:
    """``array`` as a TensorFlow tensor on its own memory when TensorFlow can take it, else a copy.

    TensorFlow takes aligned, contiguous, writable numpy memory through DLPack
    as it is (the received weights, a gathered batch): ``tf.constant`` copied
    them, 0.2-0.3 ms of a LeNet-MLP round's 2 ms on a device. The tensor keeps
    the array alive; the step only reads it.
    """
    import tensorflow as tf

    if array.flags.c_contiguous and array.flags.writeable and array.ctypes.data % TENSOR_ALIGNMENT == 0:
        try:
            return tf.experimental.dlpack.from_dlpack(array.__dlpack__())
        except (BufferError, TypeError, ValueError):  # a dtype DLPack does not carry
            pass
    return tf.constant(array)


def _groups(layout: Layout) -> int:
    return max(group for _, _, group in layout) + 1


def _check_weights(model: Any, weights: Weights) -> None:
    variables = _tf_variables(model)
    if len(variables) != len(weights):
        raise ValueError(f"the model has {len(variables)} weights, got {len(weights)} arrays")
    for (variable, shape), value in zip(variables, weights, strict=True):
        if np.shape(value) != shape:
            raise ValueError(f"weight {variable.name} has shape {shape}, got an array of shape {np.shape(value)}")


def _train_steps(
    model: Any, shard: _Shard, weights: Weights, order: np.ndarray, steps: int, batch_size: int
) -> tuple[Packed, float]:
    """Train on the shard's samples ``order`` from ``weights``; the weight delta (packed) and the last loss."""
    if steps == 1:
        _check_weights(model, weights)
        layout, flats = pack(weights)
        x, y = shard.take(order)
        step = _batch_step(model, layout, x, y)
        out, loss = step(tuple(_tensor(f) for f in flats), _tensor(x), _tensor(y))
        return Packed.of(layout, tuple(f.numpy() for f in out)), float(loss)
    set_weights(model, weights)
    # Many batches per round: Keras' own train step, batch after batch in one compiled loop, as
    # fit() runs an epoch (the same steps, bit for bit, tested), the batches gathered in numpy.
    model.reset_metrics()
    for start in range(0, len(order), LOOP_BATCHES * batch_size):
        chunk = order[start : start + LOOP_BATCHES * batch_size]
        full = len(chunk) // batch_size * batch_size
        if full:
            xs, ys = shard.take_batches(chunk[:full].reshape(-1, batch_size))
            _loop_step(model, xs, ys)(xs, ys)
        if full < len(chunk):  # the epoch's last batch may be short: a call of its own
            xs, ys = shard.take_batches(chunk[full:][None])
            _loop_step(model, xs, ys)(xs, ys)
    loss = float(model.get_metrics_result()["loss"])  # the mean over the round's batches, as fit's history reports
    return Packed([after - before for after, before in zip(get_weights(model), weights, strict=True)]), loss


#: Batches a round of many gathers and trains per compiled call (a LeNet-MLP's 32 batches of 64: 6.4 MB).
LOOP_BATCHES = 32
_loops: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], Any]] = weakref.WeakKeyDictionary()


def _loop_step(model: Any, xs: np.ndarray, ys: np.ndarray) -> Any:
    """``model.train_step`` on each of a stack of batches like ``(xs, ys)`` in turn, in one compiled while loop.

    Keras' fit() runs its step in a while loop too (one per batch of its
    iterator); a tf.data iterator cost 17 ms to make, every round, and each
    call of fit's function another 2 ms in Python: a round of 4 LeNet-MLP
    batches took 34 ms against 7 ms for 4 rounds of one batch. Traced once for
    any number and size of batches: left to retrace on new shapes, it did so in
    a run's first round, whose measured CPU time it multiplied by 20 (LeNet-MLP).
    """
    key = (xs.shape[2:], xs.dtype.str, ys.shape[2:], ys.dtype.str)
    loops = _loops.setdefault(model, {})
    if key not in loops:
        import tensorflow as tf

        _build_metrics(model, xs[0, :1], ys[0, :1])

        @tf.function(autograph=False)
        def loop(xs: Any, ys: Any) -> None:
            def body(i: Any) -> tuple[Any]:
                model.train_step((xs[i], ys[i]))
                return (i + 1,)

            tf.while_loop(lambda i: i < tf.shape(xs)[0], body, (tf.constant(0),))

        loops[key] = loop.get_concrete_function(
            tf.TensorSpec([None, None, *xs.shape[2:]], xs.dtype), tf.TensorSpec([None, None, *ys.shape[2:]], ys.dtype)
        )
    return loops[key]


def holds_shard(run_id: str, dask_worker: Any = None) -> bool:
    """Whether this device holds the run's shard (run with ``client.run``)."""
    return run_id in _runtime(dask_worker).shards


def release(run_id: str, dask_worker: Any = None) -> None:
    """Forget a run's shard and all-reduce state (run with ``client.run``)."""
    rt = _runtime(dask_worker)
    rt.shards.pop(run_id, None)
    rt.peers.pop(run_id, None)
    rt.residuals.pop(run_id, None)


def initial_weights(spec: ModelSpec) -> Weights:
    """The seeded initial weights every device and the parameter server start from."""
    rt = _runtime()
    rt.model(spec)
    weights = [w.copy() for w in rt.initial[spec]]
    rt.bytes_sent += nbytes(weights)
    return weights


@dataclass(frozen=True)
class RoundTask:
    """One device's part of one synchronization round."""

    run_id: str
    spec: ModelSpec
    device_index: int
    round: int
    epoch: int
    first_step: int  # index of the first batch of this round within the epoch
    steps: int  # batches to train before synchronizing (per local epoch)
    batch_size: int
    seed: int
    local_epochs: int = 1  # epochs of this round, from ``epoch`` on (federated averaging's E)
    # Compresses the delta before it is sent back (edgelab.sync.compress); None sends it whole.
    compressor: Any = None


def train_round(task: RoundTask, weights: Weights) -> tuple[Any, dict[str, Any]]:
    """Train ``task.steps`` batches from ``weights`` and return the weight delta.

    Returns
    -------
    delta, record
        ``delta`` = local weights after training minus ``weights`` (``Packed``:
        it arrives as the list of arrays, in one buffer), or what
        ``task.compressor`` made of it (plus the residual it kept, under error
        feedback: a device that restarts loses it, as a board would); ``record``
        holds what was measured: CPU seconds of this worker process during the
        compute (all threads), host wall seconds, bytes in and out, samples,
        loss and the memory working set above the framework baseline; and, under
        ``"monitor"``, the resource samples taken since the previous round.
    """
    rt = _runtime()
    shard = rt.shards.get(task.run_id)
    if shard is None:
        raise ShardMissingError(rt.device, task.run_id)
    received = nbytes(weights)
    rt.bytes_received += received
    pulled = weights  # what the round started from (several local epochs reassign ``weights``)
    model = rt.model(task.spec)

    # Each device walks its data in its own seeded order, fresh every epoch.
    start = task.first_step * task.batch_size
    stop = start + task.steps * task.batch_size
    orders = [shard.order(task.seed, task.device_index, task.epoch + e)[start:stop] for e in range(task.local_epochs)]

    # The step's peak, not the RSS after it: the activations are freed once the step ends.
    peak_measured = process_memory.reset_peak()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    delta, loss = _train_steps(model, shard, weights, orders[0], task.steps, task.batch_size)
    step = delta
    for order in orders[1:]:  # each local epoch from where the last ended; the delta is their sum
        weights = [w + d for w, d in zip(weights, step.arrays, strict=True)]
        step, loss = _train_steps(model, shard, weights, order, task.steps, task.batch_size)
        delta = Packed([d + m for d, m in zip(delta.arrays, step.arrays, strict=True)])
    cpu_s, wall_s = time.process_time() - cpu0, time.perf_counter() - wall0
    peak = process_memory.peak_bytes() if peak_measured else None

    dense = nbytes(delta.arrays)
    sent = dense
    if task.compressor is not None:
        cpu_c = time.process_time()
        delta = _compress(rt, task, delta.arrays, loss, pulled)
        cpu_s += time.process_time() - cpu_c  # the device compresses: its time is the device's
        sent = serialized_bytes(delta)
    rt.bytes_sent += sent
    rss = process_memory.rss_bytes()
    measured = {
        "pid": os.getpid(),
        "samples": int(sum(len(o) for o in orders)),
        "cpu_s": cpu_s,
        "wall_s": wall_s,
        "bytes_received": received,
        "bytes_sent": sent,
        "bytes_sent_dense": dense,
        "loss": loss,
        "rss_bytes": rss,
        "working_set_bytes": rss - rt.baseline_rss,
        "peak_working_set_bytes": (peak - rt.baseline_rss) if peak is not None else None,
    }
    # The monitor's samples travel with the result, so a device that dies loses only its last round's.
    monitor = rt.sampler.drain() if rt.sampler is not None else []
    return delta, round_wire.record(task, rt.device, measured, monitor)


def _compress(rt: DeviceRuntime, task: RoundTask, delta: Weights, loss: float, weights: Weights) -> Any:
    """The round's delta as ``task.compressor`` sends it, with the state it keeps on this device.

    ``loss`` is the round's training loss and ``weights`` what it started from (eSGD chooses by them).
    """
    from edgelab.sync.compress import compress_with_feedback

    rng = np.random.default_rng([task.seed, task.device_index, task.round])
    kept = rt.residuals.get(task.run_id)
    # A round run again (a device was lost mid-round) starts from the residual its first try started from:
    # folding the cut try's leftover in as well would count it twice.
    start = None if kept is None else kept[1] if kept[0] == task.round else kept[2]
    encoded, after = compress_with_feedback(task.compressor, delta, start, rng, loss=loss, weights=weights)
    rt.residuals[task.run_id] = (task.round, start, after)
    return encoded


def serialized_bytes(value: Any) -> int:
    """Bytes ``value`` takes on the wire, as Dask serializes it (header and frames)."""
    from distributed.protocol import serialize_bytelist

    return int(sum(memoryview(frame).nbytes for frame in serialize_bytelist(value)))


def evaluate(spec: ModelSpec, weights: Weights, x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """Accuracy and loss of ``weights`` on held-out data, computed on this device."""
    model = _runtime().model(spec)
    set_weights(model, weights)
    result = model.evaluate(prepare_images(spec.name, x), y, batch_size=1000, verbose=0, return_dict=True)
    return {"accuracy": float(result["accuracy"]), "loss": float(result["loss"])}


def start_monitor(interval_s: float = DEFAULT_INTERVAL_S, dask_worker: Any = None) -> str:
    """Start (or restart) this device's resource sampler (run with ``client.run``)."""
    rt = _runtime(dask_worker)
    if rt.sampler is not None:
        rt.sampler.stop()
    rt.sampler = ResourceSampler(counters=rt.counters, interval_s=interval_s)
    rt.sampler.start()
    return rt.device


def stop_monitor(dask_worker: Any = None) -> list[dict[str, float]]:
    """Stop this device's sampler and return its samples (run with ``client.run``)."""
    rt = _runtime(dask_worker)
    if rt.sampler is None:
        return []
    samples = rt.sampler.stop()
    rt.sampler = None
    return samples


# Rounds of one model, batch size and number of batches cost alike; others need not (DeviceRuntime.run).
train_round.cost_key = lambda task, _weights: (task.spec, task.steps, task.batch_size)  # type: ignore[attr-defined]


def echo(*values: Any) -> tuple[Any, ...]:
    """The values, sent back: what a direct call costs without its work (``benchmarks/bench_sync.py``)."""
    return values


#: What a client may call on a device directly, without the scheduler (``DeviceRuntime._direct``).
DIRECT_FUNCTIONS: dict[str, Callable[..., Any]] = {"train_round": train_round, "echo": echo}


def probe_memory(model: str | UserModelPayload, batch_size: int, timeout_s: float = 600.0) -> dict[str, float]:
    """What a training step of ``model`` needs on this device, measured in a fresh process (``memory_probe``).

    ``model``: a built-in model's name, or a user's model's payload (handed to the process as a file).
    """
    import json
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory(prefix="edgelab-probe-") as tmp:
        arg = model
        if isinstance(model, UserModelPayload):
            arg = str(Path(tmp) / "model.npz")
            model.save(Path(arg))
        out = subprocess.run(
            [sys.executable, "-m", "edgelab.emulation.memory_probe", arg, str(batch_size)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=True,
        )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))
