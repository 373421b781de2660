"""jfl: vectorised client selection for federated learning in JAX."""

from jfl import envs, kernels, policies

__version__ = "0.1.0"
__all__ = ["__version__", "envs", "kernels", "policies"]
