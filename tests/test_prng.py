"""The unrolled CPU threefry lowering gives exactly JAX's default random bits; importing jfl
changes no global state; the flat draws (``jfl.prng.uniform``, ``split``) give ``jax.random``'s
values for every shape, dtype and threefry mode, vmapped or not.

Both checks need a fresh Python process (nothing of jfl imported yet, JAX's CPU lowerings as JAX
left them), and one process serves both: it first records what ``import jfl`` changes, then draws
the same random bits with JAX's default (rolled) lowering and, after registering the unrolled one,
again through freshly traced programs. Programs lowered before the registration keep their
lowering, so each draw builds new ``jit`` functions, and the process reports both lowered texts:
the test checks that the second draw really went through another lowering.
"""

from __future__ import annotations

import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jfl.prng

SCRIPT = """
import json, os, sys

# 1. `import jfl` (plots included) leaves JAX's lowerings and matplotlib's backend alone.
import matplotlib
backend = matplotlib.get_backend()
import chex, flax, optax, xarray
from jax._src.interpreters import mlir
before = dict(mlir._platform_specific_lowerings["cpu"])
import jfl, jfl.plots, jfl.results, jfl.sweep
after = dict(mlir._platform_specific_lowerings["cpu"])
changed = [p for p in set(before) | set(after) if before.get(p) is not after.get(p)]

# 2. The same bits with JAX's rolled threefry and with the unrolled lowering.
import numpy as np, jax
import jfl.prng

def draw():
    # fresh functions: a program traced and lowered earlier would keep its lowering
    keys = jax.vmap(lambda s: jax.random.fold_in(jax.random.key(0), s))(np.arange(16))
    uniform = jax.jit(jax.vmap(lambda k: jax.random.uniform(k, (4, 40))))
    u = uniform(keys)
    split = jax.jit(lambda k: jax.random.split(k, (7, 2)))(keys[3])
    bits = np.concatenate([np.asarray(u).view(np.uint32).ravel(),
                           np.asarray(jax.random.key_data(split)).ravel()])
    return bits, uniform.lower(keys).as_text()

os.environ["JFL_ROLLED_THREEFRY"] = "1"  # the opt-out: the call must leave JAX's lowering
flag_default = jfl.prng.use_unrolled_threefry_on_cpu()
rolled, rolled_text = draw()
os.environ["JFL_ROLLED_THREEFRY"] = "0"
flag_unrolled = jfl.prng.use_unrolled_threefry_on_cpu()
unrolled, unrolled_text = draw()
np.savez(sys.argv[1], rolled=rolled, unrolled=unrolled)
print(json.dumps({
    "changed": len(changed),
    "same_backend": matplotlib.get_backend() == backend,
    "flag_default": flag_default,
    "flag_unrolled": flag_unrolled,
    "lowering_changed": rolled_text != unrolled_text,
}))
"""


@pytest.fixture(scope="module")
def fresh_process(tmp_path_factory):
    """Run SCRIPT once in a new interpreter: its JSON report and the two arrays of bits."""
    path = tmp_path_factory.mktemp("prng") / "bits.npz"
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    with np.load(path) as bits:
        return report, bits["rolled"], bits["unrolled"]


def test_unrolled_threefry_bits_equal_jax_default(fresh_process):
    report, rolled, unrolled = fresh_process
    assert report["flag_default"] is False  # the opt-out keeps JAX's own lowering
    # False only if JAX's private layout changed (then nothing is registered)
    assert isinstance(report["flag_unrolled"], bool)
    if report["flag_unrolled"]:
        assert report["lowering_changed"]  # the second draw really used the unrolled lowering
    assert rolled.size == 16 * 4 * 40 + 7 * 2 * 2
    np.testing.assert_array_equal(rolled, unrolled)


def test_import_changes_no_global_state(fresh_process):
    """``import jfl`` (plots included) leaves JAX's lowerings and matplotlib's backend alone.

    The dependencies are imported first: their own import-time registrations (chex imports
    checkify, which registers a lowering) are theirs, not jfl's.
    """
    report, _, _ = fresh_process
    assert report["changed"] == 0
    assert report["same_backend"] is True


SHAPES = [(50, 17), (4, 7), (3, 5, 2), (1, 9), (9, 1), (0, 3), (7,), ()]


@pytest.fixture(params=[True, False], ids=["partitionable", "classic"])
def threefry(request):
    before = jax.config.jax_threefry_partitionable
    jax.config.update("jax_threefry_partitionable", request.param)
    yield request.param
    jax.config.update("jax_threefry_partitionable", before)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16])
def test_uniform_is_jax_uniform(threefry, shape, dtype):
    for seed in range(3):
        key = jax.random.key(seed)
        got = jfl.prng.uniform(key, shape, dtype)
        want = jax.random.uniform(key, shape, dtype)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))


@pytest.mark.parametrize("shape", [(6, 2), (2, 3, 2), (5,), (0, 2)])
def test_split_is_jax_split(threefry, shape):
    key = jax.random.key(11)
    got = jax.random.key_data(jfl.prng.split(key, shape))
    np.testing.assert_array_equal(got, jax.random.key_data(jax.random.split(key, shape)))


def test_vmapped_draws_are_jax_draws(threefry):
    keys = jax.random.split(jax.random.key(2), 5)
    got = jax.jit(jax.vmap(lambda k: jfl.prng.uniform(k, (4, 3))))(keys)
    want = jax.vmap(lambda k: jax.random.uniform(k, (4, 3)))(keys)
    np.testing.assert_array_equal(got, want)
    got = jax.vmap(lambda k: jax.random.key_data(jfl.prng.split(k, (3, 2))))(keys)
    want = jax.vmap(lambda k: jax.random.key_data(jax.random.split(k, (3, 2))))(keys)
    np.testing.assert_array_equal(got, want)
