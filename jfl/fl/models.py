"""Flax (linen) models of the papers' FL experiments; every model returns logits.

* ``LogisticRegression`` (``"logistic"``): multinomial logistic regression, the strongly convex
  model of CS-UCB §V and COCS §VI (MNIST).
* ``FashionCNN`` (``"fashion_cnn"``): the Fashion-MNIST CNN of RBCS-F §6.2.1.
* ``CifarCNN`` (``"cifar_cnn"``): the CIFAR-10 CNN of RBCS-F §6.2.1 and COCS §VI.
* ``FedCorMLP`` (``"fedcor_mlp"``): FedCor's Fashion-MNIST MLP, hidden layers 64 and 30.
* ``FedCorCNN`` (``"fedcor_cnn"``): FedCor's CIFAR-10 CNN, 3×3 convolutions of 32, 64 and 64
  channels (the last without a pool) and a dense layer of 64.
* ``McMahanCNN`` (``"mcmahan_cnn"``): FedAvg's MNIST CNN (McMahan et al. 2017 §3).
* ``LeafCNN`` (``"leaf_cnn"``): LEAF's FEMNIST CNN.
* ``ResNet18GN`` (``"resnet18_gn"``): FLGo's CIFAR-10 ResNet-18, GroupNorm (2 groups) in place
  of BatchNorm, so that the parameters are one ``"params"`` collection with no batch statistics.

Inputs are f32[batch, H, W, C] (NHWC). The papers of the ``CNN`` models (``fashion_cnn``,
``cifar_cnn``, ``fedcor_cnn``, ``mcmahan_cnn``) fix the layers but not always the padding, which
``padding`` chooses for every convolution and 2×2 pool (stride 2) of such a CNN:

* ``"valid"`` (default; docs/decisions.md#rbcsf-cnn-padding): LeNet's
  reading. A k×k convolution shrinks each side by k − 1 (4 for the 5×5 ones) and
  a pool halves it, rounding down: Fashion-MNIST 28×28×1 → 24 → 12 → 8 → 4, so the first dense
  layer takes 4·4·50 = 800 inputs; CIFAR-10 32×32×3 → 28 → 14 → 10 → 5, 5·5·64 = 1600 inputs.
  Small inputs are refused: the two conv/pool stages need at least 16×16
  (:func:`min_input_size`; FedCor's three 3×3 stages 18×18), so the 8×8 digits need ``"same"``.
  It is also FedCor's own padding (its code pads only with its ``--padding`` flag, unset in its
  commands).
* ``"same"``: convolutions keep the size and pools halve it rounding up, so any input works
  (8×8 digits → 4 → 2; Fashion-MNIST 28 → 14 → 7, 7·7·50 = 2450 dense inputs; CIFAR-10
  32 → 16 → 8, 8·8·64 = 4096). It is the reading of McMahan et al.'s CNN by TensorFlow
  Federated, whose 1,663,370 parameters on MNIST are the paper's count.

``LeafCNN`` and ``ResNet18GN`` take no ``padding``: their authors' code fixes it (LEAF: "same"
convolutions and flooring pools, so inputs of at least 4×4; ResNet: torchvision's explicit
paddings, any input). Logistic regression and the MLP have no padding and take any input. The
small 8×8 digits stand in for MNIST in fast runs.

The authors' PyTorch models flatten channels first (NCHW), these flatten NHWC: the first dense
layer's inputs are permuted, the model and its parameter count are the same. Parameters start
from Flax's initialisers (LeCun normal kernels, zero biases), not the authors' frameworks'.

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
KERNEL = 5  # the CNNs' default convolution, 5×5 (RBCS-F §6.2.1, McMahan et al. §3)
POOL = 2  # 2×2 max-pools with stride 2
GN_GROUPS = 2  # FLGo's nn.GroupNorm(num_groups=2, ...)
GN_EPSILON = 1e-5  # torch.nn.GroupNorm's default eps (Flax's is 1e-6)


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


class MLP(nn.Module):
    """Flatten, dense layers ``hidden_features`` each followed by ReLU, and a linear output
    layer."""

    num_classes: int
    hidden_features: tuple[int, ...]

    @nn.compact
    def __call__(self, x):
        x = _flatten(x)
        for i, features in enumerate(self.hidden_features, 1):
            x = nn.relu(nn.Dense(features, name=f"dense{i}")(x))
        return nn.Dense(self.num_classes, name="out")(x)


class FedCorMLP(MLP):
    """FedCor's Fashion-MNIST MLP (Tang et al., "FedCor: Correlation-Based Active Client
    Selection Strategy for Heterogeneous Federated Learning", CVPR 2022).

    Flatten → Dense 64 → ReLU → Dense 30 → ReLU → Dense ``num_classes``: 52,500 parameters on
    Fashion-MNIST (784·64 + 64 + 64·30 + 30 + 30·10 + 10).

    Authors' code (github.com/Yoruko-Tang/FedCor, commit d941083): ``class MLP`` in
    ``src/models.py`` lines 25–58, flatten at line 52 and, per hidden layer, Linear → Dropout →
    ReLU at lines 53–56; the hidden sizes are the README's Fashion-MNIST commands
    (``--model=mlp --mlp_layer 64 30``, README.md line 24; built at ``src/federated_main.py``
    line 95). Their ``nn.Dropout()`` (p = 0.5, lines 36 and 40) is active while training; jfl
    trains without dropout, so this MLP has none (dropout before or after the ReLU is the same).
    """

    hidden_features: tuple[int, ...] = (64, 30)


class CNN(nn.Module):
    """Convolutions ``kernel_size``×``kernel_size``, each followed by ReLU and a 2×2 max-pool
    (but the last one when ``final_pool`` is False), with ``padding`` ("valid" or "same", see the
    module docstring); then flatten, dense layers with ReLU, and a linear output layer."""

    num_classes: int
    conv_features: tuple[int, ...]
    dense_features: tuple[int, ...]
    padding: str = "valid"
    kernel_size: int = KERNEL
    final_pool: bool = True

    @nn.compact
    def __call__(self, x):
        padding = self.padding.upper()
        kernel = (self.kernel_size, self.kernel_size)
        for i, features in enumerate(self.conv_features, 1):
            x = nn.relu(nn.Conv(features, kernel, padding=padding, name=f"conv{i}")(x))
            if i < len(self.conv_features) or self.final_pool:
                x = _pool(x, padding)
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


class FedCorCNN(CNN):
    """FedCor's CIFAR-10 CNN (Tang et al., CVPR 2022).

    Conv 3×3, 32 channels → ReLU → 2×2 max-pool → Conv 3×3, 64 channels → ReLU → 2×2 max-pool
    → Conv 3×3, 64 channels → ReLU (no pool) → flatten → Dense 64 → ReLU → Dense
    ``num_classes``. On CIFAR-10 (32×32×3) with "valid" padding, the authors' own: 32 → 30 → 15
    → 13 → 6 → 4, 4·4·64 = 1024 dense inputs and 122,570 parameters (896 + 18,496 + 36,928 +
    65,600 + 650); with "same", 8·8·64 = 4096 inputs and 319,178 parameters.

    Authors' code (github.com/Yoruko-Tang/FedCor, commit d941083): ``class NaiveCNN`` in
    ``src/models.py`` lines 78–128, built with ``final_pool=False`` at
    ``src/federated_main.py`` line 84: ``relu(max_pool2d(conv(x), 2))`` for all but the last
    convolution, ``relu(conv(x))`` for the last (lines 119–122; pool then ReLU equals ReLU then
    pool); the sizes are the README's CIFAR-10 commands (``--model=cnn --kernel_sizes 3 3 3
    --num_filters 32 64 64 --mlp_layer 64``, README.md line 52), with no ``--padding``, so the
    convolutions are unpadded (lines 106–108). The authors' ``--padding`` pads the convolutions
    (k // 2) but their pools still round down; "same" here rounds the pools up, which differs
    only where a pooled side is odd (not on CIFAR-10: 32 → 16 → 8).
    """

    conv_features: tuple[int, ...] = (32, 64, 64)
    dense_features: tuple[int, ...] = (64,)
    kernel_size: int = 3
    final_pool: bool = False


class McMahanCNN(CNN):
    """FedAvg's MNIST CNN (McMahan et al., "Communication-Efficient Learning of Deep Networks
    from Decentralized Data", AISTATS 2017, §3): "a CNN with two 5x5 convolution layers (the
    first with 32 channels, the second with 64, each followed with 2x2 max pooling), a fully
    connected layer with 512 units and ReLu activation, and a final softmax output layer".

    Conv 5×5, 32 channels → ReLU → 2×2 max-pool → Conv 5×5, 64 channels → ReLU → 2×2 max-pool
    → flatten → Dense 512 → ReLU → Dense ``num_classes`` (logits; the softmax is the loss's).

    The paper gives no padding, so ``padding`` chooses it as for the other CNNs. With "same"
    (MNIST 28 → 14 → 7, 7·7·64 = 3136 dense inputs) the model has 1,663,370 parameters on MNIST
    (832 + 51,264 + 1,606,144 + 5,130), the paper's count; this is TensorFlow Federated's reading
    (github.com/google-parfait/tensorflow-federated,
    ``tensorflow_federated/python/simulation/baselines/emnist/emnist_models.py``,
    ``create_original_fedavg_cnn_model``: "same" convolutions and "same" pools, the count in its
    docstring). The default "valid" (28 → 24 → 12 → 8 → 4, 1024 inputs) has 582,026.
    """

    conv_features: tuple[int, ...] = (32, 64)
    dense_features: tuple[int, ...] = (512,)


class LeafCNN(nn.Module):
    """LEAF's FEMNIST CNN (Caldas et al., "LEAF: A Benchmark for Federated Settings", 2018).

    Conv 5×5, 32 channels, "same" → ReLU → 2×2 max-pool, stride 2, "valid" → Conv 5×5, 64
    channels, "same" → ReLU → 2×2 max-pool → flatten → Dense 2048 → ReLU → Dense
    ``num_classes``. On FEMNIST (28×28×1, 62 classes): 28 → 14 → 7, 7·7·64 = 3136 dense inputs
    and 6,603,710 parameters (832 + 51,264 + 6,424,576 + 127,038).

    Authors' code (github.com/TalwalkarLab/leaf, commit a3c9a70): ``models/femnist/cnn.py``,
    ``create_model`` lines 21–37: ``tf.layers.conv2d`` with ``padding="same"`` (lines 21–26,
    28–33), ``tf.layers.max_pooling2d(pool_size=[2, 2], strides=2)`` with its default "valid"
    padding (lines 27, 34), Dense 2048 with ReLU and the logits (lines 36–37). The padding is
    theirs, so this model takes no ``padding``: the pools round down and inputs need at least
    4×4 (:func:`min_input_size`). LEAF reshapes to 7·7·64 (line 35), i.e. 28×28 inputs only;
    this flattens whatever is left.
    """

    num_classes: int
    conv_features: tuple[int, ...] = (32, 64)
    dense_features: tuple[int, ...] = (2048,)

    @nn.compact
    def __call__(self, x):
        for i, features in enumerate(self.conv_features, 1):
            conv = nn.Conv(features, (KERNEL, KERNEL), padding="SAME", name=f"conv{i}")
            x = _pool(nn.relu(conv(x)), "VALID")
        x = _flatten(x)
        for i, features in enumerate(self.dense_features, 1):
            x = nn.relu(nn.Dense(features, name=f"dense{i}")(x))
        return nn.Dense(self.num_classes, name="out")(x)


def _group_norm(name: str) -> nn.GroupNorm:
    """torch.nn.GroupNorm(2, C): statistics of each sample over (H, W, C/2), per group."""
    return nn.GroupNorm(
        num_groups=GN_GROUPS, epsilon=GN_EPSILON, use_fast_variance=False, name=name
    )


def _conv(features: int, kernel: int, stride: int, pad: int, name: str) -> nn.Conv:
    """torch.nn.Conv2d(..., kernel, stride, padding=pad, bias=False): ``pad`` zeros each side."""
    return nn.Conv(
        features,
        (kernel, kernel),
        (stride, stride),
        padding=((pad, pad), (pad, pad)),
        use_bias=False,
        name=name,
    )


class BasicBlock(nn.Module):
    """torchvision's ResNet BasicBlock with GroupNorm: conv 3×3 (stride ``stride``) → GN →
    ReLU → conv 3×3 → GN, plus the input (through conv 1×1, stride ``stride``, → GN when the
    stride or the width changes), → ReLU. Convolutions have no bias, as torchvision's."""

    features: int
    stride: int = 1

    @nn.compact
    def __call__(self, x):
        y = _conv(self.features, 3, self.stride, 1, "conv1")(x)
        y = nn.relu(_group_norm("norm1")(y))
        y = _group_norm("norm2")(_conv(self.features, 3, 1, 1, "conv2")(y))
        if self.stride != 1 or x.shape[-1] != self.features:
            x = _group_norm("down_norm")(_conv(self.features, 1, self.stride, 0, "down_conv")(x))
        return nn.relu(y + x)


class ResNet18GN(nn.Module):
    """FLGo's CIFAR-10 ResNet-18 with GroupNorm, ``resnet18_gn`` (Wang et al., FLGo,
    github.com/WwZzz/easyFL, commit 52bf748: ``flgo/benchmark/cifar10_classification/model/
    resnet18_gn.py`` lines 13–39, "copied from the github repo of FedDyn", lines 1–4).

    That file is torchvision's ``resnet18()`` (line 13) with ``fc = nn.Linear(512, 10)``
    (line 14) and each of its 20 BatchNorms replaced by ``nn.GroupNorm(num_groups=2,
    num_channels=C)`` (lines 15–38), so the ImageNet stem stays:

    Conv 7×7, 64 channels, stride 2, padding 3 → GN → ReLU → 3×3 max-pool, stride 2, padding 1
    → 4 stages of 2 ``BasicBlock``s, 64, 128, 256, 512 channels, the first block of stages 2–4
    with stride 2 → global average pool → Dense ``num_classes``. On CIFAR-10 (32×32×3): 32 → 16
    → 8 → 8 → 4 → 2 → 1, and 11,181,642 parameters (torchvision's 11,689,512 less its
    1000-class head plus a 10-class one; GroupNorm has BatchNorm's scale and bias, and no
    running statistics). Any input size works (every stride-2 layer is padded).

    The other reading, the "CIFAR ResNet-18" (3×3 stride-1 stem, no max-pool: 32 → 32 → 16 → 8
    → 4, 11,173,962 parameters), is not FLGo's definition and is not what this builds.
    GroupNorm's epsilon is PyTorch's 1e-5 and its variance the two-pass one.
    """

    num_classes: int
    stage_features: tuple[int, ...] = (64, 128, 256, 512)
    blocks_per_stage: int = 2

    @nn.compact
    def __call__(self, x):
        x = nn.relu(_group_norm("norm1")(_conv(64, 7, 2, 3, "conv1")(x)))
        x = nn.max_pool(x, window_shape=(3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
        for i, features in enumerate(self.stage_features, 1):
            for j in range(self.blocks_per_stage):
                stride = 2 if i > 1 and j == 0 else 1
                x = BasicBlock(features, stride, name=f"layer{i}_{j}")(x)
        x = jnp.mean(x, axis=(1, 2))
        return nn.Dense(self.num_classes, name="fc")(x)


MODELS = {
    "logistic": LogisticRegression,
    "fashion_cnn": FashionCNN,
    "cifar_cnn": CifarCNN,
    "fedcor_mlp": FedCorMLP,
    "fedcor_cnn": FedCorCNN,
    "mcmahan_cnn": McMahanCNN,
    "leaf_cnn": LeafCNN,
    "resnet18_gn": ResNet18GN,
}


def make_model(name: str, num_classes: int, padding: str = "valid") -> nn.Module:
    """Model ``name`` (a key of ``MODELS``) with ``num_classes`` outputs (>= 2).

    ``padding`` ("valid" or "same") is that of the ``CNN`` models' convolutions and pools
    (fashion_cnn, cifar_cnn, fedcor_cnn, mcmahan_cnn); the others (logistic, fedcor_mlp,
    leaf_cnn, resnet18_gn) have none to choose and ignore it.
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

    1 for logistic regression, the MLP, the ResNet (every stride-2 layer is padded) and "same"
    padding. With "valid" padding every stage must leave at least one pixel: going back from one
    pixel at the end, a floor-halving pool needs twice the side it leaves and a k×k convolution
    k − 1 more, so two 5×5 stages need 2·(2·1 + 4) + 4 = 16, and FedCor's three 3×3 stages, the
    last without a pool, 2·(2·(1 + 2) + 2) + 2 = 18. LEAF's "same" convolutions keep the side
    and its two flooring pools need 2·2·1 = 4.
    """
    if isinstance(model, LeafCNN):
        return POOL ** len(model.conv_features)
    if not isinstance(model, CNN) or model.padding == "same":
        return 1
    side = 1
    for i in reversed(range(len(model.conv_features))):
        if i < len(model.conv_features) - 1 or model.final_pool:
            side *= POOL
        side += model.kernel_size - 1
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
        if isinstance(model, CNN):
            raise ValueError(
                f"model {model_name(model)} with padding {model.padding} needs inputs of at "
                f"least {need}×{need}, got {size}; use --padding same"
            )
        raise ValueError(
            f"model {model_name(model)} needs inputs of at least {need}×{need}, got {size}; "
            "its padding is its authors' (--padding does not change it), so use larger inputs"
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
