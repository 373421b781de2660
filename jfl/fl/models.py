"""Flax (linen) models of the papers' FL experiments; every model returns logits.

* ``LogisticRegression``: multinomial logistic regression, the strongly convex model of CS-UCB §V
  and COCS §VI (MNIST).
* ``FashionCNN``: the Fashion-MNIST CNN of RBCS-F §6.2.1.
* ``CifarCNN``: the CIFAR-10 CNN of RBCS-F §6.2.1 and COCS §VI.

Inputs are f32[batch, H, W, C] (NHWC). The papers fix the layers but not the padding, which
``padding`` chooses for every convolution and 2×2 pool (stride 2) of a CNN:

* ``"valid"`` (default; docs/decisions.md#rbcsf-cnn-padding): LeNet's
  reading. A 5×5 convolution shrinks each side by 4 and
  a pool halves it, rounding down: Fashion-MNIST 28×28×1 → 24 → 12 → 8 → 4, so the first dense
  layer takes 4·4·50 = 800 inputs; CIFAR-10 32×32×3 → 28 → 14 → 10 → 5, 5·5·64 = 1600 inputs.
  Small inputs are refused: the two conv/pool stages need at least 16×16
  (:func:`min_input_size`), so the 8×8 digits need ``"same"``.
* ``"same"``: convolutions keep the size and pools halve it rounding up, so any input works
  (8×8 digits → 4 → 2; Fashion-MNIST 28 → 14 → 7, 7·7·50 = 2450 dense inputs; CIFAR-10
  32 → 16 → 8, 8·8·64 = 4096).

Logistic regression has no padding and takes any input. The small 8×8 digits stand in for MNIST
in fast runs.

Parameters are plain pytrees (``init_params`` returns the ``"params"`` collection; apply with
``model.apply({"params": params}, x)``), so a stack of per-client parameters with a leading
clients axis works under ``jax.vmap``.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

PADDINGS = ("valid", "same")
KERNEL = 5  # every convolution is 5×5 (RBCS-F §6.2.1)
POOL = 2  # 2×2 max-pools with stride 2


def _pool(x, padding: str):
    return nn.max_pool(x, window_shape=(POOL, POOL), strides=(POOL, POOL), padding=padding)


def _flatten(x):
    return x.reshape((x.shape[0], -1))


class LogisticRegression(nn.Module):
    """Flatten, then one dense layer: logits of multinomial logistic regression."""

    num_classes: int

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.num_classes, name="linear")(_flatten(x))


class CNN(nn.Module):
    """Conv 5×5 layers, each followed by ReLU and a 2×2 max-pool, with ``padding`` ("valid" or
    "same", see the module docstring); then flatten, dense layers with ReLU, and a linear output
    layer."""

    num_classes: int
    conv_features: tuple[int, ...]
    dense_features: tuple[int, ...]
    padding: str = "valid"

    @nn.compact
    def __call__(self, x):
        padding = self.padding.upper()
        for i, features in enumerate(self.conv_features, 1):
            conv = nn.Conv(features, (KERNEL, KERNEL), padding=padding, name=f"conv{i}")
            x = _pool(nn.relu(conv(x)), padding)
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


def make_model(name: str, num_classes: int, padding: str = "valid") -> nn.Module:
    """Model ``name`` (a key of ``MODELS``) with ``num_classes`` outputs (>= 2).

    ``padding`` ("valid" or "same") is that of the CNNs' convolutions and pools; logistic
    regression has none and ignores it.
    """
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose from {sorted(MODELS)}")
    if (
        not isinstance(num_classes, int | np.integer)
        or isinstance(num_classes, bool)
        or num_classes < 2
    ):
        raise ValueError(f"num_classes must be an integer >= 2, got {num_classes!r}")
    if padding not in PADDINGS:
        raise ValueError(f"unknown padding {padding!r}; choose from {list(PADDINGS)}")
    if issubclass(MODELS[name], CNN):
        return MODELS[name](num_classes=int(num_classes), padding=padding)
    return MODELS[name](num_classes=int(num_classes))


def model_name(model: nn.Module) -> str:
    """The ``MODELS`` key of ``model``'s class (its class name if it has none)."""
    for name, cls in MODELS.items():
        if type(model) is cls:
            return name
    return type(model).__name__


def min_input_size(model: nn.Module) -> int:
    """Smallest side (H and W) of the inputs ``model`` accepts.

    1 for logistic regression and "same" padding. With "valid" padding every stage must leave at
    least one pixel: going back from one pixel at the end, a floor-halving pool needs twice the
    side it leaves and a 5×5 convolution 4 more, so two stages need 2·(2·1 + 4) + 4 = 16.
    """
    if not isinstance(model, CNN) or model.padding == "same":
        return 1
    side = 1
    for _ in model.conv_features:
        side = side * POOL + KERNEL - 1
    return side


def check_input_shape(model: nn.Module, sample_shape, dataset: str = "") -> None:
    """ValueError, one line naming the model, its padding, the input size (and ``dataset``) and
    the fix, when ``model`` cannot take samples of shape ``sample_shape`` (H, W, C).

    A too-small input leaves the first dense layer no inputs, and flax's initialiser then fails
    with a bare ZeroDivisionError, so callers check before building anything."""
    shape = tuple(int(v) for v in sample_shape)
    need = min_input_size(model)
    if len(shape) >= 2 and min(shape[:2]) < need:
        size = "×".join(str(v) for v in shape) + (f" ({dataset})" if dataset else "")
        raise ValueError(
            f"model {model_name(model)} with padding {model.padding} needs inputs of at least "
            f"{need}×{need}, got {size}; use --padding same"
        )


def init_params(model: nn.Module, key: jax.Array, sample_shape) -> dict:
    """Initial ``"params"`` collection of ``model`` for samples of shape ``sample_shape`` (H, W, C).

    Uses a dummy batch of one zero sample; apply with ``model.apply({"params": params}, x)``.
    """
    dummy = jnp.zeros((1, *tuple(sample_shape)), jnp.float32)
    return model.init(key, dummy)["params"]


def num_parameters(params) -> int:
    """Total number of scalars in a parameter pytree."""
    return int(sum(np.prod(np.shape(leaf)) for leaf in jax.tree_util.tree_leaves(params)))
