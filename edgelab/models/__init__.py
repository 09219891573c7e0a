"""Models and what they cost: built-in, a user's own, the Keras graph walker, compression, transfer.

Models and what they cost: the papers' built-in models (LeNet, CIFAR ResNet, the tier networks, the flat
MobileNetV2), a user's own Keras model, the Keras graph walker (layer costs, cut points), analytic costs,
deep compression and transfer learning.
"""

from __future__ import annotations

from edgelab.models.builtin import ModelSpec, build_model
from edgelab.models.user import UserModel, user_model

__all__ = ["ModelSpec", "UserModel", "build_model", "user_model"]
