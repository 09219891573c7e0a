"""What a built-in model costs, from its layer shapes alone: parameters, FLOPs, activations.

Kept apart from ``edgelab.models.builtin`` so that the checks before any cluster work
(memory, the device model's compute time) never import TensorFlow. Each model
is described as a list of ``Layer`` rows; ``tests/test_models.py`` checks the
parameter counts and output shapes against the real Keras models.

FLOPs count a multiply-add as two. A training step costs three forward passes
of the multiply-adds (forward, gradient with respect to the input, gradient
with respect to the weights), except a dense layer that takes the images
themselves: no gradient is asked of the data, and MXNet 0.9.5 (Park 2020's
framework) skips that product, as TensorFlow does, so it costs two. A first
convolution still costs three: MXNet 0.9.5's convolution multiplies out the
data's gradient whatever is asked of it and drops it afterwards; TensorFlow
prunes it (4% of LeNet-CNN's count, 0.2% of ResNet-32's), and the count stays
with the framework the paper-fitted board ran. Element-wise work of
normalisation, activations and additions counts as ``ELEMENTWISE_TRAINING_FLOPS`` per
output element. These are conventions: the device model
(``edgelab.emulation.device_model``) fits its rate on measured paper cells, so a
constant factor here changes the fitted rate, not the predictions.
"""

from __future__ import annotations

import math

from edgelab.common.errors import ConfigError
from edgelab.models.layers import Layer
from edgelab.models.user import UserModel, user_model

#: Element-wise FLOPs per output element over forward and backward (normalise, scale, shift; their gradients).
ELEMENTWISE_TRAINING_FLOPS = {"batchnorm": 10, "activation": 3, "add": 2, "pool": 2}
#: Depths of the CIFAR ResNet the paper names (6n+2: n = 5, 13, 18).
PAPER_RESNET_DEPTHS = (32, 80, 110)
#: Side of the images the CIFAR ResNets take: 28x28 crops of CIFAR's 32x32, as in MXNet 0.9.5's
#: ``example/image-classification/train_cifar10.py`` (``image_shape='3,28,28'``, ``pad_size=4``), whose
#: ``symbols/resnet.py`` builds the paper's depths only for images of height <= 28 (larger ones get the
#: ImageNet ResNet, which has no 32, 80 or 110).
RESNET_SIDE = 28
#: Parameters of CIFAR ResNet v1 as He et al. 2016 (Table 6) report them, identity shortcuts with zero padding.
HE2016_PARAMETERS = {20: 270_000, 32: 460_000, 44: 660_000, 56: 850_000, 110: 1_700_000}


def resnet_blocks(name: str) -> int:
    """Residual blocks per stage ``n`` of ``resnet<6n+2>``; ``ConfigError`` for any other name.

    Examples
    --------
    >>> resnet_blocks("resnet32"), resnet_blocks("resnet110")
    (5, 18)
    """
    depth = name.removeprefix("resnet")
    if not name.startswith("resnet") or not depth.isdigit() or int(depth) < 8 or (int(depth) - 2) % 6:
        raise ConfigError("model", name, "mlp, cnn or resnet<depth> with depth = 6n+2 >= 8 (e.g. resnet32, resnet110)")
    return (int(depth) - 2) // 6


def is_resnet(name: str) -> bool:
    """Whether ``name`` names a CIFAR ResNet (``resnet32`` ...)."""
    return name.startswith("resnet")


def layers(name: str) -> list[Layer]:
    """The layers of a built-in model, in order (see ``edgelab.models.builtin`` for the architectures).

    A user's model (a Keras model, a function that builds one, or its ``edgelab.models.user.UserModel``)
    brings its own, counted from its Keras layers.
    """
    if not isinstance(name, str):
        return list(_user(name).cost_layers)
    if name == "mlp":
        return _dense_stack((784,), (128, 64, 10))
    if name == "cnn":
        out = [
            Layer("conv1", "conv", (24, 24, 20), 5 * 5 * 1 * 20 + 20, macs=24 * 24 * 20 * 25),
            Layer("tanh1", "activation", (24, 24, 20), fused=True),
            Layer("pool1", "pool", (12, 12, 20)),
            Layer("conv2", "conv", (8, 8, 50), 5 * 5 * 20 * 50 + 50, macs=8 * 8 * 50 * 500),
            Layer("tanh2", "activation", (8, 8, 50), fused=True),
            Layer("pool2", "pool", (4, 4, 50)),
        ]
        return out + _dense_stack((800,), (500, 10))
    return _resnet(resnet_blocks(name))


def _user(model):
    """A user's model as a ``UserModel`` (costs depend on its architecture alone, so any seed will do)."""
    return model if isinstance(model, UserModel) else user_model(model)


def _dense_stack(inputs: tuple[int, ...], widths: tuple[int, ...]) -> list[Layer]:
    out, fan_in = [], inputs[0]
    for i, width in enumerate(widths):
        out.append(Layer(f"dense{i + 1}", "dense", (width,), fan_in * width + width, macs=fan_in * width))
        out.append(Layer(f"act{i + 1}", "activation", (width,), fused=True))
        fan_in = width
    return out


def _conv_bn(name: str, size: int, c_in: int, c_out: int, kernel: int) -> list[Layer]:
    # Convolutions followed by batch normalisation carry no bias (BN's shift replaces it).
    shape = (size, size, c_out)
    return [
        Layer(
            f"{name}_conv", "conv", shape, kernel * kernel * c_in * c_out, macs=size * size * c_out * kernel**2 * c_in
        ),
        Layer(f"{name}_bn", "batchnorm", shape, 2 * c_out, non_trainable=2 * c_out),
    ]


def _resnet(n: int) -> list[Layer]:
    """CIFAR ResNet v1 (He et al. 2016, section 4.2) with projection shortcuts where the shape changes."""
    size = RESNET_SIDE
    out = [*_conv_bn("stem", size, 3, 16, 3), Layer("stem_relu", "activation", (size, size, 16))]
    c_in = 16
    for stage, c_out in enumerate((16, 32, 64)):
        for block in range(n):
            name = f"s{stage + 1}b{block + 1}"
            if block == 0 and stage > 0:
                size //= 2
            out += _conv_bn(f"{name}_a", size, c_in, c_out, 3)
            out.append(Layer(f"{name}_a_relu", "activation", (size, size, c_out)))
            out += _conv_bn(f"{name}_b", size, c_out, c_out, 3)
            if c_in != c_out:
                out += _conv_bn(f"{name}_proj", size, c_in, c_out, 1)
            out.append(Layer(f"{name}_add", "add", (size, size, c_out)))
            out.append(Layer(f"{name}_relu", "activation", (size, size, c_out)))
            c_in = c_out
    out.append(Layer("pool", "pool", (64,)))
    out.append(Layer("dense", "dense", (10,), 64 * 10 + 10, macs=64 * 10))
    out.append(Layer("softmax", "activation", (10,)))
    return out


def parameter_count(name: str, *, trainable_only: bool = True) -> int:
    """Parameters of a built-in model (trainable; add the BN statistics with ``trainable_only=False``).

    Examples
    --------
    >>> parameter_count("mlp"), parameter_count("cnn")
    (109386, 431080)
    """
    rows = layers(name)
    return sum(r.params for r in rows) + (0 if trainable_only else sum(r.non_trainable for r in rows))


def weight_count(name: str) -> int:
    """Floats a device exchanges per synchronization: every weight Keras holds, BN statistics included."""
    return parameter_count(name, trainable_only=False)


def training_flops_per_sample(name: str) -> int:
    """FLOPs of one sample's forward and backward pass (see the module docstring for the convention).

    Examples
    --------
    >>> training_flops_per_sample("mlp")  # 2 x (2 x 784x128 + 3 x (128x64 + 64x10)) + 3 x (128 + 64 + 10)
    455006
    """
    rows = layers(name)
    elementwise = sum(ELEMENTWISE_TRAINING_FLOPS.get(r.kind, 0) * r.output_size for r in rows)
    return sum(_matmul_training_flops(rows).values()) + elementwise


def _matmul_training_flops(rows: list[Layer]) -> dict[str, int]:
    """Training FLOPs of the layers with multiply-adds, by kind: three passes each, two for a first dense layer."""
    out = {"conv": 0, "dense": 0}
    first = True
    for row in rows:
        if row.macs:
            passes = 2 if first and row.kind == "dense" else 3
            out[row.kind] = out.get(row.kind, 0) + 2 * row.macs * passes
            first = False
    return out


def training_flops_by_class(name: str) -> dict[str, int]:
    """``training_flops_per_sample`` split by how a device runs the work: ``conv``, ``dense`` and ``elementwise``.

    A device model may time each class at a rate of its own
    (``edgelab.emulation.device_model``): a dense layer's matrix product and a
    convolution's are not equally fast on every board.

    Examples
    --------
    >>> split = training_flops_by_class("mlp")
    >>> sum(split.values()) == training_flops_per_sample("mlp"), split["conv"]
    (True, 0)
    """
    # Layers of other kinds with multiply-adds (a user's) count with the element-wise work, as before.
    matmul = _matmul_training_flops(layers(name))
    out = {"conv": matmul["conv"], "dense": matmul["dense"]}
    out["elementwise"] = training_flops_per_sample(name) - out["conv"] - out["dense"]
    return out


def activation_floats_per_sample(name: str) -> int:
    """Floats of forward activations one sample keeps for the backward pass (input and every layer output)."""
    return input_floats_per_sample(name) + sum(r.output_size for r in layers(name) if not r.fused)


def kept_floats_per_sample(name: str) -> int:
    """Floats of one sample's forward tensors the backward pass needs, each counted once.

    A framework that frees every other tensor as soon as it can (MXNet's memory
    planner, TensorFlow's graph) keeps: the input of each convolution, dense
    layer, batch normalisation and pooling (their gradients need it), and the
    output of each activation (its gradient needs that; it is written over its
    input). An addition needs nothing of its own. Tensors are followed in the
    layers' order, so a shortcut's input counts as the block input it is when
    a later layer keeps it, and a projection's input as the tensor before it.

    Examples
    --------
    >>> kept_floats_per_sample("mlp")  # the image, then each dense layer's ReLU output
    986
    """
    kept: dict[int, int] = {}
    tensor, size = 0, input_floats_per_sample(name)
    for row in layers(name):
        if row.kind in ("conv", "dense", "batchnorm", "pool"):
            kept[tensor] = size
            tensor, size = tensor + 1, row.output_size
        elif row.kind == "activation":
            size = row.output_size  # in place: the same tensor, now the activation's output
            kept[tensor] = size
        else:  # an addition: a new tensor that nothing needs to keep
            tensor, size = tensor + 1, row.output_size
    return sum(kept.values())


def input_floats_per_sample(name: str) -> int:
    """Floats of one input image as the model takes it."""
    if not isinstance(name, str):
        return math.prod(_user(name).input_shape)
    return 28 * 28 if name in ("mlp", "cnn") else RESNET_SIDE * RESNET_SIDE * 3
