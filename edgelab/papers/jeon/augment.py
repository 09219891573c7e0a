"""Class balancing by augmentation, spread over the devices of a cluster.

Jeon et al. grow every tomato class to 10,000 images with Keras' random
rotation, flip, crop and zoom layers (their parameters are not stated; ours
are in ``AUGMENTATION`` and recorded with every result). Each class is
augmented on one device worker, classes spread round-robin over the devices:
a class keeps its own images and adds augmented copies of them, taken in
turn, until it holds the target. Only training images are augmented, so no
copy of a validation image can reach training.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pandas as pd

from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.common import checks
from edgelab.runtime.fleet import Fleet

#: Chosen here (the paper names the layers, not their settings).
AUGMENTATION: dict[str, Any] = {"rotation": 0.1, "flip": "horizontal_and_vertical", "crop": 0.9, "zoom": 0.1}


def augment_class(images: np.ndarray, target: int, seed: int, settings: dict[str, Any]) -> dict[str, Any]:
    """Grow one class's images to ``target`` with random rotation, flip, crop and zoom.

    Parameters
    ----------
    images
        The class's images, uint8 ``(n, H, W, 3)``.
    target
        Images the class holds afterwards (>= n); the first n are the originals.
    seed
        Seed of the random layers.
    settings
        ``AUGMENTATION``-style settings.

    Returns
    -------
    dict
        ``images`` (uint8 ``(target, H, W, 3)``), ``made`` (augmented copies), ``wall_s``, ``cpu_s``.
    """
    import keras

    start, cpu0 = time.perf_counter(), time.process_time()
    n, h, w = images.shape[:3]
    extra = target - n
    layers = keras.Sequential(
        [
            keras.layers.RandomRotation(settings["rotation"], seed=seed),
            keras.layers.RandomFlip(settings["flip"], seed=seed + 1),
            keras.layers.RandomCrop(int(h * settings["crop"]), int(w * settings["crop"]), seed=seed + 2),
            keras.layers.Resizing(h, w),
            keras.layers.RandomZoom(settings["zoom"], seed=seed + 3),
        ]
    )
    made = []
    source = np.resize(np.arange(n), extra)  # originals in turn: 0, 1, ..., n-1, 0, 1, ...
    for first in range(0, extra, 64):
        batch = images[source[first : first + 64]].astype(np.float32)
        out = np.asarray(layers(batch, training=True))
        made.append(np.clip(np.rint(out), 0, 255).astype(np.uint8))
    grown = np.concatenate([images, *made]) if made else images.copy()
    return {
        "images": grown,
        "made": int(extra),
        "wall_s": time.perf_counter() - start,
        "cpu_s": time.process_time() - cpu0,
    }


def augment(
    cluster: DeviceCluster, x: np.ndarray, y: np.ndarray, *, per_class: int, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, pd.DataFrame]:
    """Balance every class to ``per_class`` images on the cluster's devices.

    Returns
    -------
    x, y, per_class_table
        The balanced images and labels (class by class) and, per class: the
        device, raw and final counts, the augmentation factor, wall time and images/s.
    """
    classes = [int(c) for c in np.unique(y)]
    largest = int(max((y == c).sum() for c in classes))
    checks.integer("augment_per_class", per_class, at_least=largest)  # the largest class's images
    where = {c: cluster.devices[i % len(cluster.devices)] for i, c in enumerate(classes)}
    # Each class's images go straight to its device; a device lost on the way is waited for and the work redone.
    fleet = Fleet.for_cluster(cluster, sorted(set(where.values())), lambda todo: None)

    def body() -> dict[int, dict[str, Any]]:
        futures = {}
        for c in classes:
            data = fleet.send(where[c], x[y == c])
            futures[str(c)] = fleet.submit(where[c], augment_class, data, per_class, seed * 1000 + c, AUGMENTATION)
        fleet.wait(futures)
        return {int(c): out for c, out in fleet.gather(futures).items()}

    results = fleet.attempt("augment", 0, body)
    xs, ys, rows = [], [], []
    for c in classes:
        out, device = results[c], where[c]
        xs.append(out["images"])
        ys.append(np.full(len(out["images"]), c, dtype=y.dtype))
        raw = int((y == c).sum())
        rows.append(
            {
                "class": c,
                "device": device,
                "raw": raw,
                "augmented": len(out["images"]),
                "factor": len(out["images"]) / raw,
                "made": out["made"],
                "wall_s": out["wall_s"],
                "images_per_s": out["made"] / out["wall_s"] if out["wall_s"] else np.nan,
            }
        )
    return np.concatenate(xs), np.concatenate(ys), pd.DataFrame(rows)
