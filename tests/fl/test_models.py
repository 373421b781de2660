"""Flax models (jfl.fl.models): output shapes, parameter counts from the architectures, vmap.

Parameter counts are derived by hand from the layers of RBCS-F §6.2.1 / COCS §VI with "SAME"
padding: two 2×2 pools (stride 2, rounding up) take H×W to ⌈⌈H/2⌉/2⌉ per side.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfl.fl.models import (
    MODELS,
    CifarCNN,
    FashionCNN,
    LogisticRegression,
    init_params,
    make_model,
    num_parameters,
)

SHAPES = [(8, 8, 1), (28, 28, 1), (32, 32, 3)]
SIDE_AFTER_POOLS = {(8, 8, 1): 2, (28, 28, 1): 7, (32, 32, 3): 8}  # 8→4→2, 28→14→7, 32→16→8
K = 10  # classes


def expected_parameters(name: str, shape) -> int:
    h, w, c = shape
    s = SIDE_AFTER_POOLS[shape]
    if name == "logistic":
        return h * w * c * K + K
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
    # Spelled out once: conv1 520, conv2 25 050, dense 1 225 500, out 5 010.
    assert expected_parameters("fashion_cnn", (28, 28, 1)) == 520 + 25_050 + 1_225_500 + 5_010


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_output_shape_and_parameter_count(name, shape):
    """Traced with jax.eval_shape (no compilation): init, then apply on a batch of 2."""
    model = make_model(name, K)
    params = jax.eval_shape(lambda key: init_params(model, key, shape), jax.random.key(0))
    assert num_parameters(params) == expected_parameters(name, shape)
    x = jax.ShapeDtypeStruct((2, *shape), jnp.float32)
    logits = jax.eval_shape(lambda p, x: model.apply({"params": p}, x), params, x)
    assert logits.shape == (2, K) and logits.dtype == jnp.float32


def test_logistic_regression_is_affine():
    shape = (28, 28, 1)  # the paper input, whose compiled ops the vmap test shares
    model = make_model("logistic", K)
    params = init_params(model, jax.random.key(0), shape)
    w, b = params["linear"]["kernel"], params["linear"]["bias"]
    assert w.shape == (784, K) and b.shape == (K,)
    x = jax.random.normal(jax.random.key(1), (5, *shape))
    logits = model.apply({"params": params}, x)
    np.testing.assert_allclose(logits, x.reshape(5, -1) @ w + b, rtol=1e-5, atol=1e-5)


def test_make_model_classes():
    assert isinstance(make_model("logistic", 2), LogisticRegression)
    assert isinstance(make_model("fashion_cnn", 10), FashionCNN)
    model = make_model("cifar_cnn", np.int64(10))
    assert isinstance(model, CifarCNN) and model.num_classes == 10


@pytest.mark.parametrize(
    "args, match",
    [
        (("mlp", 10), r"unknown model 'mlp'.*'cifar_cnn'.*'fashion_cnn'.*'logistic'"),
        (("logistic", 1), "num_classes"),
        (("logistic", 0), "num_classes"),
        (("logistic", 2.0), "num_classes"),
        (("fashion_cnn", True), "num_classes"),
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
    per_client = [init_params(model, key, shape) for key in keys]
    assert num_parameters(per_client[0]) == expected_parameters(name, shape)
    stacked = jax.tree_util.tree_map(lambda *leaves: jnp.stack(leaves), *per_client)
    assert num_parameters(stacked) == clients * expected_parameters(name, shape)
    xs = jax.random.normal(jax.random.key(1), (clients, batch, *shape), jnp.float32)

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
