"""A device's training steps in TensorFlow: its shard, and a round of one batch or of many as one compiled call.

The weights go in and come out without Keras' walk over the layers: the very
kernels its assignments run, on variables listed once per model.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgelab.common.wire import TENSOR_ALIGNMENT, Layout, Packed, aligned_empty, pack
from edgelab.runtime.protocol import Weights


@dataclass
class Shard:
    """A device's shard of a run's training data, and how a batch of it is gathered."""

    # The images stay uint8 (a quarter of float32: 154 MB, not 614 MB, for all
    # of CIFAR-10 on one device) and each batch is scaled as it is gathered, to
    # the very floats ``edgelab.models.builtin.prepare_images`` gives, in numpy (bit for
    # bit TensorFlow's eager gather and scaling, tested on every uint8 value, at
    # a twentieth of its cost).
    x: np.ndarray  # (n, 28, 28) or (n, 28, 28, 3) (a ResNet's crop) uint8 images, or a user's float32 features
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
        # uint8 images scale to [0, 1]; a user's float features go in as they are (divided by one).
        scale = np.float32(255.0) if self.x.dtype == np.uint8 else np.float32(1.0)
        x = np.divide(self.x[idx], scale, out=aligned_empty((*idx.shape, *self.x.shape[1:]), np.float32))
        return (x[..., None] if self.channel_axis else x), self.y[idx]


def warm(model: Any, shard: Shard, batch_size: int, steps: int) -> None:
    """Trace ``model``'s compiled steps on real batches now, so that no round's measured CPU time holds it."""
    # Run a round's own code on real batches, so whatever its first call costs (tracing,
    # eager kernels of the gather, set/get_weights) is paid here. Both compiled steps take
    # any number and size of batches (an epoch's short last one too), so one trace serves all.
    steps = min(steps, 2)
    order = np.arange(min(len(shard), steps * batch_size))
    for _ in range(2):
        train_steps(model, shard, get_weights(model), order, steps, batch_size)


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


def train_steps(
    model: Any, shard: Shard, weights: Weights, order: np.ndarray, steps: int, batch_size: int
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
    reset_metrics, mean_loss = _metric_calls(model, shard, order)
    reset_metrics()
    for start in range(0, len(order), LOOP_BATCHES * batch_size):
        chunk = order[start : start + LOOP_BATCHES * batch_size]
        full = len(chunk) // batch_size * batch_size
        if full:
            xs, ys = shard.take_batches(chunk[:full].reshape(-1, batch_size))
            _loop_step(model, xs, ys)(xs, ys)
        if full < len(chunk):  # the epoch's last batch may be short: a call of its own
            xs, ys = shard.take_batches(chunk[full:][None])
            _loop_step(model, xs, ys)(xs, ys)
    loss = float(mean_loss())  # the mean over the round's batches, as fit's history reports
    return Packed([after - before for after, before in zip(get_weights(model), weights, strict=True)]), loss


_metrics: weakref.WeakKeyDictionary[Any, tuple[Any, Any]] = weakref.WeakKeyDictionary()


def _metric_calls(model: Any, shard: Shard, order: np.ndarray) -> tuple[Any, Any]:
    """``model.reset_metrics`` and its mean training loss as compiled calls, made once per model.

    Called from Python, Keras resets and reads its metrics variable by variable:
    1.8 ms of a LeNet-MLP device's 4 ms round of two batches, where many virtual
    devices share a process (``edgelab.runtime.virtual_host``) and each round is
    short; compiled, the same ops cost one call each.
    """
    if model not in _metrics:
        import tensorflow as tf

        x, y = shard.take(order[:1])
        _build_metrics(model, x, y)
        reset = tf.function(model.reset_metrics, autograph=False).get_concrete_function()
        loss = tf.function(lambda: model.get_metrics_result()["loss"], autograph=False).get_concrete_function()
        _metrics[model] = reset, loss
    return _metrics[model]


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
