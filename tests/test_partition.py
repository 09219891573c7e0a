"""Tests for edgelab.pipeline.partition: cut points, balancing, stage models and Jeon et al.'s split."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest

from edgelab.common.errors import ConfigError
from edgelab.pipeline import (
    cut_points,
    flat_mobilenet_v2,
    jeon_cuts,
    layer_costs,
    layer_count_check,
    partition,
    resolve_model,
    stage_model,
)


def _residual() -> keras.Model:
    """input(0) -> a(1) -> b(2) -> b2(3) -> add(4) = a + b2 -> c(5) -> out(6); cuts after b or b2 cut the skip."""
    keras.utils.set_random_seed(0)
    x = keras.Input((8,), name="x")
    a = keras.layers.Dense(4, activation="relu", name="a")(x)
    b = keras.layers.Dense(4, activation="relu", name="b")(a)
    b2 = keras.layers.Dense(4, name="b2")(b)
    add = keras.layers.Add(name="add")([a, b2])
    c = keras.layers.Dense(3, activation="relu", name="c")(add)
    return keras.Model(x, keras.layers.Dense(2, name="out")(c), name="residual")


def _chain(widths: list[int]) -> keras.Model:
    """A chain of Dense layers; layer i > 0 costs widths[i - 1] * widths[i] MACs."""
    keras.utils.set_random_seed(0)
    x = h = keras.Input((widths[0],), name="x")
    for k, w in enumerate(widths[1:]):
        h = keras.layers.Dense(w, name=f"d{k + 1}")(h)
    return keras.Model(x, h, name="chain")


def _run_stages(model: keras.Model, cuts: tuple[int, ...] | list[int], x: np.ndarray) -> np.ndarray:
    h = x
    for stage in partition(model, cuts=cuts).stages:
        h = np.asarray(stage_model(model, stage)(h, training=False))
    return h


@pytest.fixture(scope="module")
def jeon224() -> keras.Model:
    keras.utils.set_random_seed(0)
    return flat_mobilenet_v2(weights=None)


@pytest.fixture(scope="module")
def jeon96() -> keras.Model:
    keras.utils.set_random_seed(0)
    return flat_mobilenet_v2(image_size=96, weights=None)


# ---------------------------------------------------------------- cut points


def test_cut_inside_residual_block_is_rejected_and_its_neighbours_accepted() -> None:
    # Prepare
    model = _residual()

    # Execute
    points = cut_points(model)
    with pytest.raises(ConfigError) as err:
        partition(model, cuts=["b"])

    # Assert: after b (and b2) both a and the branch cross; after a only a, after add only add
    assert points == [0, 1, 4, 5]
    assert err.value.parameter == "cuts"
    assert "residual" in str(err.value) and "1 (a)" in str(err.value) and "4 (add)" in str(err.value)
    assert partition(model, cuts=[1, 4]).cuts == (1, 4)


def test_layer_costs_count_dense_macs_and_zero_for_add() -> None:
    # Prepare
    model = _residual()

    # Execute
    costs = {c.name: c for c in layer_costs(model)}

    # Assert: Dense(in -> out) is in * out MACs per image, Add none
    assert [costs[n].macs for n in ("x", "a", "b", "b2", "add", "c", "out")] == [0, 32, 16, 16, 0, 12, 6]
    assert costs["a"].params == 8 * 4 + 4 and costs["a"].output_shape == (4,) and costs["a"].output_bytes == 16


# ---------------------------------------------------------------- balancing


def test_macs_balance_finds_the_hand_computed_optimum() -> None:
    # Prepare: MACs per layer 0, 6, 12, 4, 5, 10; best 3 stages are [x d1] [d2 d3] [d4 d5] = 6 / 16 / 15
    model = _chain([2, 3, 4, 1, 5, 2])

    # Execute
    parts = partition(model, 3)

    # Assert
    assert parts.cuts == (1, 3)
    assert [s.macs for s in parts.stages] == [6, 16, 15]
    assert parts.bottleneck_share == pytest.approx(16 / 37)
    assert parts.speedup_bound == pytest.approx(37 / 16)


def test_time_balance_breaks_ties_towards_earlier_cuts() -> None:
    # Prepare: cutting after layer 1 or 2 both give a 2 s bottleneck
    model = _chain([1, 5, 1, 5])

    # Execute
    parts = partition(model, 2, balance="time", layer_times=[0.0, 1.0, 1.0, 1.0])

    # Assert
    assert parts.cuts == (1,)
    assert [s.seconds for s in parts.stages] == [1.0, 2.0]
    assert parts.balance == "time" and parts.bottleneck_share == pytest.approx(2 / 3)


def test_given_cuts_by_name_and_by_index_agree() -> None:
    # Prepare
    model = _residual()

    # Execute
    by_name = partition(model, cuts=["a", "add"])
    by_index = partition(model, 3, cuts=[1, 4])

    # Assert
    assert by_name == by_index
    assert by_name.balance == "given"
    assert [(s.first, s.last) for s in by_name.stages] == [(0, 1), (2, 4), (5, 6)]
    assert [s.input_shape for s in by_name.stages] == [(8,), (4,), (4,)]


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"n_stages": 6}, "n_stages"),
        ({"n_stages": 0}, "n_stages"),
        ({"n_stages": 2, "balance": "flops"}, "balance"),
        ({"cuts": [4, 1]}, "cuts"),
        ({"cuts": [1, 4], "n_stages": 2}, "n_stages"),
        ({"cuts": ["nope"]}, "cuts"),
        ({"cuts": [6]}, "cuts"),
        ({"n_stages": 2, "balance": "time"}, "layer_times"),
        ({"n_stages": 2, "balance": "time", "layer_times": [1.0]}, "layer_times"),
    ],
    ids=["too-many", "zero", "balance", "decreasing", "count-mismatch", "name", "last-layer", "no-times", "short"],
)
def test_bad_partition_arguments_raise_config_error(kwargs: dict[str, object], parameter: str) -> None:
    # Prepare
    model = _residual()

    # Execute
    with pytest.raises(ConfigError) as err:
        partition(model, **kwargs)  # type: ignore[arg-type]

    # Assert
    assert err.value.parameter == parameter
    if kwargs.get("n_stages") == 6:
        assert "4 valid cut points" in str(err.value)


def test_resolve_model_accepts_builders_and_rejects_other_things() -> None:
    # Prepare
    class Subclassed(keras.Model):
        def call(self, x: object) -> object:
            return x

    # Execute
    built = resolve_model(_residual)

    # Assert
    assert built.name == "residual"
    for bad in (Subclassed(), "model", lambda n: _residual()):
        with pytest.raises(ConfigError) as err:
            resolve_model(bad)
        assert err.value.parameter == "model"
    with pytest.raises(ConfigError, match="got 7"):
        jeon_cuts(built)


# ---------------------------------------------------------------- stage models


def test_chained_stage_models_equal_the_residual_model() -> None:
    # Prepare
    model = _residual()
    x = np.random.default_rng(0).normal(size=(5, 8)).astype("float32")

    # Execute
    piped = _run_stages(model, [1, 4], x)

    # Assert
    np.testing.assert_allclose(piped, np.asarray(model(x)), atol=1e-5, rtol=0)


def test_stage_model_config_round_trips() -> None:
    # Prepare
    model = _residual()
    sub = stage_model(model, partition(model, cuts=[1, 4]).stages[1])
    h = np.random.default_rng(1).normal(size=(3, 4)).astype("float32")

    # Execute: what a device worker does with the JSON and the weights
    rebuilt = keras.Model.from_config(sub.get_config())
    rebuilt.set_weights(sub.get_weights())
    from_json = keras.models.model_from_json(sub.to_json())
    from_json.set_weights(sub.get_weights())

    # Assert
    assert [layer.name for layer in sub.layers] == ["residual_stage2_input", "b", "b2", "add"]
    np.testing.assert_array_equal(np.asarray(rebuilt(h)), np.asarray(sub(h)))
    np.testing.assert_array_equal(np.asarray(from_json(h)), np.asarray(sub(h)))


def test_jeon_stages_equal_the_whole_mobilenet_at_96(jeon96: keras.Model) -> None:
    # Prepare
    x = np.random.default_rng(0).uniform(-1, 1, size=(2, 96, 96, 3)).astype("float32")

    # Execute
    piped = _run_stages(jeon96, jeon_cuts(jeon96), x)

    # Assert
    assert np.abs(piped - np.asarray(jeon96(x, training=False))).max() <= 1e-5


def test_jeon_stage_with_residuals_round_trips(jeon96: keras.Model) -> None:
    # Prepare: stage 4 holds six residual blocks
    stage = partition(jeon96, cuts=jeon_cuts(jeon96)).stages[3]
    sub = stage_model(jeon96, stage)
    h = np.random.default_rng(2).normal(size=(2, *stage.input_shape)).astype("float32")

    # Execute
    rebuilt = keras.Model.from_config(sub.get_config())
    rebuilt.set_weights(sub.get_weights())

    # Assert
    assert len(sub.layers) == stage.n_layers + 1  # + its own Input
    np.testing.assert_array_equal(np.asarray(rebuilt(h)), np.asarray(sub(h)))


# ---------------------------------------------------------------- Jeon et al. at 224x224 (catalog derived_checks)


def test_jeon_split_reproduces_the_catalog(jeon224: keras.Model) -> None:
    # Execute
    parts = partition(jeon224, cuts=jeon_cuts(jeon224))
    frame = parts.to_frame()

    # Assert
    assert jeon_cuts(jeon224) == (26, 53, 89, 142)
    assert [s.n_layers for s in parts.stages] == [27, 27, 36, 53, 14]
    assert list(frame["last_layer"]) == ["block_2_add", "block_5_add", "block_9_add", "block_15_add", "dense"]
    assert list(frame["first_layer"][1:]) == ["block_3_expand", "block_6_expand", "block_10_expand", "block_16_expand"]
    assert list(frame["macs"]) == [75_815_936, 37_443_840, 38_497_536, 104_664_000, 43_085_760]
    assert frame["macs"].sum() == 299_507_072
    assert list((100 * frame["mac_share"]).round(1)) == [25.3, 12.5, 12.9, 34.9, 14.4]
    assert list(frame["params"]) == [17_008, 42_000, 189_760, 1_116_096, 905_930]
    assert [s.output_shape for s in parts.stages[:4]] == [(56, 56, 24), (28, 28, 32), (14, 14, 64), (7, 7, 160)]
    assert list(frame["output_bytes"][:4]) == [301_056, 100_352, 50_176, 31_360]
    # The catalog's 2.87x is 1 / 0.349, the rounded share; the exact share gives 2.86x.
    assert round(parts.bottleneck_share, 3) == 0.349 and round(parts.speedup_bound, 2) == 2.86
    assert json.loads(json.dumps(parts.to_dict()))["cuts"] == [26, 53, 89, 142]


def test_every_jeon_cut_is_a_cut_point(jeon224: keras.Model) -> None:
    # Execute
    points = set(cut_points(jeon224))

    # Assert: block boundaries are cut points, the inside of block_2 (its skip crosses) is not
    assert set(jeon_cuts(jeon224)) <= points
    assert not points & set(range(18, 26))


def test_layer_count_check_matches_the_catalog() -> None:
    # Execute
    counts = layer_count_check()

    # Assert
    assert counts == {
        "include_top_false": {"layers": 154, "params": 2_257_984},
        "include_top_true": {"layers": 156, "params": 3_538_984},
        "flat": {"layers": 157, "params": 2_270_794},
    }
