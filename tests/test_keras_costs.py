"""Counted MACs and parameters of real Keras layers equal the survey's formulas and the catalog's derived counts."""

from __future__ import annotations

import numpy as np
import pytest

from edgelab.common.errors import ConfigError
from edgelab.models import conv_costs as keras_costs
from edgelab.models.conv_costs import ConvShape


def test_the_formulas_on_a_hand_counted_layer() -> None:
    # Prepare: K=3, M=2, N=4, W=H=5 by hand: 3·3·2·4·25 = 1800; 3·3·25·2 + 2·4·25 = 450 + 200 = 650
    shape = dict(k=3, m=2, n=4, w=5)

    # Execute / Assert
    assert keras_costs.conv_macs(**shape) == 1800
    assert keras_costs.separable_macs(**shape) == 650
    assert keras_costs.separable_ratio(k=3, n=4) == pytest.approx(650 / 1800, rel=1e-15)  # 1/4 + 1/9 = 13/36
    assert keras_costs.group_conv_macs(**shape, groups=2) == 900
    assert keras_costs.conv_macs(k=3, m=2, n=4, w=5, h=7) == 3 * 3 * 2 * 4 * 5 * 7


@pytest.mark.parametrize(("k", "m", "n", "w"), [(1, 16, 16, 7), (3, 32, 64, 14), (5, 16, 128, 7), (7, 8, 24, 9)])
def test_counted_macs_and_params_of_built_layers_equal_the_formulas(k: int, m: int, n: int, w: int) -> None:
    # Prepare
    shape = ConvShape(k, m, n, w)

    # Execute
    built = {kind: keras_costs.build_layer(kind, shape) for kind in keras_costs.LAYER_KINDS}
    macs = {kind: keras_costs.counted_macs(model) for kind, model in built.items()}

    # Assert: the survey's formulas, exactly; parameters K·K·M·N and K·K·M + M·N (no biases)
    assert macs["standard"] == k * k * m * n * w * w == shape.standard_macs
    assert macs["separable"] == k * k * w * w * m + m * n * w * w == shape.separable_macs
    assert macs["separable"] == macs["depthwise"] + macs["pointwise"]
    assert macs["separable"] * k * k * n == macs["standard"] * (k * k + n)  # ratio 1/N + 1/K², in integers
    assert built["standard"].count_params() == k * k * m * n
    assert built["separable"].count_params() == k * k * m + m * n
    assert built["separable"].output_shape == built["standard"].output_shape == (None, w, w, n)


@pytest.mark.parametrize("groups", [1, 2, 4, 8, 16, 32])
def test_a_grouped_conv_costs_one_gth_of_the_standard(groups: int) -> None:
    # Prepare
    shape = ConvShape(3, 32, 64, 6, groups)

    # Execute
    model = keras_costs.build_layer("standard", shape)

    # Assert
    assert keras_costs.counted_macs(model) == 3 * 3 * 32 * 64 * 36 // groups == shape.standard_macs
    assert model.count_params() == 3 * 3 * 32 * 64 // groups


def test_mobilenet_and_its_standard_twin_give_the_catalogs_counts() -> None:
    # Execute
    mobilenet = keras_costs.mobilenet()
    twin = keras_costs.standard_twin(mobilenet)

    # Assert: derived_checks.csv (qiao/derived-mobilenetv1)
    assert keras_costs.counted_macs(mobilenet) == 568_740_352
    assert keras_costs.counted_macs(twin) == 4_867_293_184
    assert mobilenet.count_params() == 4_253_864
    assert twin.output_shape == mobilenet.output_shape == (None, 1000)
    # each pair became one 3x3 conv of the depthwise stride: 13 of them, none depthwise left
    assert sum(1 for layer in twin.layers if "_std_" in layer.name) == 13
    assert not any("DepthwiseConv2D" in type(layer).__name__ for layer in twin.layers)


def test_squeezenet_and_alexnet_give_the_catalogs_parameter_counts() -> None:
    # Execute
    counts = {name: keras_costs.build_network(name).count_params() for name in keras_costs.NETWORKS[2:]}

    # Assert: derived_checks.csv (qiao/derived-squeezenet)
    assert counts == {"squeezenet": 1_248_424, "alexnet": 60_965_224, "alexnet_single_tower": 61_100_840}
    assert round(counts["alexnet"] / counts["squeezenet"], 1) == 48.8


def test_two_group_convs_see_only_their_group_and_the_shuffle_mixes_them() -> None:
    # Execute
    plain = keras_costs.connectivity(channels=12, groups=3, shuffle=False)
    mixed = keras_costs.connectivity(channels=12, groups=3, shuffle=True)
    narrow = keras_costs.connectivity(channels=8, groups=4, shuffle=True)

    # Assert: block diagonal without the shuffle; each output reaches every input with it (C/G = 4 >= G = 3);
    # with C/G = 2 < G = 4 each output reaches 2 of the first conv's groups: 4 of 8 inputs
    np.testing.assert_array_equal(plain, np.kron(np.eye(3), np.ones((4, 4))).astype(bool))
    assert mixed.all()
    assert list(narrow.sum(axis=0)) == [4] * 8


@pytest.mark.parametrize("shuffle", [False, True])
def test_the_structural_connectivity_is_what_the_real_layers_compute(shuffle: bool) -> None:
    # Prepare: the two group convs with every weight 1, one impulse image per input channel
    import keras

    channels, groups = 8, 4
    x = inputs = keras.Input((1, 1, channels))
    x = keras.layers.Conv2D(channels, 1, groups=groups, use_bias=False, kernel_initializer="ones")(x)
    if shuffle:
        x = keras.layers.Lambda(lambda t: keras_costs.channel_shuffle(t, groups), output_shape=(1, 1, channels))(x)
    x = keras.layers.Conv2D(channels, 1, groups=groups, use_bias=False, kernel_initializer="ones")(x)
    impulses = np.eye(channels, dtype="float32").reshape(channels, 1, 1, channels)

    # Execute: an output channel is reached when the impulse makes it non-zero
    reached = np.asarray(keras.Model(inputs, x)(impulses)).reshape(channels, channels) > 0

    # Assert
    np.testing.assert_array_equal(reached, keras_costs.connectivity(channels=channels, groups=groups, shuffle=shuffle))


def test_channel_shuffle_transposes_groups() -> None:
    # Execute: channels 0..5 in 2 groups (0 1 2 | 3 4 5) come out interleaved
    shuffled = keras_costs.channel_shuffle(np.arange(6, dtype="float32").reshape(1, 1, 1, 6), 2)

    # Assert
    assert list(np.asarray(shuffled).ravel()) == [0, 3, 1, 4, 2, 5]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: ConvShape(0, 16, 16, 7), r"K=0 is not allowed: an integer >= 1"),
        (lambda: ConvShape(3, 64, 64, 7, groups=3), r"groups=3 is not allowed: a divisor of both M=64 and N=64"),
        (lambda: keras_costs.conv_macs(k=3, m=2, n=4, w=-1), r"W=-1 is not allowed"),
        (lambda: keras_costs.separable_ratio(k=3, n=0), r"N=0 is not allowed"),
        (lambda: keras_costs.group_conv_macs(k=3, m=6, n=4, w=5, groups=4), r"groups=4 is not allowed"),
        (lambda: keras_costs.build_layer("dilated", ConvShape(3, 8, 8, 4)), r"kind='dilated' is not allowed"),
        (lambda: keras_costs.build_layer("separable", ConvShape(3, 8, 8, 4, 2)), r"groups=2 is not allowed"),
        (lambda: keras_costs.build_network("vgg16"), r"network='vgg16' is not allowed"),
    ],
)
def test_bad_input_is_refused(call: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        call()  # type: ignore[operator]
