"""A device's state: its shard keeps the raw images (each batch prepared as gathered); it holds one model at a time."""

from __future__ import annotations

import numpy as np
import pytest

from edgelab.models import ModelSpec, prepare_images
from edgelab.runtime import DeviceRuntime, _Shard


@pytest.mark.parametrize(("name", "shape"), [("mlp", (28, 28)), ("cnn", (28, 28)), ("resnet8", (32, 32, 3))])
def test_batches_equal_the_prepared_images_bit_for_bit(name: str, shape: tuple[int, ...]) -> None:
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(50, *shape), dtype=np.uint8)
    y = rng.integers(0, 10, size=50)
    prepared = np.asarray(prepare_images(name, x))
    shard = _Shard(
        x=tf.convert_to_tensor(x),
        y=tf.convert_to_tensor(y),
        channel_axis=prepared.shape[1:] != x.shape[1:],
    )
    order = rng.permutation(50)[:16]

    images, labels = shard.take(tf.constant(order))
    via_dataset = next(iter(shard.batches(order, 16)))

    expected = prepared[np.sort(order)]
    assert shard.x.dtype == tf.uint8  # a quarter of the float32 bytes on the device
    np.testing.assert_array_equal(images.numpy(), expected)
    np.testing.assert_array_equal(via_dataset[0].numpy(), expected)
    np.testing.assert_array_equal(labels.numpy(), y[np.sort(order)])


def test_a_device_keeps_only_the_model_it_was_last_asked_for() -> None:
    rt = DeviceRuntime()
    mlp, cnn = ModelSpec("mlp"), ModelSpec("cnn")

    first = rt.model(mlp)
    assert rt.model(mlp) is first  # kept while the same spec is asked for
    rt.model(cnn)

    assert list(rt.models) == [cnn]
    assert list(rt.initial) == [cnn]
