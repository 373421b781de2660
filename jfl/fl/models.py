"""Flax (linen) models of the papers' FL experiments; every model returns logits.

* ``LogisticRegression``: multinomial logistic regression, the strongly convex model of CS-UCB §V
  and COCS §VI (MNIST).
* ``FashionCNN``: the Fashion-MNIST CNN of RBCS-F §6.2.1.
* ``CifarCNN``: the CIFAR-10 CNN of RBCS-F §6.2.1 and COCS §VI.

Inputs are f32[batch, H, W, C] (NHWC). The papers fix the layers but not the padding; here every
convolution and pool uses ``"SAME"`` padding, so that the models adapt to the input size: each
2×2 pool (stride 2) halves H and W, rounding up (8×8×1 digits → 4×4 → 2×2, 28×28×1 → 14 → 7,
32×32×3 → 16 → 8), and the first dense layer takes whatever the flattened size is. The small
8×8 digits stand in for MNIST in fast runs.

Parameters are plain pytrees (``init_params`` returns the ``"params"`` collection; apply with
``model.apply({"params": params}, x)``), so a stack of per-client parameters with a leading
clients axis works under ``jax.vmap``.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np


def _pool(x):
    return nn.max_pool(x, window_shape=(2, 2), strides=(2, 2), padding="SAME")


def _flatten(x):
    return x.reshape((x.shape[0], -1))


class LogisticRegression(nn.Module):
    """Flatten, then one dense layer: logits of multinomial logistic regression."""

    num_classes: int

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.num_classes, name="linear")(_flatten(x))


class CNN(nn.Module):
    """Conv 5×5 layers ("SAME" padding, see the module docstring), each followed by ReLU and a
    2×2 max-pool; then flatten, dense layers with ReLU, and a linear output layer."""

    num_classes: int
    conv_features: tuple[int, ...]
    dense_features: tuple[int, ...]

    @nn.compact
    def __call__(self, x):
        for i, features in enumerate(self.conv_features, 1):
            x = _pool(nn.relu(nn.Conv(features, (5, 5), padding="SAME", name=f"conv{i}")(x)))
        x = _flatten(x)
        for i, features in enumerate(self.dense_features, 1):
            x = nn.relu(nn.Dense(features, name=f"dense{i}")(x))
        return nn.Dense(self.num_classes, name="out")(x)


class FashionCNN(CNN):
    """RBCS-F §6.2.1 Fashion-MNIST CNN.

    Conv 5×5, 20 channels → ReLU → 2×2 max-pool → Conv 5×5, 50 channels → ReLU → 2×2 max-pool
    → flatten → Dense 500 → ReLU → Dense ``num_classes``.
    """

    conv_features: tuple[int, ...] = (20, 50)
    dense_features: tuple[int, ...] = (500,)


class CifarCNN(CNN):
    """RBCS-F §6.2.1 / COCS §VI CIFAR-10 CNN.

    Conv 5×5, 64 channels → ReLU → 2×2 max-pool → Conv 5×5, 64 channels → ReLU → 2×2 max-pool
    → flatten → Dense 384 → ReLU → Dense 192 → ReLU → Dense ``num_classes``. The pools are
    2×2 with stride 2, as in ``FashionCNN`` (the papers do not give the pool size).
    """

    conv_features: tuple[int, ...] = (64, 64)
    dense_features: tuple[int, ...] = (384, 192)


MODELS = {"logistic": LogisticRegression, "fashion_cnn": FashionCNN, "cifar_cnn": CifarCNN}


def make_model(name: str, num_classes: int) -> nn.Module:
    """Model ``name`` (a key of ``MODELS``) with ``num_classes`` outputs (>= 2)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose from {sorted(MODELS)}")
    if (
        not isinstance(num_classes, int | np.integer)
        or isinstance(num_classes, bool)
        or num_classes < 2
    ):
        raise ValueError(f"num_classes must be an integer >= 2, got {num_classes!r}")
    return MODELS[name](num_classes=int(num_classes))


def init_params(model: nn.Module, key: jax.Array, sample_shape) -> dict:
    """Initial ``"params"`` collection of ``model`` for samples of shape ``sample_shape`` (H, W, C).

    Uses a dummy batch of one zero sample; apply with ``model.apply({"params": params}, x)``.
    """
    dummy = jnp.zeros((1, *tuple(sample_shape)), jnp.float32)
    return model.init(key, dummy)["params"]


def num_parameters(params) -> int:
    """Total number of scalars in a parameter pytree."""
    return int(sum(np.prod(np.shape(leaf)) for leaf in jax.tree_util.tree_leaves(params)))
