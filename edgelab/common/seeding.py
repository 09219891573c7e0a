"""Seeded model building that other threads cannot disturb.

Keras gives every random initializer built without a seed one drawn from
Python's global ``random`` (``randint(1, 10**9)``). In a Dask worker, or in a
process holding a Dask client, other threads draw from that generator too
(Tornado's jittered periodic callbacks, for one), so ``set_random_seed(s)``
followed by building a model gave different weights from run to run when a
draw landed in between. ``seeded(s)`` hands Keras a private generator seeded
with ``s`` while the model is built: the weights are those a quiet process
gets after ``keras.utils.set_random_seed(s)``, whatever the other threads do.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# One build at a time per process: the private generator replaces a module global.
_LOCK = threading.RLock()


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Build Keras models inside this block; their weights depend on ``seed`` alone."""
    import keras

    with _LOCK:
        keras.utils.set_random_seed(seed)
        seed_generator = _keras_seed_source()
        if seed_generator is None:  # a Keras that draws its seeds elsewhere: the global seed alone
            yield
            return
        shared = seed_generator.python_random  # type: ignore[attr-defined]
        seed_generator.python_random = random.Random(seed)  # type: ignore[attr-defined]
        try:
            yield
        finally:
            seed_generator.python_random = shared  # type: ignore[attr-defined]


def _keras_seed_source() -> object | None:
    """Keras' module whose ``python_random`` gives initializers their default seeds (Keras 3)."""
    try:
        from keras.src.random import seed_generator
    except ImportError:
        return None
    return seed_generator if hasattr(seed_generator, "python_random") else None
