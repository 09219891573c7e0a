"""Pipelined inference over a real Dask cluster: outputs equal the unsplit model's, devices recover."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.common.errors import ConfigError
from edgelab.pipeline.partition import partition, stage_model
from edgelab.pipeline.stream import Placement, StageSpec, stream
from edgelab.runtime.devices import connect


def _residual_model():  # type: ignore[no-untyped-def]
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((16, 16, 3))
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(inputs)
    y = keras.layers.Conv2D(8, 3, padding="same")(x)
    x = keras.layers.Add()([x, y])  # a residual block: no cut inside it
    x = keras.layers.Conv2D(16, 3, strides=2, padding="same", activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(5, activation="softmax")(x)
    return keras.Model(inputs, outputs)


@pytest.fixture(scope="module")
def cluster() -> Iterator[DeviceCluster]:
    with connect(3, profile="pi4b", dashboard_address="127.0.0.1:0") as c:
        yield c


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    return np.random.default_rng(0).random((50, 16, 16, 3), dtype=np.float32)


def test_pipelined_outputs_equal_the_unsplit_model(cluster: DeviceCluster, images: np.ndarray) -> None:
    # Prepare: the model cut into three stages, one per device
    model = _residual_model()
    cut = partition(model, 3)
    stages = {f"stage-{s.index}": stage_model(model, s) for s in cut.stages}
    # Execute: 50 images in micro-batches of 8 (the last one short), at most 3 in flight
    result = stream(
        cluster, Placement.pipeline(list(stages), cluster.devices), stages, images, micro_batch=8, max_in_flight=3
    )
    # Assert: the same outputs as the whole model, and every stage ran every micro-batch on its own device
    np.testing.assert_allclose(result.outputs[0], model.predict(images, verbose=0), atol=1e-5, rtol=0)
    assert len(result.records) == 3 * 7
    by_stage = result.records.groupby("stage")["device"].unique()
    assert {s: list(d) for s, d in by_stage.items()} == {f"stage-{i + 1}": [cluster.devices[i]] for i in range(3)}
    # Bytes passed on are the activations really sent: stage 1's output for 50 images
    first = cut.stages[0]
    assert result.records[result.records["stage"] == "stage-1"]["bytes_out"].sum() == 50 * first.output_bytes
    # The computing threads' CPU is part of the process's
    assert (result.records["compute_cpu_s"] > 0).all()
    assert (result.records["compute_cpu_s"] <= result.records["cpu_s"] + 1e-3).all()
    # Each device's process CPU over the whole stream holds its micro-batches' own, and its event loop's (read on
    # the loop itself, not NaN) is a part of it
    inside = result.records.groupby("device")["cpu_s"].sum()
    cpu = result.device_cpu
    assert sorted(cpu.index) == sorted(cluster.devices)
    assert (cpu["process_s"] >= inside[cpu.index]).all()
    assert ((cpu["event_loop_s"] > 0) & (cpu["event_loop_s"] < cpu["process_s"])).all()


def test_ensemble_sends_every_input_to_every_member(cluster: DeviceCluster, images: np.ndarray) -> None:
    # Prepare: two members (the same model twice) on two devices
    model = _residual_model()
    placement = Placement.ensemble(["a", "b"], cluster.devices)
    # Execute
    result = stream(cluster, placement, {"a": model, "b": model}, images, micro_batch=16)
    # Assert: both members answered every image, the master sent each micro-batch twice
    expected = model.predict(images, verbose=0)
    for out in result.outputs:
        np.testing.assert_allclose(out, expected, atol=1e-5, rtol=0)
    assert len(result.sends) == 2 * 4


def test_members_given_as_weights_on_one_built_architecture_answer_as_their_own_models(
    cluster: DeviceCluster, images: np.ndarray
) -> None:
    # Prepare: two members of one architecture with different weights; the second only as a StageSpec
    import keras

    first = _residual_model()
    keras.utils.set_random_seed(1)
    second = keras.models.clone_model(first)  # same layers, its own initial weights
    spec = StageSpec.like(first, second.get_weights())
    # Execute
    result = stream(cluster, Placement.ensemble(["a", "b"], cluster.devices), {"a": first, "b": spec}, images)
    # Assert: the spec member answered exactly as its own model, not as the model its config came from
    np.testing.assert_allclose(result.outputs[1], second.predict(images, verbose=0), atol=1e-5, rtol=0)
    np.testing.assert_allclose(result.outputs[0], first.predict(images, verbose=0), atol=1e-5, rtol=0)
    assert np.abs(result.outputs[1] - result.outputs[0]).max() > 1e-3


def test_weights_that_do_not_fit_the_architecture_are_refused() -> None:
    model = _residual_model()
    with pytest.raises(ConfigError, match="weights") as err:
        StageSpec.like(model, model.get_weights()[:-1])
    assert "shaped as" in str(err.value)


def test_a_stage_device_killed_mid_stream_comes_back_and_nothing_is_lost(
    cluster: DeviceCluster, images: np.ndarray
) -> None:
    # Prepare: the pipeline, with the middle stage's device killed before micro-batch 2 enters
    model = _residual_model()
    cut = partition(model, 3)
    stages = {f"stage-{s.index}": stage_model(model, s) for s in cut.stages}
    kill = {"device": cluster.devices[1], "phase": "stream", "at": 2}
    # Execute
    result = stream(
        cluster,
        Placement.pipeline(list(stages), cluster.devices),
        stages,
        images,
        micro_batch=8,
        max_in_flight=2,
        kills=[kill],
    )
    # Assert: one recovery of that device, micro-batches streamed again, the same outputs
    assert [r["device"] for r in result.recoveries] == [cluster.devices[1]]
    assert result.replayed
    np.testing.assert_allclose(result.outputs[0], model.predict(images, verbose=0), atol=1e-5, rtol=0)
    assert sorted(result.records.groupby("stage").size().tolist()) == [7, 7, 7]
    assert result.device_cpu.empty  # the restarted process counts its CPU from zero: no whole-stream figure


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"micro_batch": 0}, "micro_batch"),
        ({"max_in_flight": 0}, "max_in_flight"),
        ({"micro_batch": 1.5}, "micro_batch"),
    ],
)
def test_bad_stream_parameters_fail_before_any_cluster_work(kwargs: dict, parameter: str) -> None:
    model = _residual_model()
    with pytest.raises(ConfigError) as info:
        stream(None, Placement.pipeline(["m"], ["d"]), {"m": model}, np.zeros((4, 16, 16, 3), np.float32), **kwargs)  # type: ignore[arg-type]
    assert info.value.parameter == parameter


def test_inputs_the_model_cannot_take_are_refused() -> None:
    model = _residual_model()
    with pytest.raises(ConfigError, match="inputs of shape"):
        stream(None, Placement.pipeline(["m"], ["d"]), {"m": model}, np.zeros((4, 8, 8, 3), np.float32))  # type: ignore[arg-type]
