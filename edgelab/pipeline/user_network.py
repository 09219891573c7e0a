"""A user's network for the pipeline experiments: built once under the run's seed, and named for the results store.

The pipeline experiments cut a network by its layers, so they take any
functional Keras model (or a function of no arguments that builds one), not
only a classifier as ``edgelab.models.user`` requires. A builder is called
under the run's seed, so its initial weights, and the key its runs are stored
under, are the same in every session.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from edgelab.common.seeding import seeded
from edgelab.models.graph import resolve_model
from edgelab.models.user import canonical_architecture

if TYPE_CHECKING:
    import keras

__all__ = ["network_identity", "rebuilder", "seeded_network"]


def seeded_network(model: keras.Model | Callable[[], keras.Model], seed: int) -> keras.Model:
    """The functional model ``model`` is, or builds under ``seed`` (``ConfigError`` naming ``model`` otherwise)."""
    with seeded(seed):
        return resolve_model(model)


def rebuilder(model: keras.Model | Callable[[], keras.Model], seed: int) -> Callable[[], keras.Model]:
    """A function that builds ``model`` afresh each call, with the same initial weights every time."""
    first = seeded_network(model, seed)
    weights = [np.array(w) for w in first.get_weights()]
    config = first.get_config()

    def rebuild() -> keras.Model:
        import keras

        built = keras.Model.from_config(copy.deepcopy(config))  # from_config consumes the dict it is given
        built.set_weights(weights)
        return built

    return rebuild


def network_identity(model: keras.Model) -> dict[str, str]:
    """What names a network in the results store: its name, and digests of its structure and initial weights.

    Layers are named by position in the structure's digest: Keras numbers unnamed
    layers per process, and the same network must get the same key in every session.
    """
    config = canonical_architecture(json.loads(json.dumps(model.get_config(), default=str))).encode()
    weights = hashlib.sha256()
    for w in model.get_weights():
        weights.update(np.ascontiguousarray(w).tobytes())
    return {
        "name": model.name,
        "config_sha256": hashlib.sha256(config).hexdigest()[:16],
        "weights_sha256": weights.hexdigest()[:16],
    }
