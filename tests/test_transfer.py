"""Transfer learning's phase 1 on the frozen base's features: the same model as running the base itself."""

from __future__ import annotations

import numpy as np

from edgelab.models import transfer
from edgelab.models.transfer import TransferConfig


def test_without_phase_2_the_scores_are_the_whole_models_on_the_validation_images_bit_for_bit() -> None:
    # Prepare: seeded images, a head trained two epochs on the frozen (random) base, no fine-tuning
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(48, 32, 32, 3), dtype=np.uint8)
    y = rng.integers(0, 10, size=48)
    xv = rng.integers(0, 256, size=(80, 32, 32, 3), dtype=np.uint8)  # two batches of predict's 64, one short
    yv = rng.integers(0, 10, size=80)
    cfg = TransferConfig(classes=tuple(range(10)), image_size=32, phase1_epochs=2, phase2_epochs=0)

    # Execute
    trained = transfer.train(cfg, x, y, xv, yv)
    model = transfer.build(cfg)
    model.set_weights(trained.weights)

    # Assert: what the head gave on the base's features is what the whole trained model gives on the images
    assert trained.scores.shape == (80, 10)
    np.testing.assert_array_equal(trained.scores, model.predict(transfer.preprocess(xv), batch_size=64, verbose=0))
    assert list(trained.history["epoch"]) == [1, 2]
