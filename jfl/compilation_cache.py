"""A persistent compilation cache for sweeps, keyed by jfl's source and JAX's version.

A sweep's programs take seconds to compile (more on accelerators) and are the same from one run
of a command to the next. ``enable`` points JAX's persistent compilation cache at a directory of
the user's cache folder (``$JFL_CACHE_DIR``, else ``$XDG_CACHE_HOME/jfl``, else ``~/.cache/jfl``)
named after the versions of jax and jaxlib and a hash of jfl's own source files. JAX's own key
already covers the program, its compile options and the backend; the directory adds the code and
the versions, so that no edit of jfl and no upgrade of JAX can ever load a program compiled
before it (a new directory starts empty).

Importing jfl changes nothing: the sweeps call ``enable`` (``--no-compilation-cache`` skips it).
A cache that JAX was already given (``JAX_COMPILATION_CACHE_DIR``, or the caller's
``jax.config``) is left as it is, and JAX sets its cache up once per process, at the first
compilation after a directory is set.
"""

from __future__ import annotations

import os
from pathlib import Path

from jfl.provenance import package_source, version

_hits = {"count": 0}
_listening = {"on": False}


def cache_root() -> Path:
    """jfl's cache folder: ``$JFL_CACHE_DIR``, else ``$XDG_CACHE_HOME/jfl``, else
    ``~/.cache/jfl``."""
    if os.environ.get("JFL_CACHE_DIR"):
        return Path(os.environ["JFL_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "jfl"


def cache_dir(root: Path | None = None, code: str | None = None) -> Path:
    """The cache directory for this jfl source (``code``: its hash,
    ``jfl.provenance.package_source``) and this JAX."""
    versions = "-".join(version(name) or "none" for name in ("jax", "jaxlib"))
    return (root or cache_root()) / f"xla-{versions}-{code or package_source()}"


def enable(directory: Path | None = None) -> Path:
    """Use ``directory`` (default ``cache_dir()``) as JAX's persistent compilation cache, unless
    JAX already has one (``JAX_COMPILATION_CACHE_DIR``, the caller's own): that one is kept.
    Returns the directory in use."""
    import jax
    from jax import monitoring

    if jax.config.jax_compilation_cache_dir:
        directory = Path(jax.config.jax_compilation_cache_dir)
    else:
        directory = Path(directory or cache_dir())
        directory.mkdir(parents=True, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", str(directory))
    if not _listening["on"]:
        monitoring.register_event_listener(_count_hit)
        _listening["on"] = True
    return directory


def hits() -> int:
    """Programs loaded from the cache in this process since ``enable``."""
    return _hits["count"]


def _count_hit(event: str, **_) -> None:
    if event == "/jax/compilation_cache/cache_hits":
        _hits["count"] += 1
