"""GPipe on a real emulated cluster: the stages' weights after each step are one SGD step on the whole mini-batch."""

from __future__ import annotations

import numpy as np
import pytest

from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.common.errors import ConfigError

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(three_devices: DeviceCluster) -> DeviceCluster:
    """Three emulated pi3b devices (runs of two use the first two)."""
    return three_devices


def _mlp() -> object:
    import keras

    from edgelab.common.seeding import seeded

    with seeded(3):  # the same weights every build, whatever the Dask client's threads draw meanwhile
        inputs = keras.Input((20,), name="pixels")
        h = keras.layers.Dense(16, activation="relu", name="d1")(inputs)
        h = keras.layers.Dense(12, activation="tanh", name="d2")(h)
        outputs = keras.layers.Dense(5, activation="softmax", name="out")(h)
        return keras.Model(inputs, outputs, name="mlp")


def _data(n: int = 64) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 20)).astype(np.float32), rng.integers(0, 5, size=n)


def _one_device(
    model: object, x: np.ndarray, y: np.ndarray, batch_size: int, steps: int, lr: float, momentum: float
) -> tuple[list[np.ndarray], list[float]]:
    """The reference: the unsplit model, one SGD step per mini-batch, in this process."""
    import keras
    import tensorflow as tf

    optimizer = keras.optimizers.SGD(learning_rate=lr, momentum=momentum)
    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    losses = []
    for step in range(steps):
        xb, yb = x[step * batch_size : (step + 1) * batch_size], y[step * batch_size : (step + 1) * batch_size]
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        optimizer.apply_gradients(
            zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables, strict=True)
        )
        losses.append(float(loss))
    return [np.asarray(w) for w in model.get_weights()], losses


@pytest.mark.parametrize("micro_batches", [1, 4])
def test_gpipe_steps_equal_one_device_sgd_on_the_whole_mini_batch(cluster: DeviceCluster, micro_batches: int) -> None:
    from edgelab.pipeline.training import train_pipelined

    x, y = _data()
    run = train_pipelined(
        cluster,
        _mlp,
        x,
        y,
        cuts=["d1", "d2"],  # a dense layer in every stage
        batch_size=16,
        micro_batches=micro_batches,
        steps=3,
        learning_rate=0.1,
        momentum=0.9,
        log=lambda _: None,
    )
    assert [s.layers for s in run.partition.stages] == [("pixels", "d1"), ("d2",), ("out",)]
    expected, losses = _one_device(_mlp(), x, y, 16, 3, 0.1, 0.9)
    np.testing.assert_array_equal(_mlp().get_weights()[0], _mlp().get_weights()[0])  # the builds agree

    got = run.full_weights()
    assert [w.shape for w in got] == [w.shape for w in expected]
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(run.step_losses().to_numpy(), losses, rtol=1e-5)
    assert not np.allclose(got[0], _mlp().get_weights()[0])  # it did train


def test_the_schedule_fills_then_drains_and_every_pass_is_recorded(cluster: DeviceCluster) -> None:
    from edgelab.pipeline.training import train_pipelined

    x, y = _data(32)
    run = train_pipelined(
        cluster, _mlp, x, y, cuts=["d1", "d2"], batch_size=16, micro_batches=4, steps=2, log=lambda _: None
    )
    r = run.records
    # per step: 2 forward stages x 4, the last stage's 4 fused passes, 2 backward stages x 4, 3 updates
    counts = r.groupby(["step", "kind"]).size().unstack()
    assert counts.loc[0].to_dict() == {"backward": 8, "forward": 8, "forward+backward": 4, "update": 3}
    assert list(r["device"].unique()) != [] and set(r["device"]) == set(run.devices)
    for (step, stage), passes in r[r["kind"] != "update"].groupby(["step", "stage"]):
        forwards = passes[passes["kind"] == "forward"]
        backwards = passes[passes["kind"] == "backward"]
        if len(forwards) and len(backwards):
            # fill-drain on each stage: every forward of the step before any backward, backwards in reverse order
            assert forwards["t_end"].max() <= backwards["t_start"].min() + 1e-6, (step, stage)
            assert backwards.sort_values("t_start")["micro_batch"].tolist() == [3, 2, 1, 0]
        assert (passes["t_end"] >= passes["t_start"]).all()
    # one update per stage per step, after the stage's last pass of that step
    for (step, stage), passes in r.groupby(["step", "stage"]):
        update = passes[passes["kind"] == "update"]
        last_pass = passes[passes["kind"] != "update"]["t_end"].max()
        assert len(update) == 1, (step, stage)
        assert update["t_start"].iloc[0] >= last_pass - 1e-6, (step, stage)


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"micro_batches": 0}, "micro_batches"),
        ({"micro_batches": 17}, "micro_batches"),
        ({"micro_batches": 3}, "micro_batches"),  # does not divide the mini-batch of 16
        ({"batch_size": 0}, "batch_size"),
        ({"steps": 9}, "steps"),
        ({"devices": ["pi3b-0", "pi3b-0", "pi3b-1"]}, "devices"),
        ({"devices": ["pi3b-0", "pi3b-1", "pi3b-7"]}, "devices"),
        ({"n_stages": 9}, "n_stages"),
    ],
)
def test_bad_input_is_refused_before_any_cluster_work(kwargs: dict[str, object], parameter: str) -> None:
    from edgelab.pipeline.training import train_pipelined

    class Untouchable:
        def __getattr__(self, name: str) -> object:
            raise AssertionError(f"client.{name} used before the input was checked")

    cluster = DeviceCluster(Untouchable(), ["pi3b-0", "pi3b-1", "pi3b-2"], None, emulated=True)  # type: ignore[arg-type]
    x, y = _data()
    with pytest.raises(ConfigError) as info:
        train_pipelined(cluster, _mlp, x, y, **{"n_stages": 3, "batch_size": 16, **kwargs})  # type: ignore[arg-type]
    assert info.value.parameter == parameter


def test_1f1b_orders_warm_up_then_alternate_and_every_stage_does_every_pass() -> None:
    from edgelab.pipeline.training import stage_orders

    orders = stage_orders("1f1b", 4, 6)
    assert orders[3] == [("FB", g) for g in range(6)]
    assert orders[1] == [("F", 0), ("F", 1), ("F", 2), ("B", 0), ("F", 3), ("B", 1), ("F", 4), ("B", 2), ("F", 5)] + [
        ("B", 3),
        ("B", 4),
        ("B", 5),
    ]
    for order in orders[:3]:
        assert sorted(order) == sorted([("F", g) for g in range(6)] + [("B", g) for g in range(6)])
        # never more micro-batches in flight on a stage than stages from it to the end
    for s, order in enumerate(orders[:3]):
        in_flight = [sum(1 if k == "F" else -1 for k, _ in order[: i + 1]) for i in range(len(order))]
        assert max(in_flight) == 4 - s
    with pytest.raises(ConfigError, match="schedule"):
        stage_orders("pipedream-2bw", 2, 2)


def test_1f1b_stashes_the_weights_each_forward_used_and_versions_follow_the_schedule(cluster: DeviceCluster) -> None:
    from edgelab.pipeline.training import train_pipelined

    x, y = _data(48)
    run = train_pipelined(
        cluster,
        _mlp,
        x,
        y,
        cuts=["d1", "d2"],
        batch_size=16,
        micro_batches=4,
        steps=3,
        schedule="1f1b",
        log=lambda _: None,
    )
    r = run.records
    r = r.assign(g=r["step"] * 4 + r["micro_batch"], s=r["stage"].str.removeprefix("stage-").astype(int) - 1)
    for _, row in r.iterrows():
        assert row["version"] == max(0, row["g"] - (3 - row["s"]) + 1), row.to_dict()
    # weight stashing: a micro-batch's backward on a stage used the version its forward there saw
    passes = r[r["kind"].isin(["forward", "backward"])].pivot_table(index=["s", "g"], columns="kind", values="version")
    assert (passes["forward"] == passes["backward"]).all()
    assert r.groupby("s")["version"].max().tolist() == [12 - 3, 12 - 2, 12 - 1]


def test_1f1b_on_one_stage_is_sgd_on_each_micro_batch(cluster: DeviceCluster) -> None:
    from edgelab.pipeline.training import train_pipelined

    x, y = _data(32)
    run = train_pipelined(
        cluster,
        _mlp,
        x,
        y,
        n_stages=1,
        batch_size=16,
        micro_batches=2,
        steps=2,
        schedule="1f1b",
        learning_rate=0.1,
        log=lambda _: None,
    )
    expected, _ = _one_device(_mlp(), x, y, 8, 4, 0.1, 0.0)
    for a, b in zip(run.full_weights(), expected, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_the_bubble_is_the_idle_share_of_stages_times_makespan() -> None:
    import pandas as pd

    from edgelab.pipeline.training import bubble_fraction, gpipe_bubble

    # two stages, two micro-batches, 1 s per pass (the last stage's fused forward and backward: 2 s);
    # fill-drain: F0 F1 on stage 1, FB0 FB1 on stage 2, then B1 B0 on stage 1: busy 8 of 2 x 7 s
    rows = [("stage-1", 0, 1), ("stage-1", 1, 2), ("stage-2", 1, 3), ("stage-2", 3, 5), ("stage-1", 5, 6)]
    rows += [("stage-1", 6, 7)]
    records = pd.DataFrame([{"step": 0, "stage": s, "t_start": a, "t_end": b} for s, a, b in rows])
    assert bubble_fraction(records).to_dict() == {0: pytest.approx(1 - 8 / 14)}
    assert gpipe_bubble(4, 1) == 0.75 and gpipe_bubble(4, 13) == 0.1875 and gpipe_bubble(1, 8) == 0.0
