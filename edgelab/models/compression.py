"""Deep Compression's three stages on a Keras model: magnitude pruning, int8 quantization, entropy coding.

Paper: Han, Mao, Dally, "Deep Compression: Compressing Deep Neural Networks
with Pruning, Trained Quantization and Huffman Coding", ICLR 2016
(arxiv.org/abs/1510.00149); surveyed by Qiao et al. (qiao/method-compression).

* Pruning zeroes the smallest-magnitude fraction of every Conv2D and Dense
  kernel (biases are kept, as in the TensorFlow Model Optimization toolkit's
  ``prune_low_magnitude``), then fine-tunes with the mask held. Done here in
  numpy: the toolkit (tensorflow-model-optimization 0.8.1) cannot prune this
  model. It forces ``TF_USE_LEGACY_KERAS=1``, works on ``tf_keras`` (Keras 2)
  models only and refuses a Keras 3 model; ``tf-keras`` needs the full
  ``tensorflow`` wheel beside ``tensorflow-cpu`` and the toolkit pins
  ``absl-py~=1.2`` (this environment has 2.5).
* Quantization is TensorFlow Lite's full-integer post-training quantization:
  int8 weights (per channel) and int8 activations, whose ranges come from a
  representative dataset. Han et al. quantize by weight sharing (k-means) and
  retrain; this is the quantization an edge device runs today.
* Entropy coding compresses the int8 flatbuffer with DEFLATE (zlib, level 9),
  whose second half is Huffman coding. Beside it, for the int8 weight symbols
  alone: their Shannon entropy bound and the size of an optimal Huffman code.

Models run in the LiteRT interpreter (``ai-edge-litert``) with one thread, the
way a single-core budget on a Pi runs them; TensorFlow's own, deprecated
``tf.lite.Interpreter`` is used where that package is missing.
"""

from __future__ import annotations

import contextlib
import heapq
import io
import os
import tempfile
import time
import zlib
from typing import TYPE_CHECKING, Any

import numpy as np

from edgelab.common.errors import ConfigError

if TYPE_CHECKING:
    import keras

#: The pipeline's stages, in order: each works on the one before.
STAGES = ("float32", "pruned", "int8", "entropy")
#: Layer types whose kernels are pruned.
PRUNABLE = ("Conv2D", "Dense")
# zlib's strongest level: the coded size is what the best DEFLATE achieves.
DEFLATE_LEVEL = 9
# flatbuffer TensorType of int8 tensors (tflite schema.fbs).
_INT8 = 9


def check_sparsity(sparsity: float, parameter: str = "sparsity") -> float:
    """Return ``sparsity`` as a float if it is in [0, 1), else raise ``ConfigError``."""
    if isinstance(sparsity, bool) or not isinstance(sparsity, int | float) or not 0 <= sparsity < 1:
        raise ConfigError(parameter, sparsity, "a fraction of weights to zero in [0, 1)")
    return float(sparsity)


# ------------------------------------------------------------ pruning ----


def prunable_kernels(model: keras.Model) -> list[Any]:
    """The kernel variables that pruning zeroes: those of every Conv2D and Dense layer, in layer order."""
    return [layer.kernel for layer in model.layers if type(layer).__name__ in PRUNABLE]


def magnitude_masks(kernels: list[np.ndarray], sparsity: float) -> list[np.ndarray]:
    """Masks keeping all but the ``round(sparsity * size)`` smallest-magnitude weights of each kernel.

    Ties are broken by position (a stable sort), so each mask zeroes exactly
    that many weights whatever the values.

    Examples
    --------
    >>> magnitude_masks([np.array([0.3, -0.1, 0.2, -0.4])], 0.5)[0]
    array([ True, False, False,  True])
    """
    sparsity = check_sparsity(sparsity)
    masks = []
    for kernel in kernels:
        flat = np.abs(np.asarray(kernel)).ravel()
        mask = np.ones(flat.size, dtype=bool)
        mask[np.argsort(flat, kind="stable")[: round(sparsity * flat.size)]] = False
        masks.append(mask.reshape(np.shape(kernel)))
    return masks


def apply_masks(model: keras.Model, masks: list[np.ndarray]) -> None:
    """Zero the pruned weights of ``model``'s kernels."""
    for variable, mask in zip(prunable_kernels(model), masks, strict=True):
        variable.assign(np.where(mask, variable.numpy(), 0.0).astype(variable.dtype))


def prune(model: keras.Model, sparsity: float, x: np.ndarray, y: np.ndarray, *, epochs: int, batch_size: int) -> None:
    """Prune ``model`` in place to ``sparsity`` per kernel, then fine-tune ``epochs`` epochs with the masks held.

    The masks are applied again after every step, as the toolkit's
    ``UpdatePruningStep`` does, so the sparsity is exact when training ends.
    """
    kernels = prunable_kernels(model)
    masks = magnitude_masks([k.numpy() for k in kernels], sparsity)
    apply_masks(model, masks)
    if not epochs or sparsity == 0:
        return
    # Keras applies a variable's constraint after each optimizer step, inside the compiled step
    # (traced again here, since a step compiled before would not know of the constraint).
    for variable, mask in zip(kernels, masks, strict=True):
        variable.constraint = _Masked(mask.astype(np.float32))
    try:
        model.make_train_function(force=True)
        model.fit(x, y, batch_size=batch_size, epochs=epochs, shuffle=False, verbose=0)
    finally:
        for variable in kernels:
            variable.constraint = None
        model.make_train_function(force=True)
    # The constraint leaves -0.0 where a weight was negative; stored zeros are +0.0, as any pruning tool writes.
    apply_masks(model, masks)


class _Masked:
    """A constraint holding pruned weights at zero."""

    def __init__(self, mask: np.ndarray) -> None:
        self.mask = mask

    def __call__(self, weights: Any) -> Any:
        return weights * self.mask


def sparsity_of(model: keras.Model) -> list[dict[str, Any]]:
    """Per pruned kernel: its layer, weights and the fraction of them exactly zero."""
    rows = []
    for layer in (la for la in model.layers if type(la).__name__ in PRUNABLE):
        kernel = layer.kernel.numpy()
        rows.append({"layer": layer.name, "weights": kernel.size, "zeros": int((kernel == 0).sum())})
    return [{**r, "sparsity": r["zeros"] / r["weights"]} for r in rows]


def keras_weights(model: keras.Model) -> bytes:
    """The bytes of Keras' ``.weights.h5`` file of ``model`` (float32 weights, as Keras stores them)."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.weights.h5")
        model.save_weights(path)
        with open(path, "rb") as f:
            return f.read()


# ------------------------------------------------------- quantization ----


def to_tflite(model: keras.Model, *, representative: np.ndarray | None = None) -> bytes:
    """The TensorFlow Lite flatbuffer of ``model``: float32, or full int8 when ``representative`` images are given.

    Full int8: weights, activations, input and output are int8; the
    activation ranges are calibrated on ``representative`` (one image at a
    time, as the converter asks).
    """
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    if representative is not None:
        if len(representative) == 0:
            raise ConfigError("representative", 0, "at least one image to calibrate the activation ranges")
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = lambda: ([image[None]] for image in representative)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = tf.int8
        converter.inference_output_type = tf.int8
    # The converter exports a SavedModel first and prints its signature: not the caller's output.
    with contextlib.redirect_stdout(io.StringIO()):
        return bytes(converter.convert())


def interpreter(flatbuffer: bytes, *, threads: int = 1) -> Any:
    """An interpreter of ``flatbuffer`` on ``threads`` threads (LiteRT's, else TensorFlow's own)."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:  # ai-edge-litert not installed: the deprecated one TensorFlow still ships
        from tensorflow.lite.python.interpreter import Interpreter
    return Interpreter(model_content=flatbuffer, num_threads=threads)


def runtime_name() -> str:
    """Which interpreter ``interpreter`` uses, with its version."""
    try:
        from importlib.metadata import version

        return f"ai-edge-litert {version('ai-edge-litert')}"
    except Exception:  # noqa: BLE001 - any failure means the package is not usable
        import tensorflow as tf

        return f"tf.lite.Interpreter (TensorFlow {tf.__version__})"


def predict(flatbuffer: bytes, images: np.ndarray) -> np.ndarray:
    """The model's float outputs for ``images`` (float32 in [0, 1]): int8 inputs quantized, int8 outputs dequantized."""
    run = interpreter(flatbuffer)
    run.resize_tensor_input(run.get_input_details()[0]["index"], images.shape)
    run.allocate_tensors()
    source, target = run.get_input_details()[0], run.get_output_details()[0]
    run.set_tensor(source["index"], _to_input(images, source))
    run.invoke()
    out = run.get_tensor(target["index"])
    if target["dtype"] == np.int8:
        scale, zero = target["quantization"]
        return (out.astype(np.float32) - zero) * scale
    return out


def _to_input(images: np.ndarray, detail: dict[str, Any]) -> np.ndarray:
    if detail["dtype"] != np.int8:
        return images.astype(np.float32)
    scale, zero = detail["quantization"]
    return np.clip(np.round(images / scale + zero), -128, 127).astype(np.int8)


def time_inference(model_bytes: bytes, images: np.ndarray, *, coded: bool = False, warmup: int = 5) -> dict[str, float]:
    """The calling thread's CPU time to load a model and to answer ``images`` one at a time, after ``warmup`` answers.

    One image per invoke, the way a camera on a device is answered; thread
    time, because a one-thread interpreter computes in the calling thread.
    ``coded`` models are DEFLATE-decoded first, as part of loading.
    """
    cpu0 = time.thread_time()
    flatbuffer = decode(model_bytes) if coded else model_bytes
    run = interpreter(flatbuffer)
    run.allocate_tensors()
    source = run.get_input_details()[0]
    load_s = time.thread_time() - cpu0
    inputs = [_to_input(image[None], source) for image in images]
    for x in inputs[:warmup]:
        run.set_tensor(source["index"], x)
        run.invoke()
    cpu0 = time.thread_time()
    for x in inputs:
        run.set_tensor(source["index"], x)
        run.invoke()
    return {"load_cpu_s": load_s, "cpu_s_per_image": (time.thread_time() - cpu0) / len(inputs)}


# ---------------------------------------------------- entropy coding ----


def encode(flatbuffer: bytes) -> bytes:
    """The flatbuffer DEFLATE-coded (LZ77 then Huffman): what is stored and sent."""
    return zlib.compress(flatbuffer, DEFLATE_LEVEL)


def decode(coded: bytes) -> bytes:
    """The flatbuffer back from ``encode``'s bytes."""
    return zlib.decompress(coded)


def int8_weights(flatbuffer: bytes) -> np.ndarray:
    """Every int8 constant of an int8 flatbuffer (the conv and dense weights), concatenated in tensor order."""
    try:
        from ai_edge_litert import schema_py_generated as schema
    except ImportError:
        from tensorflow.lite.python import schema_py_generated as schema

    model = schema.Model.GetRootAs(flatbuffer, 0)
    parts = []
    for g in range(model.SubgraphsLength()):
        graph = model.Subgraphs(g)
        for t in range(graph.TensorsLength()):
            tensor = graph.Tensors(t)
            buffer = model.Buffers(tensor.Buffer())
            if tensor.Type() == _INT8 and buffer.DataLength():
                parts.append(buffer.DataAsNumpy().view(np.int8))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int8)


def entropy_bound_bytes(symbols: np.ndarray) -> float:
    """Shannon's bound: the fewest bytes any code of these symbols, each coded alone, can take (n * H / 8)."""
    counts = np.unique(symbols, return_counts=True)[1]
    p = counts / counts.sum()
    return float(-(counts * np.log2(p)).sum() / 8)


def huffman_bytes(symbols: np.ndarray) -> float:
    """Bytes of the symbols under an optimal Huffman code built for them (the code table not counted).

    The coded length is the sum of every merged weight in Huffman's
    construction; it lies within one bit per symbol above the entropy bound.
    """
    heap = [int(c) for c in np.unique(symbols, return_counts=True)[1]]
    if len(heap) < 2:  # one symbol still takes one bit per occurrence
        return sum(heap) / 8
    heapq.heapify(heap)
    bits = 0
    while len(heap) > 1:
        merged = heapq.heappop(heap) + heapq.heappop(heap)
        bits += merged
        heapq.heappush(heap, merged)
    return bits / 8
