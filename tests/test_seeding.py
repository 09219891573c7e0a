"""A seeded build gives the same weights however busy the process's other threads are."""

from __future__ import annotations

import random
import sys
import threading

import numpy as np

from edgelab.common.seeding import seeded


def _build() -> list[np.ndarray]:
    import keras

    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(5), keras.layers.Dense(3)])
    return model.get_weights()


def test_the_weights_depend_on_the_seed_alone_while_other_threads_draw_from_random() -> None:
    with seeded(7):
        quiet = _build()
    stop = threading.Event()

    def draw() -> None:  # what Tornado's jittered callbacks do in a Dask process
        while not stop.is_set():
            random.random()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, so a draw lands inside every build (5 of 5 without seeded)
    thread = threading.Thread(target=draw, daemon=True)
    thread.start()
    try:
        busy = [_seeded_build(7) for _ in range(5)]
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(interval)
    for weights in busy:
        for a, b in zip(quiet, weights, strict=True):
            np.testing.assert_array_equal(a, b)


def test_the_seed_chooses_the_weights_and_the_global_generator_is_restored() -> None:
    import keras.src.random.seed_generator as source

    before = source.python_random
    with seeded(1):
        one = _build()
    assert source.python_random is before
    with seeded(2):
        two = _build()
    assert not np.array_equal(one[0], two[0])


def _seeded_build(seed: int) -> list[np.ndarray]:
    with seeded(seed):
        return _build()
