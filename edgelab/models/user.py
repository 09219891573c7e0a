"""A user's own Keras model, trained by ``edgelab.training.data_parallel`` as readily as a built-in one.

``TrainConfig(model=...)`` takes a built-in name (``edgelab.models.builtin``), a Keras
model, or a function of no arguments that builds one (called once, under the
run's seed). The model becomes a ``UserModel``: its architecture (the
functional model's config), its weights at hand-over (the run starts from
them, so a pretrained model is fine-tuned), its loss if it was compiled
(else sparse categorical cross-entropy on integer labels), and the costs of
its layers in ``edgelab.models.costs``' terms, counted from the real Keras
layers, so the memory check and the device model's emulated time work as
for the built-in models.

Devices get the architecture and weights once, when they load their data
(``UserModel.payload``); every round after that carries only a reference
(``name``, ``digest``), so a round's bytes are those of a built-in model's.
The digest covers architecture, loss and weights: equal digests, equal
models, and results-store keys name the model by it (``key``).

Every device compiles it with plain SGD at the run's learning rate, as the
built-in models are: averaging one step's deltas is then synchronous SGD on
the combined batch. Inputs are the dataset's uint8 images scaled to [0, 1];
a trailing channel axis of 1 is added when the model asks for it.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgelab.common.errors import ConfigError
from edgelab.models.layers import Layer

if TYPE_CHECKING:
    import keras

DEFAULT_LOSS = "sparse_categorical_crossentropy"
_ALLOWED = "a built-in name, a Keras functional or Sequential model, or a function of no arguments that builds one"

# Keras layer classes by the kind ``edgelab.models.costs`` counts their element-wise work as.
_KINDS = {
    "conv": ("Conv1D", "Conv2D", "Conv3D", "DepthwiseConv1D", "DepthwiseConv2D", "SeparableConv1D", "SeparableConv2D"),
    "dense": ("Dense",),
    "batchnorm": ("BatchNormalization", "LayerNormalization", "GroupNormalization"),
    "activation": ("Activation", "ReLU", "LeakyReLU", "PReLU", "ELU", "Softmax"),
    "add": ("Add",),
}
# Layers that make no tensor of their own worth keeping for the backward pass (a view or the input).
_NO_TENSOR = ("InputLayer", "Flatten", "Reshape", "Dropout", "Permute")


@dataclass(frozen=True)
class UserModelPayload:
    """What a device rebuilds a ``UserModel`` from: architecture, loss and initial weights."""

    digest: str
    config: str  # JSON of the functional model's get_config()
    loss: str  # JSON of keras.losses.serialize, or a loss name
    weights: tuple[np.ndarray, ...]

    def build(self) -> keras.Model:
        """The uncompiled model, with the weights it was handed over with."""
        import keras

        model = keras.Model.from_config(json.loads(self.config))
        model.set_weights(list(self.weights))
        return model

    def keras_loss(self) -> Any:
        """The loss the model is compiled with on every device."""
        import keras

        return keras.losses.deserialize(json.loads(self.loss))

    def save(self, path: Path) -> None:
        """Write to ``path`` (an .npz a fresh process can read, ``load``)."""
        arrays = {f"w{i}": w for i, w in enumerate(self.weights)}
        np.savez(path, _digest=self.digest, _config=self.config, _loss=self.loss, **arrays)

    @classmethod
    def load(cls, path: Path) -> UserModelPayload:
        """Read what ``save`` wrote."""
        with np.load(path) as f:
            weights = tuple(f[f"w{i}"] for i in range(sum(k.startswith("w") for k in f.files)))
            return cls(str(f["_digest"]), str(f["_config"]), str(f["_loss"]), weights)


@dataclass(frozen=True, eq=False)
class UserModel:
    """A user's Keras model as the client plans with it; pickles as a light reference (see module docstring).

    Build one with ``user_model``.
    """

    name: str
    digest: str
    input_shape: tuple[int, ...]
    classes: int = 0
    cost_layers: tuple[Layer, ...] = field(default=(), repr=False)
    payload: UserModelPayload | None = field(default=None, repr=False)

    @property
    def key(self) -> str:
        """How results name it: the model's name and the start of its digest."""
        return f"{self.name}@{self.digest[:12]}"

    def __str__(self) -> str:
        return self.key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UserModel) and other.digest == self.digest

    def __hash__(self) -> int:
        return hash(self.digest)

    def __reduce__(self) -> tuple[Any, ...]:
        # Sent with every round: a reference only. The payload travels once, explicitly.
        return UserModel, (self.name, self.digest, self.input_shape, self.classes)

    def __copy__(self) -> UserModel:
        return self  # immutable; a copy through __reduce__ would lose the payload

    def __deepcopy__(self, memo: dict[int, Any]) -> UserModel:
        return self


def user_model(model: keras.Model | Callable[[], keras.Model] | UserModel, *, seed: int = 0) -> UserModel:
    """A ``UserModel`` of ``model``: a Keras model, or a builder called once under ``seed``.

    Raises ``ConfigError`` (parameter ``model``) for anything else, for a model
    whose input or output size is not fixed, and for one Keras cannot serialize
    (a custom layer must be registered with ``keras.saving.register_keras_serializable``).
    """
    if isinstance(model, UserModel):
        return model
    import keras

    from edgelab.common.seeding import seeded
    from edgelab.models.graph import layer_costs, resolve_model

    if not isinstance(model, keras.Model):
        if not callable(model):
            raise ConfigError("model", model, _ALLOWED)
        try:
            inspect.signature(model).bind()
        except (TypeError, ValueError) as err:
            raise ConfigError("model", model, _ALLOWED + " (it takes no arguments)") from err
        with seeded(seed):
            model = model()
    net = resolve_model(model)  # a Sequential becomes functional, uncompiled: the loss is read from `model`
    if len(net.inputs) != 1 or len(net.outputs) != 1:
        raise ConfigError("model", net.name, "a model of one input and one output (images in, class scores out)")
    shape = tuple(net.inputs[0].shape[1:])
    out = tuple(net.outputs[0].shape[1:])
    if any(d is None for d in shape) or len(out) != 1 or out[0] is None:
        raise ConfigError(
            "model", net.name, f"a fixed input size and one score per class; got input {shape}, output {out}"
        )
    try:
        config = json.dumps(net.get_config())
        keras.Model.from_config(json.loads(config))
        loss = json.dumps(keras.losses.serialize(keras.losses.get(_compiled_loss(model))))
    except (TypeError, ValueError) as err:
        raise ConfigError(
            "model",
            net.name,
            "a model Keras can serialize (register custom layers and losses with "
            f"keras.saving.register_keras_serializable): {err}",
        ) from err
    weights = tuple(np.array(w) for w in net.get_weights())
    digest = hashlib.sha256()
    digest.update(canonical_architecture(json.loads(config)).encode())
    digest.update(loss.encode())
    for w in weights:
        digest.update(f"{w.dtype.str}{w.shape}".encode())
        digest.update(np.ascontiguousarray(w).tobytes())
    hexdigest = digest.hexdigest()
    rows = _cost_layers(net, layer_costs(net))
    payload = UserModelPayload(hexdigest, config, loss, weights)
    return UserModel(net.name, hexdigest, tuple(int(d) for d in shape), int(out[0]), tuple(rows), payload)


def canonical_architecture(config: dict[str, Any]) -> str:
    """The architecture with layers named by position: Keras numbers unnamed layers per process (dense_7)."""
    names = {layer["name"]: f"#{i}" for i, layer in enumerate(config.get("layers", []))}

    def rename(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: rename(v) for k, v in value.items()}
        if isinstance(value, list):
            return [rename(v) for v in value]
        return names.get(value, value) if isinstance(value, str) else value

    return json.dumps(rename(config), sort_keys=True)


def _compiled_loss(net: keras.Model) -> Any:
    loss = getattr(net, "loss", None) if getattr(net, "compiled", False) else None
    if loss is None:
        return DEFAULT_LOSS
    if isinstance(loss, list | tuple | dict):
        raise ValueError(f"one loss for the one output, not {loss!r}")
    return loss


def _cost_layers(net: keras.Model, costs: list[Any]) -> list[Layer]:
    """The layers as ``edgelab.models.costs`` counts them (kinds, BN statistics apart, fused activations)."""
    rows = []
    for layer, cost in zip(net.layers, costs, strict=True):
        kind = next((k for k, names in _KINDS.items() if cost.kind in names), "pool" if "Pool" in cost.kind else "")
        frozen = sum(math.prod(w.shape) for w in layer.non_trainable_weights)
        output = tuple(int(d) for d in cost.output_shape)
        if cost.kind == "InputLayer":
            continue  # the input is counted apart (input_floats_per_sample)
        rows.append(
            Layer(
                cost.name,
                kind or cost.kind,
                output,
                params=cost.params - frozen,
                non_trainable=frozen,
                macs=cost.macs,
                fused=cost.kind in _NO_TENSOR,
            )
        )
        activation = getattr(getattr(layer, "activation", None), "__name__", "linear")
        if kind in ("conv", "dense") and activation != "linear":
            rows.append(Layer(f"{cost.name}_{activation}", "activation", output, fused=True))
    return rows


def prepared_shape(model: UserModel, image_shape: tuple[int, ...]) -> tuple[int, ...]:
    """The input shape ``model`` takes images of ``image_shape`` as; ``ConfigError`` if it cannot."""
    if image_shape == model.input_shape or (*image_shape, 1) == model.input_shape:
        return model.input_shape
    raise ConfigError(
        "model",
        model.key,
        f"an input of the dataset's image shape {image_shape} (or {(*image_shape, 1)}); it takes {model.input_shape}",
    )


def check_data(model: UserModel, image_shape: tuple[int, ...], n_classes: int) -> None:
    """``ConfigError`` unless ``model`` takes the dataset's images and scores each of its ``n_classes`` labels."""
    prepared_shape(model, tuple(image_shape))
    if model.classes < n_classes:
        raise ConfigError(
            "model", model.key, f"one output per class: the labels run 0..{n_classes - 1}; it has {model.classes}"
        )
