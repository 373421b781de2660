"""Flax models (jfl.fl.models): output shapes, parameter counts from the architectures, vmap,
padding and the smallest input.

Parameter counts are derived by hand from the layers of RBCS-F §6.2.1 / COCS §VI. With "valid"
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
    MODELS,
    CifarCNN,
    FashionCNN,
    LogisticRegression,
    check_input_shape,
    init_params,
    make_model,
    min_input_size,
    num_parameters,
)

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
    for name in sorted(MODELS)
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
