"""Flax models (jfl.fl.models): output shapes, parameter counts from the architectures, vmap,
padding and the smallest input.

Parameter counts are derived by hand from the layers of RBCS-F §6.2.1 / COCS §VI, and those of
the other papers' models (FedCor, McMahan et al., LEAF, FLGo's ResNet-18) from their layers too;
those models' logits and cross-entropy gradients are checked against plain ``jax.lax``
references that read the same parameters. With "valid"
padding (the default) each 5×5 convolution takes 4 off a side and each 2×2 pool halves it,
rounding down: ⌊(⌊(H − 4)/2⌋ − 4)/2⌋ per side. With "same" padding only the pools change the
size, rounding up: ⌈⌈H/2⌉/2⌉.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfl.fl.models import (
    CNN,
    MODELS,
    CifarCNN,
    FashionCNN,
    FedCorCNN,
    FedCorMLP,
    LeafCNN,
    LogisticRegression,
    McMahanCNN,
    ResNet18GN,
    check_input_shape,
    init_params,
    make_model,
    min_input_size,
    num_parameters,
)
from jfl.sweep import model_footprint

SHAPES = [(8, 8, 1), (28, 28, 1), (32, 32, 3)]
SIDE_AFTER_POOLS = {
    "same": {(8, 8, 1): 2, (28, 28, 1): 7, (32, 32, 3): 8},  # 8→4→2, 28→14→7, 32→16→8
    "valid": {(28, 28, 1): 4, (32, 32, 3): 5},  # 28→24→12→8→4, 32→28→14→10→5
}
K = 10  # classes


def expected_parameters(name: str, shape, padding: str = "valid") -> int:
    h, w, c = shape
    if name == "logistic":
        return h * w * c * K + K
    s = SIDE_AFTER_POOLS[padding][shape]
    if name == "fashion_cnn":
        conv1 = 5 * 5 * c * 20 + 20
        conv2 = 5 * 5 * 20 * 50 + 50
        dense = s * s * 50 * 500 + 500
        out = 500 * K + K
        return conv1 + conv2 + dense + out
    conv1 = 5 * 5 * c * 64 + 64
    conv2 = 5 * 5 * 64 * 64 + 64
    dense1 = s * s * 64 * 384 + 384
    dense2 = 384 * 192 + 192
    out = 192 * K + K
    return conv1 + conv2 + dense1 + dense2 + out


def test_fashion_cnn_count_on_fashion_mnist():
    # Spelled out once: conv1 520, conv2 25 050, dense 800·500 + 500 = 400 500 ("valid", LeNet's
    # 800 inputs) or 2450·500 + 500 = 1 225 500 ("same"), out 5 010.
    assert expected_parameters("fashion_cnn", (28, 28, 1)) == 520 + 25_050 + 400_500 + 5_010
    same = expected_parameters("fashion_cnn", (28, 28, 1), "same")
    assert same == 520 + 25_050 + 1_225_500 + 5_010


CASES = [
    (name, shape, padding)
    for name in ("cifar_cnn", "fashion_cnn", "logistic")  # the other models: tests below
    for shape in SHAPES
    for padding in ("valid", "same")
    if not (name != "logistic" and padding == "valid" and shape == (8, 8, 1))
]


@pytest.mark.parametrize(("name", "shape", "padding"), CASES)
def test_output_shape_and_parameter_count(name, shape, padding):
    """Traced with jax.eval_shape (no compilation): init, then apply on a batch of 2."""
    model = make_model(name, K, padding)
    params = jax.eval_shape(lambda key: init_params(model, key, shape), jax.random.key(0))
    assert num_parameters(params) == expected_parameters(name, shape, padding)
    x = jax.ShapeDtypeStruct((2, *shape), jnp.float32)
    logits = jax.eval_shape(lambda p, x: model.apply({"params": p}, x), params, x)
    assert logits.shape == (2, K) and logits.dtype == jnp.float32


@pytest.mark.parametrize(
    ("name", "shape", "padding", "inputs"),
    [
        ("fashion_cnn", (28, 28, 1), "valid", 800),  # 4·4·50
        ("fashion_cnn", (28, 28, 1), "same", 2450),  # 7·7·50
        ("cifar_cnn", (32, 32, 3), "valid", 1600),  # 5·5·64
        ("cifar_cnn", (32, 32, 3), "same", 4096),  # 8·8·64
    ],
)
def test_first_dense_layer_inputs(name, shape, padding, inputs):
    """The paper inputs give LeNet's 800 inputs to Fashion's Dense 500 with "valid" padding."""
    model = make_model(name, K, padding)
    params = jax.eval_shape(lambda key: init_params(model, key, shape), jax.random.key(0))
    units = 500 if name == "fashion_cnn" else 384
    assert params["dense1"]["kernel"].shape == (inputs, units)


def test_default_padding_is_valid():
    assert make_model("fashion_cnn", K).padding == "valid"
    assert make_model("cifar_cnn", K).padding == "valid"


def test_min_input_size():
    """Two stages of conv 5×5 (−4) and floor-halving pool: 16 → 12 → 6 → 2 → 1 is the smallest
    that leaves a pixel; "same" padding and logistic regression take any size."""
    assert min_input_size(make_model("fashion_cnn", K)) == 16
    assert min_input_size(make_model("cifar_cnn", K)) == 16
    assert min_input_size(make_model("fashion_cnn", K, "same")) == 1
    assert min_input_size(make_model("logistic", K)) == 1
    # A third stage would need 2·16 + 4.
    deeper = FashionCNN(num_classes=K, conv_features=(8, 8, 8))
    assert min_input_size(deeper) == 36


@pytest.mark.parametrize("name", ["fashion_cnn", "cifar_cnn"])
def test_check_input_shape(name):
    """8×8 digits and 15×15 are refused with "valid" padding, in one line naming the model,
    the padding, the size and the fix; 16×16 and "same" padding are accepted."""
    valid = make_model(name, K)
    with pytest.raises(ValueError) as err:
        check_input_shape(valid, (8, 8, 1), "digits")
    message = str(err.value)
    assert "\n" not in message
    for part in (name, "valid", "16×16", "8×8×1 (digits)", "use --padding same"):
        assert part in message, part
    with pytest.raises(ValueError, match="15×15×3"):
        check_input_shape(valid, (15, 15, 3))
    with pytest.raises(ValueError, match="16×15×1"):
        check_input_shape(valid, (16, 15, 1))
    check_input_shape(valid, (16, 16, 1))
    check_input_shape(make_model(name, K, "same"), (8, 8, 1))
    check_input_shape(make_model("logistic", K), (1, 1, 1))
    # The smallest accepted input does build: one pixel is left after the last pool.
    params = jax.eval_shape(lambda key: init_params(valid, key, (16, 16, 1)), jax.random.key(0))
    channels = 50 if name == "fashion_cnn" else 64
    assert params["dense1"]["kernel"].shape[0] == channels


@functools.cache
def jitted_init(name, shape):
    """``init_params`` of ``make_model(name, K)`` under jit: one compilation per model and shape,
    shared by the tests below (op by op, Flax's initialisers compile a program per leaf shape)."""
    return jax.jit(functools.partial(init_params, make_model(name, K), sample_shape=shape))


def normal_inputs(seed, shape):
    """Standard normal float32 inputs from NumPy (data only: no compilation per shape)."""
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_logistic_regression_is_affine():
    shape = (28, 28, 1)  # the paper input, whose compiled init the vmap test shares
    model = make_model("logistic", K)
    params = jitted_init("logistic", shape)(jax.random.key(0))
    w, b = params["linear"]["kernel"], params["linear"]["bias"]
    assert w.shape == (784, K) and b.shape == (K,)
    x = normal_inputs(1, (5, *shape))
    logits = model.apply({"params": params}, x)
    np.testing.assert_allclose(logits, x.reshape(5, -1) @ w + b, rtol=1e-5, atol=1e-5)


def test_make_model_classes():
    assert isinstance(make_model("logistic", 2), LogisticRegression)
    assert isinstance(make_model("fashion_cnn", 10), FashionCNN)
    model = make_model("cifar_cnn", np.int64(10))
    assert isinstance(model, CifarCNN) and model.num_classes == 10
    assert make_model("fashion_cnn", 10, "same").padding == "same"
    # Logistic regression has no padding and takes either.
    assert isinstance(make_model("logistic", 2, "same"), LogisticRegression)


@pytest.mark.parametrize(
    "args, match",
    [
        (("mlp", 10), r"unknown model 'mlp'.*'cifar_cnn'.*'fashion_cnn'.*'logistic'"),
        (("logistic", 1), "num_classes"),
        (("logistic", 0), "num_classes"),
        (("logistic", 2.0), "num_classes"),
        (("fashion_cnn", True), "num_classes"),
        (("fashion_cnn", 10, "full"), r"unknown padding 'full'.*'valid', 'same'"),
        (("logistic", 10, "SAME"), "unknown padding"),
    ],
)
def test_make_model_errors(args, match):
    with pytest.raises(ValueError, match=match):
        make_model(*args)


PAPER_INPUTS = [("logistic", (28, 28, 1)), ("fashion_cnn", (28, 28, 1)), ("cifar_cnn", (32, 32, 3))]


@pytest.mark.parametrize("name, shape", PAPER_INPUTS)
def test_runs_under_vmap_over_client_params(name, shape):
    """Per-client params stacked on a leading clients axis: vmapped apply = per-client apply.

    Runs for real (init and forward) on each model's paper input: MNIST / Fashion-MNIST 28×28×1,
    CIFAR-10 32×32×3. Both a batch per client and one batch shared by all clients are checked.
    """
    clients, batch = 3, 2
    model = make_model(name, K)
    keys = jax.random.split(jax.random.key(0), clients)
    per_client = [jitted_init(name, shape)(key) for key in keys]
    assert num_parameters(per_client[0]) == expected_parameters(name, shape)
    stacked = jax.tree_util.tree_map(lambda *leaves: np.stack(leaves), *per_client)
    assert num_parameters(stacked) == clients * expected_parameters(name, shape)
    xs = normal_inputs(1, (clients, batch, *shape))

    def apply(p, x):
        return model.apply({"params": p}, x)

    @jax.jit
    def both(stacked, xs):
        return jax.vmap(apply)(stacked, xs), jax.vmap(apply, in_axes=(0, None))(stacked, xs[0])

    out, shared = both(stacked, xs)
    assert out.shape == (clients, batch, K) and shared.shape == (clients, batch, K)
    assert out.dtype == jnp.float32 and np.all(np.isfinite(np.asarray(out)))
    single = jax.jit(apply)
    for i, own in enumerate(per_client):
        np.testing.assert_allclose(out[i], single(own, xs[i]), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(shared[i], single(own, xs[0]), rtol=1e-4, atol=1e-5)
    assert not np.allclose(shared[0], shared[1])  # different keys, different clients


# The models of the other client-selection papers: FedCor's MLP and CNN, McMahan et al.'s CNN,
# LEAF's FEMNIST CNN and FLGo's ResNet-18 with GroupNorm, each on its paper's input.

PAPER_MODELS = {  # name: (sample shape, classes, padding)
    "fedcor_mlp": ((28, 28, 1), 10, "valid"),  # Fashion-MNIST
    "fedcor_cnn": ((32, 32, 3), 10, "valid"),  # CIFAR-10, the authors' unpadded convolutions
    "mcmahan_cnn": ((28, 28, 1), 10, "same"),  # MNIST, the paper's 1,663,370 parameters
    "leaf_cnn": ((28, 28, 1), 62, "valid"),  # FEMNIST (its padding is fixed)
    "resnet18_gn": ((32, 32, 3), 10, "valid"),  # CIFAR-10 (no padding to choose)
}


def resnet18_gn_parameters(classes: int) -> int:
    """torchvision's ResNet-18 on 3 channels: 7×7 stem conv (no bias) and a norm (scale and
    bias), 4 stages of 2 basic blocks (two 3×3 convs, each with a norm; a 1×1 projection with a
    norm where the width changes), and the dense head."""

    def block(c_in, c):
        projection = c_in * c + 2 * c if c_in != c else 0
        return 3 * 3 * c_in * c + 2 * c + 3 * 3 * c * c + 2 * c + projection

    stem = 7 * 7 * 3 * 64 + 2 * 64
    stages = (
        block(64, 64) + block(64, 64)
        + block(64, 128) + block(128, 128)
        + block(128, 256) + block(256, 256)
        + block(256, 512) + block(512, 512)
    )  # fmt: skip
    return stem + stages + 512 * classes + classes


def dense(n_in: int, n_out: int) -> int:
    """A dense layer's kernel and bias."""
    return n_in * n_out + n_out


def conv(k: int, c_in: int, c_out: int) -> int:
    """A k×k convolution's kernel and bias."""
    return k * k * c_in * c_out + c_out


def fedcor_cnn_parameters(channels: int, side: int, classes: int) -> int:
    """FedCor's CNN: three 3×3 convolutions (32, 64, 64), the last one's ``side``×``side``×64
    outputs into a dense layer of 64, then the head."""
    return (
        conv(3, channels, 32)
        + conv(3, 32, 64)
        + conv(3, 64, 64)
        + dense(side * side * 64, 64)
        + dense(64, classes)
    )


PAPER_COUNTS = {
    # 784 inputs → 64 → 30 → 10
    "fedcor_mlp": 784 * 64 + 64 + 64 * 30 + 30 + 30 * 10 + 10,
    # 32 → conv 30 → pool 15 → conv 13 → pool 6 → conv 4: 4·4·64 dense inputs
    "fedcor_cnn": fedcor_cnn_parameters(3, 4, 10),
    # 28 → 14 → 7 ("same" convolutions): 7·7·64 dense inputs
    "mcmahan_cnn": conv(5, 1, 32) + conv(5, 32, 64) + dense(7 * 7 * 64, 512) + dense(512, 10),
    # 28 → 14 → 7 (LEAF's "same" convolutions): 7·7·64 dense inputs, 62 classes
    "leaf_cnn": conv(5, 1, 32) + conv(5, 32, 64) + dense(7 * 7 * 64, 2048) + dense(2048, 62),
    "resnet18_gn": resnet18_gn_parameters(10),
}  # fmt: skip


def test_paper_counts_spelled_out():
    """The closed forms agree with the counts the sources state: McMahan et al.'s 1,663,370,
    torchvision's 11,689,512 for ResNet-18 less its 1000-class head, the Keras-tutorial CNN's
    122,570, LEAF's 6.6 M."""
    assert PAPER_COUNTS["fedcor_mlp"] == 52_500
    assert PAPER_COUNTS["fedcor_cnn"] == 122_570
    assert PAPER_COUNTS["mcmahan_cnn"] == 1_663_370
    assert PAPER_COUNTS["leaf_cnn"] == 6_603_710
    assert resnet18_gn_parameters(1000) == 11_689_512
    assert PAPER_COUNTS["resnet18_gn"] == 11_689_512 - (512 * 1000 + 1000) + 512 * 10 + 10


@pytest.mark.parametrize("name", sorted(PAPER_MODELS))
def test_paper_model_parameter_count(name):
    """Shapes only (jax.eval_shape): one ``params`` collection (no batch statistics), the
    closed-form count, and ``model_footprint`` (what a federated sweep sizes its memory by)
    takes the model unchanged."""
    shape, classes, padding = PAPER_MODELS[name]
    model = make_model(name, classes, padding)
    dummy = jax.ShapeDtypeStruct((1, *shape), jnp.float32)
    variables = jax.eval_shape(model.init, jax.random.key(0), dummy)
    assert set(variables) == {"params"}
    assert num_parameters(variables["params"]) == PAPER_COUNTS[name]
    assert model_footprint(model, shape)[0] == PAPER_COUNTS[name]


@pytest.mark.parametrize(
    ("name", "shape", "padding", "count"),
    [
        # 28 → 24 → 12 → 8 → 4: 4·4·64 inputs
        (
            "mcmahan_cnn",
            (28, 28, 1),
            "valid",
            conv(5, 1, 32) + conv(5, 32, 64) + dense(4 * 4 * 64, 512) + dense(512, K),
        ),
        # 32 → 32 → 16 → 16 → 8 → 8: 8·8·64 inputs
        ("fedcor_cnn", (32, 32, 3), "same", fedcor_cnn_parameters(3, 8, K)),
        # FedCor's CNN on Fashion-MNIST: 28 → 26 → 13 → 11 → 5 → 3
        ("fedcor_cnn", (28, 28, 1), "valid", fedcor_cnn_parameters(1, 3, K)),
        # LEAF keeps its own padding whatever is asked
        (
            "leaf_cnn",
            (28, 28, 1),
            "same",
            conv(5, 1, 32) + conv(5, 32, 64) + dense(7 * 7 * 64, 2048) + dense(2048, K),
        ),
        # 8×8×1 through the ResNet (8 → 4 → 2 → 2 → 1 → 1 → 1): only the stem's kernel changes
        ("resnet18_gn", (8, 8, 1), "same", resnet18_gn_parameters(K) - 7 * 7 * (3 - 1) * 64),
        ("fedcor_mlp", (8, 8, 1), "same", dense(64, 64) + dense(64, 30) + dense(30, K)),
    ],
)
def test_paper_model_other_inputs(name, shape, padding, count):
    """Other inputs and paddings: the closed form at that size, logits f32[2, K]."""
    model = make_model(name, K, padding)
    params = jax.eval_shape(lambda key: init_params(model, key, shape), jax.random.key(0))
    assert num_parameters(params) == count
    x = jax.ShapeDtypeStruct((2, *shape), jnp.float32)
    logits = jax.eval_shape(lambda p, x: model.apply({"params": p}, x), params, x)
    assert logits.shape == (2, K) and logits.dtype == jnp.float32


# Plain references: jax.lax convolutions and reductions, matmuls, and the group-norm formula,
# reading the flax parameter tree; no flax module.


def relu(x):
    return jnp.maximum(x, 0.0)


def ref_dense(p, x):
    return x @ p["kernel"] + p["bias"]


def ref_conv(p, x, stride=1, pad=0):
    """Cross-correlation with ``pad`` zeros on each side; HWIO kernel, bias when it has one."""
    y = jax.lax.conv_general_dilated(
        x,
        p["kernel"],
        (stride, stride),
        [(pad, pad), (pad, pad)],
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    )
    return y + p["bias"] if "bias" in p else y


def ref_max_pool(x, window=2, stride=2, pad=0):
    """Max over windows, ``pad`` cells of −inf on each side (PyTorch's padded max-pool)."""
    pads = [(0, 0), (pad, pad), (pad, pad), (0, 0)]
    return jax.lax.reduce_window(
        x, -jnp.inf, jax.lax.max, (1, window, window, 1), (1, stride, stride, 1), pads
    )


def ref_group_norm(p, x, groups=2, eps=1e-5):
    """torch.nn.GroupNorm: each sample's channels in ``groups`` contiguous groups, normalised by
    the mean and (biased) variance over (H, W, C/groups), then scaled and shifted per channel."""
    n, h, w, c = x.shape
    g = x.reshape(n, h, w, groups, c // groups)
    mean = g.mean(axis=(1, 2, 4), keepdims=True)
    var = ((g - mean) ** 2).mean(axis=(1, 2, 4), keepdims=True)
    return ((g - mean) / jnp.sqrt(var + eps)).reshape(n, h, w, c) * p["scale"] + p["bias"]


def ref_flatten(x):
    return x.reshape(x.shape[0], -1)


def ref_fedcor_mlp(p, x):
    h = relu(ref_dense(p["dense1"], ref_flatten(x)))
    h = relu(ref_dense(p["dense2"], h))
    return ref_dense(p["out"], h)


def ref_fedcor_cnn(p, x):
    """Unpadded 3×3 convolutions; pool after the first two only."""
    h = ref_max_pool(relu(ref_conv(p["conv1"], x)))
    h = ref_max_pool(relu(ref_conv(p["conv2"], h)))
    h = relu(ref_conv(p["conv3"], h))
    h = relu(ref_dense(p["dense1"], ref_flatten(h)))
    return ref_dense(p["out"], h)


def ref_mcmahan_cnn(p, x):
    """5×5 convolutions padded by 2 ("same"); the pools see even sides (28, 14): no padding."""
    h = ref_max_pool(relu(ref_conv(p["conv1"], x, pad=2)))
    h = ref_max_pool(relu(ref_conv(p["conv2"], h, pad=2)))
    h = relu(ref_dense(p["dense1"], ref_flatten(h)))
    return ref_dense(p["out"], h)


def ref_leaf_cnn(p, x):
    h = ref_max_pool(relu(ref_conv(p["conv1"], x, pad=2)))
    h = ref_max_pool(relu(ref_conv(p["conv2"], h, pad=2)))
    h = relu(ref_dense(p["dense1"], ref_flatten(h)))
    return ref_dense(p["out"], h)


def ref_basic_block(p, x, stride):
    y = relu(ref_group_norm(p["norm1"], ref_conv(p["conv1"], x, stride, pad=1)))
    y = ref_group_norm(p["norm2"], ref_conv(p["conv2"], y, pad=1))
    if stride != 1:  # every width change of ResNet-18 comes with stride 2
        x = ref_group_norm(p["down_norm"], ref_conv(p["down_conv"], x, stride))
    return relu(y + x)


def ref_resnet18_gn(p, x):
    """torchvision's resnet18: 7×7/2 stem padded by 3, 3×3/2 max-pool padded by 1, 4 stages of
    2 blocks, global mean, dense."""
    h = relu(ref_group_norm(p["norm1"], ref_conv(p["conv1"], x, 2, pad=3)))
    h = ref_max_pool(h, window=3, stride=2, pad=1)
    for stage in range(1, 5):
        for j in range(2):
            h = ref_basic_block(p[f"layer{stage}_{j}"], h, 2 if stage > 1 and j == 0 else 1)
    return ref_dense(p["fc"], h.mean(axis=(1, 2)))


REFERENCES = {
    "fedcor_mlp": ref_fedcor_mlp,
    "fedcor_cnn": ref_fedcor_cnn,
    "mcmahan_cnn": ref_mcmahan_cnn,
    "leaf_cnn": ref_leaf_cnn,
    "resnet18_gn": ref_resnet18_gn,
}


def cross_entropy(logits, y):
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))


def paper_model_step(name):
    """Logits and cross-entropy gradients of ``name`` on a batch of 2 paper-shaped inputs, from
    the flax model and from its reference, one compiled program for both. The parameters are
    drawn with NumPy in the shapes flax gives (no compiled init): kernels N(0, 1/fan-in), and
    biases, norm scales and shifts away from their 0 and 1 initialisations so that each one is
    seen."""
    shape, classes, padding = PAPER_MODELS[name]
    model = make_model(name, classes, padding)
    shapes = jax.eval_shape(lambda key: init_params(model, key, shape), jax.random.key(0))
    rng = np.random.default_rng(0)

    def draw(path, leaf):
        kind = path[-1].key
        if kind == "kernel":
            std = 1 / np.sqrt(np.prod(leaf.shape[:-1]))
            return (std * rng.standard_normal(leaf.shape)).astype(np.float32)
        centre = 1.0 if kind == "scale" else 0.0
        return (centre + 0.1 * rng.standard_normal(leaf.shape)).astype(np.float32)

    params = jax.tree_util.tree_map_with_path(draw, shapes)
    x = normal_inputs(1, (2, *shape))
    y = np.array([1, classes - 1], np.int32)

    def flax_forward(p, x):
        return model.apply({"params": p}, x)

    # XLA's CPU backend unoptimised: the program runs once, and compiling it is most of the time.
    @functools.partial(jax.jit, compiler_options={"xla_backend_optimization_level": 0})
    def step(params, x, y):
        def grads_and_logits(forward):
            def loss(p):
                logits = forward(p, x)
                return cross_entropy(logits, y), logits

            (_, logits), grads = jax.value_and_grad(loss, has_aux=True)(params)
            return logits, grads

        return grads_and_logits(flax_forward), grads_and_logits(REFERENCES[name])

    (logits, grads), (ref_logits, ref_grads) = step(params, x, y)
    return logits, grads, ref_logits, ref_grads


# ResNet-18's check compiles two ResNets and their gradients (about 6 s): CI's second stage.
@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.paper) if name == "resnet18_gn" else name
        for name in sorted(PAPER_MODELS)
    ],
)
def test_paper_model_matches_reference(name):
    """Logits f32[2, classes] and every parameter's gradient equal the plain reference's."""
    _, classes, _ = PAPER_MODELS[name]
    logits, grads, ref_logits, ref_grads = paper_model_step(name)
    assert logits.shape == (2, classes) and logits.dtype == jnp.float32
    np.testing.assert_allclose(logits, ref_logits, rtol=1e-4, atol=1e-5)
    assert jax.tree.structure(grads) == jax.tree.structure(ref_grads)
    flat, _ = jax.tree_util.tree_flatten_with_path(grads)
    for (path, grad), ref in zip(flat, jax.tree.leaves(ref_grads), strict=True):
        scale = float(np.max(np.abs(ref)))
        assert scale > 0, jax.tree_util.keystr(path)  # every parameter reaches the loss
        np.testing.assert_allclose(
            grad, ref, rtol=1e-3, atol=1e-4 * scale, err_msg=jax.tree_util.keystr(path)
        )


@pytest.mark.parametrize(
    ("name", "padding", "need"),
    [
        ("fedcor_cnn", "valid", 18),  # 18 → 16 → 8 → 6 → 3 → 1
        ("fedcor_cnn", "same", 1),
        ("mcmahan_cnn", "valid", 16),
        ("mcmahan_cnn", "same", 1),
        ("leaf_cnn", "valid", 4),  # "same" convolutions, two flooring pools: 4 → 2 → 1
        ("leaf_cnn", "same", 4),  # its padding is LEAF's whatever is asked
        ("fedcor_mlp", "valid", 1),
        ("resnet18_gn", "valid", 1),  # 1 → 1 through every padded stride-2 layer
    ],
)
def test_paper_model_smallest_input(name, padding, need):
    """``min_input_size`` is tight: ``need``×``need`` builds and gives logits, one pixel less
    fails inside flax (ZeroDivisionError) and ``check_input_shape`` refuses it first, in one
    line; "use --padding same" only where the padding is the user's to choose."""
    model = make_model(name, K, padding)
    assert min_input_size(model) == need

    def build(shape):
        params = jax.eval_shape(lambda key: init_params(model, key, shape), jax.random.key(0))
        x = jax.ShapeDtypeStruct((1, *shape), jnp.float32)
        return jax.eval_shape(lambda p, x: model.apply({"params": p}, x), params, x)

    check_input_shape(model, (need, need, 1))
    assert build((need, need, 1)).shape == (1, K)
    if need == 1:
        return
    with pytest.raises(ZeroDivisionError):
        build((need - 1, need, 1))
    with pytest.raises(ValueError) as err:
        check_input_shape(model, (need - 1, need, 1), "tiny")
    message = str(err.value)
    assert "\n" not in message
    for part in (name, f"{need}×{need}", f"{need - 1}×{need}×1 (tiny)"):
        assert part in message, part
    assert ("use --padding same" in message) == (name != "leaf_cnn")


def test_paper_model_classes():
    assert set(PAPER_MODELS) == set(MODELS) - {"logistic", "fashion_cnn", "cifar_cnn"}
    assert isinstance(make_model("fedcor_mlp", 10), FedCorMLP)
    assert isinstance(make_model("fedcor_cnn", 10, "same"), FedCorCNN)
    assert make_model("fedcor_cnn", 10, "same").padding == "same"
    assert isinstance(make_model("mcmahan_cnn", 10), McMahanCNN)
    assert isinstance(make_model("leaf_cnn", 62, "same"), LeafCNN)
    assert isinstance(make_model("resnet18_gn", 10), ResNet18GN)
    # Only the CNNs with a padding to choose are CNN (training records their padding).
    assert isinstance(make_model("mcmahan_cnn", 10), CNN)
    assert not isinstance(make_model("leaf_cnn", 62), CNN)
    assert not isinstance(make_model("resnet18_gn", 10), CNN)
