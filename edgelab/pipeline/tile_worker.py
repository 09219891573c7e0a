"""What a device worker does with a fused tile (``edgelab.pipeline.tiles``): hold it, run its image region.

A tile arrives as a Keras config and weights, like any pipeline stage, and is
rebuilt and kept by ``edgelab.pipeline.worker``; this module adds the two
layers a tile may need (border padding, and TF's "same" average pooling that
divides by the real positions only), registered so the config rebuilds on the
worker, and a run that also measures the tile's peak memory and the bytes its
output takes on the wire to the gather node.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import numpy as np

Pads = tuple[int, int, int, int]  # top, bottom, left, right


@functools.cache
def tile_layers() -> tuple[type, type]:
    """The two layers a tile adds, registered so a worker rebuilds a tile from its config (Keras imported here)."""
    import keras

    @keras.saving.register_keras_serializable(package="edgelab")
    class TilePadding2D(keras.layers.Layer):
        """Constant padding (top, bottom, left, right) of an NHWC map: 0, or -inf before max pooling."""

        def __init__(self, pads: Pads, value: float = 0.0, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.pads, self.value = tuple(int(p) for p in pads), float(value)

        def call(self, x: Any) -> Any:
            t, b, left, right = self.pads
            return keras.ops.pad(x, [[0, 0], [t, b], [left, right], [0, 0]], constant_values=self.value)

        def compute_output_shape(self, shape: tuple[Any, ...]) -> tuple[Any, ...]:
            t, b, left, right = self.pads
            return (shape[0], shape[1] + t + b, shape[2] + left + right, shape[3])

        def get_config(self) -> dict[str, Any]:
            return {**super().get_config(), "pads": list(self.pads), "value": self.value}

    @keras.saving.register_keras_serializable(package="edgelab")
    class BorderAveragePooling2D(keras.layers.Layer):
        """Average pooling over the real positions only, as TF's "same" average pooling: sum / count."""

        def __init__(self, pool_size: Any, strides: Any, pads: Pads, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.pool_size, self.strides = tuple(pool_size), tuple(strides)
            self.pads = tuple(int(p) for p in pads)

        def call(self, x: Any) -> Any:
            t, b, left, right = self.pads
            widths = [[0, 0], [t, b], [left, right], [0, 0]]
            pool = functools.partial(keras.ops.average_pool, pool_size=self.pool_size, strides=self.strides)
            real = keras.ops.pad(keras.ops.ones_like(x[..., :1]), widths)
            return pool(keras.ops.pad(x, widths)) / pool(real)

        def get_config(self) -> dict[str, Any]:
            extra = {"pool_size": list(self.pool_size), "strides": list(self.strides), "pads": list(self.pads)}
            return {**super().get_config(), **extra}

    return TilePadding2D, BorderAveragePooling2D


# ------------------------------------------------------ on a device worker ----


def serialized_bytes(value: Any) -> int:
    """Bytes of the frames Dask's protocol makes of ``value`` (header included), as they cross the wire."""
    from distributed.protocol import serialize_bytelist

    # A frame may be a typed memoryview: len() would count its items, not its bytes.
    return int(sum(memoryview(frame).nbytes for frame in serialize_bytelist(value)))


def load_tile(run_id: str, stage: str, config: str, weights: list[np.ndarray]) -> dict[str, Any]:
    """Rebuild a tile's model on this device and keep it (``edgelab.pipeline.worker.load_stage``, one image)."""
    from edgelab.pipeline import worker

    tile_layers()
    return worker.load_stage(run_id, stage, config, weights, 1)


def run_tile(run_id: str, stage: str, repeat: int, x: np.ndarray) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """Run a tile on its image region (``worker.run_stage``) and add what it cost in memory and on the wire.

    The record gains ``peak_rss_delta_bytes`` (the process's peak resident memory during the run above its
    resident memory before, Linux only, else None) and ``bytes_serialized`` (the output as Dask's protocol
    frames it for the gather node).
    """
    from edgelab.common import process_memory
    from edgelab.pipeline import worker

    before = process_memory.rss_bytes()
    windowed = process_memory.reset_peak()
    t0 = time.time()
    out, records = worker.run_stage(run_id, stage, repeat, x)
    peak = process_memory.peak_bytes() if windowed else None
    record = {
        **records[-1],
        "peak_rss_delta_bytes": None if peak is None else max(peak - before, 0),
        "bytes_serialized": serialized_bytes(out),
        "task_wall_s": time.time() - t0,
    }
    return out, [*records[:-1], record]
