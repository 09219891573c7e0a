"""The hierarchy's three networks have the sizes Zhang 2018's Table 1 and Table 3 print (or say why not)."""

from __future__ import annotations

import pytest

from edgelab.common.errors import ConfigError
from edgelab.models.tiers import build_tier_network, sizes, wide_resnet


@pytest.mark.parametrize(
    ("name", "total", "trainable"),
    [
        ("mobilenet", 839_796, 828_852),  # 0.84 M printed: Keras' total, moving statistics included
        ("resnet34", 21_353_060, 21_336_036),  # 21.4 M printed
        ("wrn-28-10", 36_554_836, 36_536_884),  # canonical WRN-28-10: 36.5 M, not the 40.6 M printed
        ("wrn-28-10-flatten", 40_586_736, 40_568_784),  # the flatten head: the 40.6 M printed (catalog P-WRN)
    ],
)
def test_parameter_counts(name: str, total: int, trainable: int) -> None:
    counted = sizes(build_tier_network(name))

    assert (counted["parameters"], counted["trainable_parameters"]) == (total, trainable)


def test_the_first_layers_are_table3s() -> None:
    resnet, wrn = build_tier_network("resnet34"), build_tier_network("wrn-28-10")

    # ResNet's stem: 7x7x3x64 + 64 biases, output 16x16x64; WRN's: 3x3x3x16 without bias, output 32x32x16
    assert (resnet.get_layer("stem_conv").count_params(), resnet.get_layer("stem_conv").output.shape[1:]) == (
        9472,
        (16, 16, 64),
    )
    assert (wrn.get_layer("stem_conv").count_params(), wrn.get_layer("stem_conv").output.shape[1:]) == (
        432,
        (32, 32, 16),
    )


def test_weights_file_sizes_with_optimizer_slots_match_the_printed_ones() -> None:
    # The catalog's P-size: MobileNet's 10.3 MB fits weights + Adam's two slots, WRN's 324.9 MB weights + momentum
    assert sizes(build_tier_network("mobilenet"))["with_adam_bytes"] == 9_990_000
    assert sizes(build_tier_network("wrn-28-10-flatten"))["with_momentum_bytes"] == 324_622_080
    assert sizes(build_tier_network("resnet34"))["weights_bytes"] == 85_412_240


def test_the_same_seed_builds_the_same_weights() -> None:
    import numpy as np

    a, b = (build_tier_network("mobilenet", seed=3).get_weights() for _ in range(2))

    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: build_tier_network("vgg16"), r"network='vgg16' is not allowed: one of mobilenet, resnet34"),
        (lambda: wide_resnet(depth=27), r"depth=27 is not allowed: an integer 6n\+4 >= 10"),
        (lambda: wide_resnet(head="dense"), r"head='dense' is not allowed: one of pooled, flatten"),
        (lambda: build_tier_network("mobilenet", alpha=0), r"alpha=0 is not allowed"),
        (lambda: build_tier_network("resnet34", classes=1), r"classes=1 is not allowed: an integer >= 2"),
    ],
)
def test_bad_input_names_the_parameter(build: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build()  # type: ignore[operator]
