"""The privacy module: the first convolution cut out of a network, its cost on the clock, and an inversion attack."""

from __future__ import annotations

import numpy as np
import pytest

from edgelab.common.errors import ConfigError
from edgelab.common.seeding import seeded
from edgelab.emulation.tier_clock import zhang2018_calibration
from edgelab.emulation.tiers import ZHANG2018
from edgelab.hierarchy import privacy


def _network(filters: int, kernel: int, strides: int) -> object:
    import keras

    with seeded(0):
        inputs = keras.Input((32, 32, 3))
        x = keras.layers.Conv2D(filters, kernel, strides=strides, padding="same", name="stem")(inputs)
        x = keras.layers.ReLU()(x)
        outputs = keras.layers.Dense(10)(keras.layers.GlobalAveragePooling2D()(x))
        return keras.Model(inputs, outputs, name="small")


IMAGES = np.random.default_rng(0).integers(0, 256, size=(3, 32, 32, 3), dtype=np.uint8)


def test_the_stem_is_the_networks_first_convolution_with_its_weights() -> None:
    network = _network(16, 3, 1)
    s = privacy.stem(network)  # type: ignore[arg-type]
    assert s.output_shape == (32, 32, 16)
    assert s.parameters == 3 * 3 * 3 * 16 + 16
    assert s.payload_bytes(50) == 4 * 50 * 32 * 32 * 16
    x = IMAGES.astype(np.float32) / 255
    np.testing.assert_array_equal(s.model.predict_on_batch(x), network.get_layer("stem")(x))  # type: ignore[attr-defined]


def test_more_outputs_than_inputs_give_the_image_back_and_fewer_do_not() -> None:
    # 16 channels from 3 at every pixel: the image comes back to float rounding
    wide = privacy.attack(privacy.stem(_network(16, 3, 1)), IMAGES)  # type: ignore[arg-type]
    assert wide["psnr_min_db"] > 60 and wide["ssim_min"] > 0.999
    # 1 channel at every other pixel (1,024 values from 3,072): most of the image is lost
    narrow = privacy.attack(privacy.stem(_network(1, 3, 2)), IMAGES)  # type: ignore[arg-type]
    assert narrow["psnr_db"] < 25 and narrow["ssim"] < 0.5


def test_a_network_without_a_first_convolution_is_refused() -> None:
    import keras

    dense = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)], name="dense_only")
    with pytest.raises(ConfigError, match=r"network='dense_only' is not allowed: a network whose first layer"):
        privacy.stem(dense)


def test_the_overhead_is_the_moved_compute_plus_the_extra_bytes() -> None:
    calibration = zhang2018_calibration()
    raw = 50 * 3072
    # Nothing moved and nothing more sent: no overhead
    same = privacy.overhead(ZHANG2018, calibration, "wrn-28-10", 0.0, raw, latency_s=1.0, at="end")
    assert same["overhead_pct"] == 0.0
    # The whole network moved to the end device: the end's time minus the cloud's (Table 1: 1170 vs 6.99 ms/image)
    moved = privacy.overhead(ZHANG2018, calibration, "wrn-28-10", 1.0, raw, latency_s=1.0, at="end")
    assert moved["delta_encrypt_s"] == pytest.approx(50 * (1.170 - 0.00699))
    features = privacy.overhead(ZHANG2018, calibration, "wrn-28-10", 0.0, 8 * raw, latency_s=1.0, at="end")
    assert features["delta_comm_s"] == pytest.approx(8 * 7 * raw / 1e9)  # 7 x the bytes more, at 1 Gbit/s
    at_edge = privacy.overhead(ZHANG2018, calibration, "wrn-28-10", 1e-4, 8 * raw, latency_s=1.0, at="edge")
    at_end = privacy.overhead(ZHANG2018, calibration, "wrn-28-10", 1e-4, 8 * raw, latency_s=1.0, at="end")
    assert at_edge["overhead_pct"] < at_end["overhead_pct"]
    with pytest.raises(ConfigError, match=r"at='cloud' is not allowed"):
        privacy.overhead(ZHANG2018, calibration, "wrn-28-10", 0.0, raw, latency_s=1.0, at="cloud")


def test_the_items_checks_tables_as_structure_and_the_clock_and_the_attack_as_predictions() -> None:
    import pandas as pd

    from edgelab.papers.zhang2018 import privacy_figures as fig
    from edgelab.report import verdict

    # Prepare: the modules as built, and an attack that rebuilt the images (SSIM 0.99999)
    stems = fig.modules()
    t3, t4 = fig.table3(stems), fig.table4(stems)
    attacked = pd.DataFrame(
        [{"module of": m, "images": 3, "psnr_min_db": 100.0, "ssim_min": 0.99999} for m, _ in fig.MODULES]
    )

    # Execute
    three = {c.name: c for c in fig.table3_checks(t3, attacked)}
    four = {c.name: c for c in fig.table4_checks(t4)}
    c25 = fig.eq8_check(t4)

    # Assert: Table 3 is the report's, C29 fails on the attack; Table 4's size and C25 differ, its ordering holds
    assert {n: (c.passed, c.kind) for n, c in three.items()} == {
        "outputs and parameters": (True, "structural"),
        "weights file": (True, "structural"),
        "C24": (True, "structural"),  # 1.13% and 0.051% of MobileNet's parameters
        "C29": (False, "predicted"),
    }
    assert "inverts it to float rounding" in three["C29"].note
    assert four["level"].passed is False
    assert four["C26 (end)"].passed and four["C26 (edge)"].passed and four["C27"].passed
    assert four["C28"].undecided == "qualitative"
    assert c25.passed is False and "No bandwidth makes both hold" in c25.note
    status = verdict.decide(list(four.values()), fitted=[], predicted=["x"], noise=verdict.Noise.none("clock")).status
    assert status == "differs"
