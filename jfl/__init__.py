"""jfl: vectorised client selection for federated learning in JAX."""

# Imported for its effect: a faster, bit-identical threefry lowering on CPU (see the module).
from jfl import (
    _cpu_prng,  # noqa: F401
    envs,
    kernels,
    policies,
)

__version__ = "0.1.0"
__all__ = ["__version__", "envs", "kernels", "policies"]
