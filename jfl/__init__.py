"""jfl: vectorised client selection for federated learning in JAX.

Importing jfl changes no global state (JAX's PRNG lowering and matplotlib's backend stay as they
are); see :mod:`jfl.prng` for the opt-in faster CPU random numbers the sweeps use.
"""

from jfl import envs, kernels, policies

__version__ = "0.1.0"
__all__ = ["__version__", "envs", "kernels", "policies"]
