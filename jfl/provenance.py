"""What made a sweep's numbers: settings, versions, the code, the machine.

A sweep directory's manifest stores :func:`code_fingerprint` next to the settings, so that chunks
computed by other code are never reused without a word (``jfl.sweep.prepare_out_dir``). The
fingerprint holds what determines the numbers:

* ``jfl``, ``jax``, ``jaxlib``: the versions (JAX's own kernels and XLA's code generation change
  float bits between releases);
* ``package_source``: a hash of the package's own source files, whatever their git state (the
  git commit and a hash of the package's uncommitted diff are recorded too, ``git_commit`` and
  ``package_diff``, but a new commit that leaves the package alone, a README edit say, changes
  no number, so only the source hash is compared);
* ``external``: for every object from outside the package that the sweep runs (a policy's
  builder, an environment, a learner, the experiment's class registered by a user), a hash of its
  source (``inspect.getsource``; its qualified name where the source cannot be read, as for a
  class typed into a console).

Only the object's own source is hashed: an edited helper that it calls from elsewhere goes
unnoticed (``--overwrite`` recomputes).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import platform
import subprocess
import sys
from collections.abc import Mapping
from importlib import metadata as importlib_metadata
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def version(package: str) -> str | None:
    """The installed version of ``package``, None if it is not installed."""
    try:
        return importlib_metadata.version(package)
    except importlib_metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> str | None:
    """``git args`` run in the package's folder; None outside a checkout or without git."""
    try:
        done = subprocess.run(
            ["git", *args], cwd=PACKAGE, capture_output=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.decode(errors="replace") if done.returncode == 0 else None


@functools.cache
def package_source() -> str:
    """A hash of every source file of the package (paths and contents; the one that also keys
    the compilation cache)."""
    from jfl.compilation_cache import source_hash as package_hash

    return package_hash()


def git_state() -> tuple[str | None, str | None]:
    """The checkout's commit and a hash of the package's uncommitted changes (its diff against
    that commit, untracked files included): (None, None) outside a git checkout; the hash is
    None when the package has no uncommitted change."""
    commit = _git("rev-parse", "HEAD")
    if not commit:
        return None, None
    diff = _git("diff", "HEAD", "--", ".") or ""
    untracked = _git("ls-files", "--others", "--exclude-standard", "--", ".") or ""
    for name in sorted(untracked.split()):
        if name.endswith(".py"):
            diff += name + "\0" + (PACKAGE / name).read_text(errors="replace")
    return commit.strip(), (_sha(diff.encode()) if diff else None)


def _target(obj):
    """A function or class as it is; an instance by its class (an environment, say)."""
    while isinstance(obj, functools.partial):
        obj = obj.func
    plain = inspect.isfunction(obj) or inspect.ismethod(obj) or inspect.isclass(obj)
    return obj if plain else type(obj)


def is_external(obj) -> bool:
    """Whether ``obj`` (a function, class or instance) is defined outside the package."""
    name = getattr(_target(obj), "__module__", None) or ""
    return not (name == "jfl" or name.startswith("jfl."))


def qualified_name(obj) -> str:
    target = _target(obj)
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', repr(target))}"


def source_hash(obj) -> str:
    """A hash of ``obj``'s source (an instance: its class's), or of its qualified name where
    the source cannot be read."""
    try:
        text = inspect.getsource(_target(obj))
    except (OSError, TypeError):
        text = "name:" + qualified_name(obj)
    return _sha(text.encode())


def code_fingerprint(objects: Mapping[str, object]) -> dict:
    """What determines a sweep's numbers (see the module's docstring). ``objects``: what the
    sweep runs, by role (e.g. ``{"policy random": spec.build, "environment": env}``); those
    defined outside the package are hashed by their source."""
    external = {
        role: {"name": qualified_name(obj), "source": source_hash(obj)}
        for role, obj in objects.items()
        if obj is not None and is_external(obj)
    }
    commit, diff = git_state()
    return {
        "jfl": version("jfl"),
        "jax": version("jax"),
        "jaxlib": version("jaxlib"),
        "package_source": package_source(),
        "git_commit": commit,
        "package_diff": diff,
        "external": external,
    }


def code_changes(old: Mapping | None, new: Mapping) -> list[str]:
    """What differs between two fingerprints, in words (empty: the same code). ``old`` None:
    a sweep stored before fingerprints were recorded."""
    if old is None:
        return ["the stored sweep records no code fingerprint (made by an older jfl)"]
    changes = []
    for name in ("jfl", "jax", "jaxlib"):
        if old.get(name) != new.get(name):
            changes.append(f"{name} {old.get(name)} → {new.get(name)}")
    if old.get("package_source") != new.get("package_source"):
        commits = (old.get("git_commit"), new.get("git_commit"))
        at = f" (commit {_short(commits[0])} → {_short(commits[1])})" if commits[0] else ""
        changes.append(f"the jfl package's source changed{at}")
    before, now = old.get("external", {}), new.get("external", {})
    for role in sorted(set(before) | set(now)):
        if role not in now:
            changes.append(f"{role} ({before[role]['name']}) is no longer used")
        elif role not in before:
            changes.append(f"{role} ({now[role]['name']}) is new")
        elif before[role] != now[role]:
            changes.append(f"the source of {role} ({now[role]['name']}) changed")
    return changes


def _short(commit: str | None) -> str:
    return (commit or "none")[:10]


def run_metadata(settings: Mapping, wall_seconds: float | None = None) -> dict:
    """Everything needed to reproduce a run: settings, versions, commit, devices."""
    import jax

    packages = ("jfl", "jax", "jaxlib", "numpy", "scipy", "xarray", "pandas", "flax")
    commit, diff = git_state()
    return {
        "config": dict(settings),
        "versions": {package: version(package) for package in packages},
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "git_commit": commit,
        "git_dirty": diff is not None,
        "devices": [str(d) for d in jax.devices()],
        "backend": jax.default_backend(),
        "wall_seconds": wall_seconds,
    }
