"""Fused tiles (qiao/fig3-6): regions walked back exactly, stitched tiles equal to untiled, bad input refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.common.errors import ConfigError
from edgelab.common.seeding import seeded
from edgelab.pipeline import tiles
from edgelab.runtime.devices import connect


def _stack(shape: tuple[int, int, int], *layers: object, seed: int = 0, name: str = "stack") -> object:
    """A seeded sequential model; BatchNormalization gets random statistics so it is not the identity."""
    import keras

    with seeded(seed):
        model = keras.Sequential([keras.Input(shape), *layers], name=name)
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            gamma, beta, mean, var = layer.get_weights()
            shifted = [beta + rng.normal(0, 0.1, beta.shape), mean + rng.normal(0, 0.1, mean.shape)]
            layer.set_weights(
                [gamma * rng.uniform(0.5, 1.5, gamma.shape), *shifted, var * rng.uniform(0.5, 1.5, var.shape)]
            )
    return model


def _stride1() -> object:
    import keras

    return _stack((17, 13, 3), keras.layers.Conv2D(4, 3, padding="same"), keras.layers.BatchNormalization(),
                  keras.layers.ReLU(), keras.layers.Conv2D(5, 5, padding="same", dilation_rate=2),
                  keras.layers.Conv2D(3, 3, padding="valid"))  # fmt: skip


def _stride2() -> object:
    import keras

    # Odd sizes at stride 2: TF's "same" pads the extra row and column at the bottom and right only.
    return _stack((31, 29, 3), keras.layers.Conv2D(6, 3, strides=2, padding="same"), keras.layers.BatchNormalization(),
                  keras.layers.Activation("relu"), keras.layers.ZeroPadding2D(((0, 1), (0, 1))),
                  keras.layers.DepthwiseConv2D(3, strides=2, padding="valid"),
                  keras.layers.SeparableConv2D(4, 3, strides=2, padding="same"))  # fmt: skip


def _pooling() -> object:
    import keras

    same = {"padding": "same"}
    return _stack((45, 39, 3), keras.layers.Conv2D(4, 3, **same), keras.layers.MaxPooling2D(3, 2, **same),
                  keras.layers.Conv2D(5, 3, strides=2, **same), keras.layers.AveragePooling2D(3, 2, **same),
                  keras.layers.AveragePooling2D(2, strides=1), keras.layers.Conv2D(3, 1))  # fmt: skip


@pytest.mark.parametrize("build", [_stride1, _stride2, _pooling], ids=["stride1", "stride2", "pooling"])
@pytest.mark.parametrize("grid", [1, 2, 3])
def test_stitched_tiles_equal_the_untiled_output(build: object, grid: int) -> None:
    # Prepare: inputs below zero too, so max pooling's padding must not be zero
    model = build()  # type: ignore[operator]
    x = np.random.default_rng(1).standard_normal((2, *model.input_shape[1:])).astype(np.float32) - 1.0
    plan = tiles.plan_tiles(model, len(model.layers), grid)

    # Execute
    stitched = tiles.run_locally(model, plan, x)
    untiled = np.asarray(tiles.prefix_model(model, len(model.layers))(x, training=False))

    # Assert: float32 rounding only; one tile recomputes nothing, more tiles recompute their halo
    assert stitched.shape == untiled.shape
    assert np.abs(stitched - untiled).max() <= 1e-5 * max(1.0, np.abs(untiled).max())
    assert (plan.redundancy == 1.0) if grid == 1 else (plan.redundancy > 1.0)


def test_a_3x3_same_convolution_needs_one_halo_row_and_pads_only_at_the_border() -> None:
    import keras

    model = _stack((8, 8, 1), keras.layers.Conv2D(1, 3, padding="same"))

    plan = tiles.plan_tiles(model, 1, 2)

    # Output rows 0-3 need input rows -1..4: row -1 is padding. Rows 4-7 need 3..8: row 8 is padding.
    assert [t.input_region for t in plan.tiles] == [
        ((0, 5), (0, 5)),
        ((0, 5), (3, 8)),
        ((3, 8), (0, 5)),
        ((3, 8), (3, 8)),
    ]
    assert [t.pads[0] for t in plan.tiles] == [(1, 0, 1, 0), (1, 0, 0, 1), (0, 1, 1, 0), (0, 1, 0, 1)]
    # 9 MACs per output position, 16 positions per tile, 64 untiled
    assert [t.macs for t in plan.tiles] == [144] * 4 and plan.untiled_macs == 576 and plan.redundancy == 1.0


def test_stride_2_same_padding_is_asymmetric_and_the_halo_grows_backward() -> None:
    import keras

    # 8 -> conv 3 stride 2 "same" -> 4 (TF pads 0 rows before, 1 after) -> conv 3 stride 1 "same" -> 4
    same = {"padding": "same"}
    model = _stack((8, 8, 1), keras.layers.Conv2D(1, 3, strides=2, **same), keras.layers.Conv2D(1, 3, **same))

    plan = tiles.plan_tiles(model, 2, 2)

    assert plan.layers[0].pads == (0, 1, 0, 1) and plan.layers[1].pads == (1, 1, 1, 1)
    top_left, bottom_right = plan.tiles[0], plan.tiles[-1]
    # Output rows 0-1 need layer-1 rows -1..2 (-1 is padding), which need image rows 0..6 (no padding before)
    assert top_left.spans == (((0, 7), (0, 7)), ((0, 3), (0, 3)), ((0, 2), (0, 2)))
    assert top_left.pads == ((0, 0, 0, 0), (1, 0, 1, 0))
    # Output rows 2-3 need layer-1 rows 1..4 (4 is padding), which need image rows 2..8 (8 is TF's extra row)
    assert bottom_right.spans == (((2, 8), (2, 8)), ((1, 4), (1, 4)), ((2, 4), (2, 4)))
    assert bottom_right.pads == ((0, 1, 0, 1), (0, 1, 0, 1))


def test_a_users_builder_and_mobilenet_tile_exactly_at_stride_8() -> None:
    import keras

    def build() -> object:
        with seeded(3):
            return keras.applications.MobileNet(input_shape=(64, 64, 3), alpha=0.25, weights=None, include_top=False)

    model = tiles.resolve_model(build)
    x = np.random.default_rng(2).uniform(-1, 1, (1, 64, 64, 3)).astype(np.float32)
    plan = tiles.plan_tiles(build, "conv_pw_5_relu", 2)

    stitched = tiles.run_locally(model, plan, x)
    untiled = np.asarray(tiles.prefix_model(model, "conv_pw_5_relu")(x, training=False))

    assert plan.output_shape == (8, 8, 64)
    assert np.abs(stitched - untiled).max() <= 1e-5 * max(1.0, np.abs(untiled).max())
    assert max(t.peak_bytes for t in plan.tiles) < plan.untiled_peak_bytes


def test_bad_input_is_refused_before_any_cluster_work() -> None:
    import keras

    model = _stack((8, 8, 1), keras.layers.Conv2D(2, 3, strides=2, padding="same"), keras.layers.Flatten(),
                   keras.layers.Dense(2))  # fmt: skip

    with pytest.raises(ConfigError, match=r"grid=5 is not allowed: at most 4: the output of conv2d.* is 4x4"):
        tiles.plan_tiles(model, 1, 5)
    with pytest.raises(ConfigError, match=r"grid=0 is not allowed: an integer >= 1"):
        tiles.plan_tiles(model, 1, 0)
    with pytest.raises(ConfigError, match=r"layers='flatten.* \(Flatten\)' is not allowed: layers the partitioner"):
        tiles.plan_tiles(model, 2, 2)
    with pytest.raises(ConfigError, match=r"upto=4 is not allowed: an integer from 1 to 3, or the name of one of"):
        tiles.plan_tiles(model, 4, 1)
    with pytest.raises(ConfigError, match=r"upto='nope' is not allowed"):
        tiles.plan_tiles(model, "nope", 1)


def test_experiment_parameters_are_checked() -> None:
    from edgelab.papers.qiao.tiles import TilesParams

    with pytest.raises(ConfigError, match=r"grids=\(0, 2\) is not allowed"):
        TilesParams(grids=(0, 2))
    with pytest.raises(ConfigError, match=r"network='resnet' is not allowed"):
        TilesParams(network="resnet")


def _users_convnet(side: int = 48, channels: int = 3) -> object:
    """A user's own feature extractor: no classifier head, unnamed layers."""
    import keras

    inputs = keras.Input((side, side, channels))
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.MaxPooling2D(2)(x)
    x = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(x)
    return keras.Model(inputs, keras.layers.MaxPooling2D(2)(x), name="users_convnet")


def test_a_users_network_is_built_under_the_seed_and_sets_the_image_size() -> None:
    from edgelab.papers.qiao.tiles import TilesParams

    with pytest.raises(ConfigError, match=r"^upto=None is not allowed: the last layer to fuse"):
        TilesParams(network=_users_convnet)
    with pytest.raises(ConfigError, match=r"^network='users_convnet' is not allowed: a network taking square RGB"):
        TilesParams(network=lambda: _users_convnet(channels=1), upto=4)
    with pytest.raises(ConfigError, match=r"^image_size=96 is not allowed: the side of the network's input, 48"):
        TilesParams(network=_users_convnet, upto=4, image_size=96)
    with pytest.raises(ConfigError, match=r"^network="):
        TilesParams(network=lambda size: _users_convnet(size), upto=4)  # a builder takes no arguments

    params = TilesParams(network=_users_convnet, upto=4, seed=4)
    assert params.image_size == 48 and params.network_name == "users_convnet"
    again = TilesParams(network=_users_convnet, upto=4, seed=4)
    other = TilesParams(network=_users_convnet, upto=4, seed=5)
    pairs = zip(params.network.get_weights(), again.network.get_weights(), strict=True)
    assert all(np.array_equal(a, b) for a, b in pairs)
    assert not np.array_equal(params.network.get_weights()[0], other.network.get_weights()[0])


@pytest.fixture(scope="module")
def four_devices() -> Iterator[DeviceCluster]:
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("EDGELAB_SCHEDULER", raising=False)
        started = connect(4, dashboard_address="127.0.0.1:0")
    try:
        yield started
    finally:
        started.close()


def test_tiles_on_four_devices_stitch_to_the_untiled_output_and_render(
    four_devices: DeviceCluster, plantvillage_dir: Path, tmp_path: Path
) -> None:
    from edgelab.common.results import ResultsStore
    from edgelab.papers.qiao import tiles as exp
    from edgelab.papers.qiao import tiles_figures as figure

    # Prepare: the VGG-like stack (cheap) on a 48x48 leaf, 1x1 and 2x2 tiles
    plan = exp.prepare(network="vgg", image_size=48, grids=[1, 2], repeats=1, data_dir=str(plantvillage_dir))

    # Execute
    runs = exp.run(plan, store=ResultsStore(tmp_path / "results"), cluster=four_devices)
    summary = exp.summarize(plan, runs)
    items = figure.render(tmp_path / "reports", plan, runs, summary, notebook="nb", parameters={})

    # Assert: exact stitching, the bytes Dask sent (raw bytes plus a header), the clock and the rendered item
    assert (summary["relative_diff"] <= 1e-5).all()
    two = next(r for r in runs if r.params["grid"] == 2).tables["tiles"]
    assert list(two["device"]) == four_devices.devices
    assert (two["gathered_bytes"] > two["output_bytes"]).all() and (
        two["gathered_bytes"] < two["output_bytes"] + 1024
    ).all()
    assert two["output_bytes"].sum() == 6 * 6 * 128 * 4
    assert (summary["clock_s"] > 0).all() and summary["memory_ratio"].iloc[1] < 1.0
    # nothing predicted (the survey gives no values): the build's checks hold, so the item is consistent
    assert items[0].status == "consistent" and all(Path(f).is_file() for f in items[0].files)
    kinds = {c.name: c.kind for c in items[0].verdict.checks}
    assert kinds == {
        "stitched equals untiled": "correctness",
        "a CNN as a compressor": "structural",
        "memory per worker": "structural",
    }
    assert items[0].reduction.startswith("a 48 px image of the full profile's 224 px")


def test_a_users_network_is_tiled_and_stitched_like_the_built_ins(
    four_devices: DeviceCluster, plantvillage_dir: Path, tmp_path: Path
) -> None:
    from edgelab.common.results import ResultsStore
    from edgelab.papers.qiao import tiles as exp
    from edgelab.papers.qiao import tiles_figures as figure

    plan = exp.prepare(network=_users_convnet, upto=4, grids=[2], repeats=1, data_dir=str(plantvillage_dir))
    key = plan.run_params(plan.runs[0])["network"]
    assert key["name"] == "users_convnet" and set(key) == {"name", "config_sha256", "weights_sha256"}

    runs = exp.run(plan, store=ResultsStore(tmp_path / "results"), cluster=four_devices)
    summary = exp.summarize(plan, runs)
    items = figure.render(tmp_path / "reports", plan, runs, summary, notebook="nb", parameters={})

    assert (summary["relative_diff"] <= 1e-5).all()
    assert runs[0].tables["tiles"]["output_bytes"].sum() == 12 * 12 * 16 * 4  # 48 / 4 per side, 16 channels
    assert "users_convnet" in Path(next(f for f in items[0].files if f.endswith(".md"))).read_text()
