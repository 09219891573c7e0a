"""Tests for edgelab.models.builtin: parameter counts, shapes, seeding, input preparation, counted FLOPs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from edgelab.common.errors import ConfigError
from edgelab.models.builtin import (
    MODELS,
    ModelSpec,
    activation_floats_per_sample,
    build_model,
    crop,
    parameter_count,
    prepare_images,
)
from edgelab.models.costs import training_flops_by_class

# Hand-counted from the layer shapes in the module docstring (weights + biases).
MLP_PARAMS = (784 * 128 + 128) + (128 * 64 + 64) + (64 * 10 + 10)
CNN_PARAMS = (
    (5 * 5 * 1 * 20 + 20)  # conv1
    + (5 * 5 * 20 * 50 + 50)  # conv2
    + (4 * 4 * 50 * 500 + 500)  # fc 800 -> 500
    + (500 * 10 + 10)  # fc 500 -> 10
)


@pytest.fixture(scope="module")
def built() -> dict[str, Any]:
    """Both Keras models built once for the module (importing TensorFlow is slow)."""
    return {name: build_model(ModelSpec(name, seed=0)) for name in MODELS}


def test_hand_counted_totals_match_the_paper_numbers() -> None:
    # Assert
    assert MLP_PARAMS == 109386
    assert CNN_PARAMS == 431080


@pytest.mark.parametrize(("name", "expected"), [("mlp", MLP_PARAMS), ("cnn", CNN_PARAMS)])
def test_parameter_count_matches_hand_count_and_keras(built: dict[str, Any], name: str, expected: int) -> None:
    # Execute
    analytic = parameter_count(name)
    keras_count = built[name].count_params()

    # Assert
    assert analytic == expected
    assert keras_count == expected


@pytest.mark.parametrize("name", MODELS)
def test_build_model_outputs_ten_classes(built: dict[str, Any], name: str) -> None:
    # Execute
    shape = tuple(built[name].output_shape)

    # Assert
    assert shape == (None, 10)


@pytest.mark.parametrize(("name", "batch"), [("mlp", 1), ("mlp", 3), ("cnn", 2)])
def test_predictions_are_probability_rows(built: dict[str, Any], name: str, batch: int) -> None:
    # Prepare
    rng = np.random.default_rng(0)
    x = prepare_images(name, rng.integers(0, 256, (batch, 28, 28), dtype=np.uint8))

    # Execute
    probs = np.asarray(built[name].predict(x, verbose=0))

    # Assert
    assert probs.shape == (batch, 10)
    np.testing.assert_allclose(probs.sum(axis=1), np.ones(batch), rtol=1e-5)


@pytest.mark.parametrize("name", MODELS)
def test_same_seed_gives_identical_initial_weights(built: dict[str, Any], name: str) -> None:
    # Execute
    again = build_model(ModelSpec(name, seed=0)).get_weights()

    # Assert
    first = built[name].get_weights()
    assert len(again) == len(first)
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", ["cnn", "resnet8"])
def test_other_threads_drawing_random_numbers_do_not_change_the_weights(built: dict[str, Any], name: str) -> None:
    # A Dask worker's event loop draws from Python's global `random` while a task builds a model;
    # Keras seeds an initializer from that generator when it is given none.
    import random
    import threading

    quiet = build_model(ModelSpec(name, seed=0)).get_weights()
    stop = threading.Event()

    def draw() -> None:
        while not stop.is_set():
            random.random()

    noise = threading.Thread(target=draw, daemon=True)
    noise.start()
    try:
        noisy = [build_model(ModelSpec(name, seed=0)).get_weights() for _ in range(3)]
    finally:
        stop.set()
        noise.join()

    for weights in noisy:
        for a, b in zip(quiet, weights, strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", MODELS)
def test_different_seed_gives_different_initial_weights(built: dict[str, Any], name: str) -> None:
    # Execute
    other = build_model(ModelSpec(name, seed=1)).get_weights()

    # Assert: the kernels (biases start at zero either way) differ
    first = built[name].get_weights()
    kernels_differ = [not np.array_equal(a, b) for a, b in zip(first, other, strict=True) if a.ndim > 1]
    assert kernels_differ and all(kernels_differ)


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"name": "resnet"}, "model"),
        ({"name": ""}, "model"),
        ({"name": "mlp", "learning_rate": 0.0}, "learning_rate"),
        ({"name": "cnn", "learning_rate": -0.1}, "learning_rate"),
        ({"name": "mlp", "learning_rate": float("nan")}, "learning_rate"),
    ],
)
def test_model_spec_rejects_bad_values(kwargs: dict[str, Any], parameter: str) -> None:
    # Execute
    with pytest.raises(ConfigError, match=parameter) as info:
        ModelSpec(**kwargs)

    # Assert
    assert info.value.parameter == parameter


@pytest.mark.parametrize("fn", [parameter_count, activation_floats_per_sample])
def test_unknown_model_name_raises_config_error(fn: Any) -> None:
    # Execute / Assert
    with pytest.raises(ConfigError, match="model"):
        fn("vgg")


def test_activation_floats_positive_and_cnn_larger() -> None:
    # Execute
    mlp = activation_floats_per_sample("mlp")
    cnn = activation_floats_per_sample("cnn")

    # Assert
    assert mlp == 784 + 128 + 64 + 10
    assert 0 < mlp < cnn


@pytest.mark.parametrize("n", [1, 2, 5])
@pytest.mark.parametrize(("name", "tail"), [("mlp", (28, 28)), ("cnn", (28, 28, 1))])
def test_prepare_images_shape_dtype_and_range(n: int, name: str, tail: tuple[int, ...]) -> None:
    # Prepare: include both extremes so the scaling is pinned
    images = np.random.default_rng(n).integers(0, 256, (n, 28, 28), dtype=np.uint8)
    images[0, 0, 0], images[-1, -1, -1] = 0, 255

    # Execute
    x = np.asarray(prepare_images(name, images))

    # Assert
    assert x.shape == (n, *tail)
    assert x.dtype == np.float32
    assert x.min() == 0.0 and x.max() == 1.0
    np.testing.assert_allclose(x.reshape(n, 28, 28), images / 255.0, rtol=1e-6)


def test_weight_decay_shrinks_weights_not_biases_by_lr_times_decay() -> None:
    # Prepare: the same seeded MLP with and without decay, one identical batch
    rng = np.random.default_rng(3)
    x = prepare_images("mlp", rng.integers(0, 256, size=(16, 28, 28), dtype=np.uint8))
    y = rng.integers(0, 10, size=16)
    plain = build_model(ModelSpec("mlp", learning_rate=0.05, seed=0))
    decayed = build_model(ModelSpec("mlp", learning_rate=0.05, seed=0, weight_decay=0.1))
    # Biases start at zero, where decay would not show: give them a value first
    start = [w if w.ndim > 1 else np.full_like(w, 0.5) for w in plain.get_weights()]
    plain.set_weights(start)
    decayed.set_weights(start)

    # Execute
    plain.train_on_batch(x, y)
    decayed.train_on_batch(x, y)

    # Assert: the same gradient step; decay took lr * wd * w0 more off each kernel, nothing off biases
    for w0, a, b in zip(start, plain.get_weights(), decayed.get_weights(), strict=True):
        expected = -0.05 * 0.1 * w0 if w0.ndim > 1 else np.zeros_like(w0)
        np.testing.assert_allclose(b - a, expected, atol=1e-6)


def _training_step_ops(net: Any, batch: int) -> list[Any]:
    """The operations of one training step of ``net`` that its weights' gradients need.

    TensorFlow runs a function's stateless operations only when an output
    needs them: those are the ones counted here.
    """
    import tensorflow as tf

    x = tf.zeros((batch, *net.input_shape[1:]))
    y = tf.zeros((batch,), tf.int32)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy()

    @tf.function
    def step(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, net(x, training=True))
        return tape.gradient(loss, net.trainable_variables)

    graph = step.get_concrete_function(x, y).graph
    needed, todo = {}, [t.op for t in graph.outputs]
    while todo:
        op = todo.pop()
        if op.name not in needed:
            needed[op.name] = op
            todo += [t.op for t in op.inputs] + list(op.control_inputs)
    return list(needed.values())


def test_the_counted_training_flops_are_the_products_tensorflow_runs(built: dict[str, Any]) -> None:
    # Arrange: the matrix products of a real training step of the MLP, read from its graph.
    batch = 8
    flops = 0
    for op in _training_step_ops(built["mlp"], batch):
        if op.type == "MatMul":
            a, b = (t.shape for t in op.inputs)
            m, k = (a[1], a[0]) if op.get_attr("transpose_a") else (a[0], a[1])
            n = b[0] if op.get_attr("transpose_b") else b[1]
            flops += 2 * m * k * n

    # Assert: three passes per layer but no gradient with respect to the images (two passes for the first).
    assert flops / batch == training_flops_by_class("mlp")["dense"] == 2 * (2 * 784 * 128 + 3 * (128 * 64 + 64 * 10))


def test_a_resnet_takes_the_centre_28x28_of_cifars_images_as_mxnets_example_does() -> None:
    # Prepare: 32x32 images whose pixels say where they are
    rng = np.random.default_rng(4)
    images = rng.integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)

    # Execute
    x = np.asarray(prepare_images("resnet8", images))
    model = build_model(ModelSpec("resnet8", seed=0))

    # Assert: the centre square, scaled; the network takes that size; other models and 28x28 images are untouched
    np.testing.assert_array_equal(x, images[:, 2:30, 2:30].astype(np.float32) / np.float32(255.0))
    assert tuple(model.input_shape) == (None, 28, 28, 3)
    assert crop("resnet8", images[:, 2:30, 2:30]).shape == (3, 28, 28, 3)
    assert crop("mlp", images).shape == images.shape
