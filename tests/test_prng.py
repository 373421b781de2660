"""The unrolled CPU threefry lowering gives exactly JAX's default random bits."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

SCRIPT = """
import sys, numpy as np, jax
import jfl.prng
registered = jfl.prng.use_unrolled_threefry_on_cpu()
keys = jax.vmap(lambda s: jax.random.fold_in(jax.random.key(0), s))(np.arange(16))
u = jax.jit(jax.vmap(lambda k: jax.random.uniform(k, (4, 40))))(keys)
split = jax.jit(lambda k: jax.random.split(k, (7, 2)))(keys[3])
bits = np.concatenate([np.asarray(u).view(np.uint32).ravel(),
                       np.asarray(jax.random.key_data(split)).ravel()])
np.save(sys.argv[1], bits)
print(registered)
"""


def _draw(path, rolled: bool):
    env = {**os.environ, "JFL_ROLLED_THREEFRY": "1" if rolled else "0"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(path)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1], np.load(path)


def test_unrolled_threefry_bits_equal_jax_default(tmp_path):
    flag_default, rolled = _draw(tmp_path / "rolled.npy", rolled=True)
    flag_unrolled, unrolled = _draw(tmp_path / "unrolled.npy", rolled=False)
    assert flag_default == "False"  # the opt-out keeps JAX's own lowering
    assert flag_unrolled in ("True", "False")  # False only if JAX's private layout changed
    np.testing.assert_array_equal(rolled, unrolled)


def test_import_changes_no_global_state():
    """``import jfl`` (plots included) leaves JAX's lowerings and matplotlib's backend alone.

    The dependencies are imported first: their own import-time registrations (chex imports
    checkify, which registers a lowering) are theirs, not jfl's.
    """
    script = """
import matplotlib
backend = matplotlib.get_backend()
import chex, flax, optax, xarray
from jax._src.interpreters import mlir
before = dict(mlir._platform_specific_lowerings["cpu"])
import jfl, jfl.plots, jfl.results, jfl.sweep
after = dict(mlir._platform_specific_lowerings["cpu"])
changed = [p for p in set(before) | set(after) if before.get(p) is not after.get(p)]
print(len(changed), matplotlib.get_backend() == backend)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["0", "True"]
