"""A device's state: its shard keeps the raw images (each batch prepared as gathered); it holds one model at a time."""

from __future__ import annotations

import numpy as np
import pytest

from edgelab.models.builtin import ModelSpec, prepare_images
from edgelab.runtime.plugin import DeviceRuntime
from edgelab.runtime.steps import Shard
from edgelab.runtime.tasks import shard_of


@pytest.mark.parametrize(("name", "shape"), [("mlp", (28, 28)), ("cnn", (28, 28)), ("resnet8", (32, 32, 3))])
def test_batches_equal_the_prepared_images_bit_for_bit(name: str, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(50, *shape), dtype=np.uint8)
    y = rng.integers(0, 10, size=50)
    prepared = np.asarray(prepare_images(name, x))
    shard = shard_of(ModelSpec(name), x, y)  # a ResNet's shard holds the 28x28 crops, cut once
    order = rng.permutation(50)[:16]

    images, labels = shard.take(order)

    expected = prepared[np.sort(order)]
    assert shard.x.dtype == np.uint8  # a quarter of the float32 bytes on the device
    np.testing.assert_array_equal(images, expected)
    np.testing.assert_array_equal(labels, y[np.sort(order)])


@pytest.mark.parametrize("channel_axis", [False, True])
def test_stacked_batches_equal_each_batch_taken_alone(channel_axis: bool) -> None:
    rng = np.random.default_rng(1)
    shard = Shard(x=rng.integers(0, 256, (40, 5, 5), np.uint8), y=rng.integers(0, 10, 40), channel_axis=channel_axis)
    rows = rng.permutation(40)[:36].reshape(3, 12)

    images, labels = shard.take_batches(rows)

    assert images.shape == ((3, 12, 5, 5, 1) if channel_axis else (3, 12, 5, 5))
    for i, row in enumerate(rows):
        alone_images, alone_labels = shard.take(row)
        np.testing.assert_array_equal(images[i].view(np.int32), alone_images.view(np.int32))
        np.testing.assert_array_equal(labels[i], alone_labels)


def test_a_batch_gathered_in_numpy_equals_tensorflows_eager_gather_on_every_uint8_value() -> None:
    import tensorflow as tf

    # Prepare: every value a pixel can take, in a shard of one 16x16 image
    x = np.arange(256, dtype=np.uint8).reshape(1, 16, 16)
    shard = Shard(x=x, y=np.zeros(1, np.int64), channel_axis=False)

    # Execute: numpy's gather and scaling (one-batch rounds) against TensorFlow's eager one (the old path)
    images, _ = shard.take(np.array([0]))
    eager = (tf.cast(tf.gather(tf.constant(x), tf.constant([0])), tf.float32) / 255.0).numpy()

    # Assert: the same float32 bits
    np.testing.assert_array_equal(images.view(np.int32), eager.view(np.int32))


def test_an_epochs_order_is_made_once_and_changes_with_the_epoch() -> None:
    shard = Shard(x=np.zeros((10, 2, 2), np.uint8), y=np.zeros(10, np.int64), channel_axis=False)

    first = shard.order(0, 1, 0)

    assert shard.order(0, 1, 0) is first
    np.testing.assert_array_equal(first, np.random.default_rng((0, 1, 0)).permutation(10))
    assert not np.array_equal(shard.order(0, 1, 1), first)


def test_a_device_keeps_only_the_model_it_was_last_asked_for() -> None:
    rt = DeviceRuntime()
    mlp, cnn = ModelSpec("mlp"), ModelSpec("cnn")

    first = rt.model(mlp)
    assert rt.model(mlp) is first  # kept while the same spec is asked for
    rt.model(cnn)

    assert list(rt.models) == [cnn]
    assert list(rt.initial) == [cnn]


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_a_round_of_many_batches_trains_as_keras_fit_does_bit_for_bit(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from edgelab.models.builtin import build_model
    from edgelab.runtime import steps
    from edgelab.runtime.steps import get_weights, set_weights, train_steps

    # Prepare: a seeded model with weight decay, 300 samples in a seeded order: 5 batches of 64, the last short
    # (with LOOP_BATCHES at 2, in three compiled calls)
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, size=(300, 28, 28), dtype=np.uint8)
    y = rng.integers(0, 10, size=300)
    model = build_model(ModelSpec(name, weight_decay=1e-4))
    weights = get_weights(model)
    shard = shard_of(ModelSpec(name), x, y)
    order = rng.permutation(300)
    monkeypatch.setattr(steps, "LOOP_BATCHES", 2)

    # Execute: the runtime's round, twice (the second reuses its compiled loop), and Keras' fit on the same
    # batches, gathered and scaled in TensorFlow
    train_steps(model, shard, weights, order, 5, 64)
    delta, loss = train_steps(model, shard, weights, order, 5, 64)
    set_weights(model, weights)
    import tensorflow as tf

    def take(idx: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        idx = tf.sort(idx)
        images = tf.cast(tf.gather(tf.constant(x), idx), tf.float32) / 255.0
        return (images[..., None] if name == "cnn" else images), tf.gather(tf.constant(y), idx)

    ref = tf.data.Dataset.from_tensor_slices(order).batch(64).map(take)
    history = model.fit(ref, epochs=1, shuffle=False, verbose=0)

    # Assert
    for got, after, before in zip(delta.arrays, get_weights(model), weights, strict=True):
        np.testing.assert_array_equal(got, after - before)
    assert loss == float(history.history["loss"][-1])


@pytest.mark.parametrize(("name", "shape"), [("mlp", (28, 28)), ("cnn", (28, 28)), ("resnet8", (32, 32, 3))])
def test_a_round_of_one_batch_trains_as_train_on_batch_does(name: str, shape: tuple[int, ...]) -> None:
    from edgelab.models.builtin import build_model
    from edgelab.runtime.steps import get_weights, train_steps

    # Prepare: a seeded model with weight decay (ResNet: batch normalisation's moving statistics too),
    # two models from the same seed, one for the compiled round and one for Keras' own path
    rng = np.random.default_rng(2)
    x = rng.integers(0, 256, size=(200, *shape), dtype=np.uint8)
    y = rng.integers(0, 10, size=200)
    fused, keras_path = (build_model(ModelSpec(name, weight_decay=1e-4)) for _ in range(2))
    weights = get_weights(fused)
    shard = shard_of(ModelSpec(name), x, y)

    for step in range(3):
        order = rng.permutation(200)[: 64 if step < 2 else 37]  # a short batch retraces nothing wrong
        # Execute: the runtime's compiled round, and set_weights + train_on_batch + get_weights
        delta, loss = train_steps(fused, shard, weights, order, 1, 64)
        keras_path.set_weights(weights)
        logs = keras_path.train_on_batch(*shard.take(order), return_dict=True)
        after = keras_path.get_weights()

        # Assert: the same delta and loss, bit for bit, every step (the server's weights move on between them)
        for got, a, b in zip(delta.arrays, after, weights, strict=True):
            if name.startswith("resnet"):
                # On a ResNet's 28x28 crops oneDNN sums a 64-image batch's convolution gradients in another order
                # in the runtime's shape-polymorphic trace than in train_on_batch's: the same step, float rounding
                # apart: each change within 0.1% of the array's largest (the weights' own float32 rounding after
                # the step is up to a tenth of that).
                np.testing.assert_allclose(got, a - b, rtol=0, atol=1e-3 * float(np.abs(a - b).max()))
            else:
                np.testing.assert_array_equal(got, a - b)
        assert loss == float(logs["loss"])
        weights = [w + d for w, d in zip(weights, delta.arrays, strict=True)]


@pytest.mark.parametrize("steps", [1, 3])
def test_a_rounds_compiled_step_traces_the_models_train_step_once(steps: int) -> None:
    from edgelab.models.builtin import build_model
    from edgelab.runtime.steps import get_weights, train_steps

    # Prepare: a fresh model (its metrics not made yet), its train step counted as it is traced
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, size=(96, 28, 28), dtype=np.uint8)
    y = rng.integers(0, 10, size=96)
    model = build_model(ModelSpec("mlp"))
    traced = []
    train_step = model.train_step
    model.train_step = lambda data: traced.append(1) or train_step(data)

    # Execute: two rounds of one batch (one compiled call each) or of three (one compiled loop)
    for _ in range(2):
        train_steps(model, Shard(x=x, y=y, channel_axis=False), get_weights(model), np.arange(96), steps, 32)

    # Assert: traced once, not once more for the metric variables the first trace would have made
    assert len(traced) == 1


def test_a_round_of_one_batch_refuses_weights_of_another_model() -> None:
    from edgelab.models.builtin import build_model
    from edgelab.runtime.steps import get_weights, train_steps

    model = build_model(ModelSpec("mlp"))
    shard = Shard(x=np.zeros((4, 28, 28), np.uint8), y=np.zeros(4, np.int64), channel_axis=False)
    weights = get_weights(model)

    with pytest.raises(ValueError, match="weights, got 5 arrays"):
        train_steps(model, shard, weights[:5], np.arange(4), 1, 4)
    with pytest.raises(ValueError, match="has shape"):
        train_steps(model, shard, [w.T for w in weights], np.arange(4), 1, 4)


def test_weights_off_the_wire_go_to_the_step_uncopied_and_train_to_the_same_bits() -> None:
    import socket
    import threading

    from edgelab.common.wire import TENSOR_ALIGNMENT, Packed, pack
    from edgelab.models.builtin import build_model
    from edgelab.runtime.channel import encode, receive_message, send_message
    from edgelab.runtime.steps import _tensor, get_weights, train_steps

    # Prepare: a model's weights received as a device receives them, over a real socket
    model = build_model(ModelSpec("mlp"))
    weights = get_weights(model)
    left, right = socket.socketpair()
    with left, right:
        sender = threading.Thread(target=send_message, args=(left, encode(Packed(weights))))
        sender.start()
        received = receive_message(right)
        sender.join()
    (flat,) = pack(received)[1]
    rng = np.random.default_rng(3)
    shard = Shard(x=rng.integers(0, 256, (64, 28, 28), np.uint8), y=rng.integers(0, 10, 64), channel_axis=False)

    # Execute / Assert: the received buffer is aligned, and its tensor is that very memory (a write shows through)
    assert flat.ctypes.data % TENSOR_ALIGNMENT == 0
    tensor = _tensor(flat)
    first = flat[0]
    flat[0] = 7.0
    assert tensor.numpy()[0] == 7.0
    flat[0] = first
    # ... while an unaligned array is copied
    unaligned = np.frombuffer(bytearray(8 + flat.nbytes), np.uint8)[4 : 4 + flat.nbytes].view(np.float32)
    unaligned[:] = flat
    copied = _tensor(unaligned)
    unaligned[0] = 7.0
    assert copied.numpy()[0] == first

    # Execute: the same round from the received weights (uncopied) and from plain arrays (copied)
    order = rng.permutation(64)
    uncopied, loss_uncopied = train_steps(model, shard, received, order, 1, 64)
    plain, loss_plain = train_steps(model, shard, [w.copy() for w in weights], order, 1, 64)

    # Assert: bit for bit
    for a, b in zip(uncopied.arrays, plain.arrays, strict=True):
        np.testing.assert_array_equal(a.view(np.int32), b.view(np.int32))
    assert loss_uncopied == loss_plain
