"""What made a sweep's numbers: settings, versions, the code, the machine.

A sweep directory's manifest stores :func:`code_fingerprint` next to the settings, so that chunks
computed by other code are never reused without a word (``jfl.sweep.SweepDir``). The
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
  class typed into a console);
* ``data`` (federated sweeps, added by ``jfl.driver``): where the clients' data came from, a
  Hugging Face snapshot with its commit, so a newer snapshot of the same dataset is other data;
* ``files``: a hash of every user file those objects can reach (:func:`user_files`): the module
  that defines each of them and every module of the user's that it imports (its ``import``
  statements), and theirs, each whole. An edited module-level constant or helper changes the
  numbers as surely as an edited builder, so it is refused alike. Installed packages (the
  standard library, site-packages) are not hashed: their versions are what a reinstall
  changes.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import inspect
import platform
import site
import subprocess
import sys
import sysconfig
import types
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


def package_source(root: Path | None = None) -> str:
    """sha256 (first 16 hex digits) of every ``.py`` file of the package (names and contents),
    or of the one at ``root``: what the fingerprint compares and what keys the compilation
    cache (``jfl.compilation_cache``). The installed package's is computed once a process."""
    return _own_source() if root is None else _tree_hash(Path(root))


@functools.cache
def _own_source() -> str:
    return _tree_hash(PACKAGE)


def _tree_hash(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


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


def _installed_roots() -> tuple[Path, ...]:
    """Where installed code lives: the standard library and every site-packages."""
    paths = sysconfig.get_paths()
    roots = [paths[name] for name in ("stdlib", "platstdlib", "purelib", "platlib")]
    roots += [*site.getsitepackages(), site.getusersitepackages()]
    return tuple(Path(root).resolve() for root in dict.fromkeys(roots))


def _user_file(module: types.ModuleType, installed: tuple[Path, ...]) -> Path | None:
    """The source file of ``module`` if the user wrote it: a ``.py`` file outside the package
    and outside installed code; None otherwise (a built-in, an extension, an installed one)."""
    name = getattr(module, "__file__", None)
    if not name or not name.endswith(".py"):
        return None
    path = Path(name).resolve()
    if path.is_relative_to(PACKAGE) or any(path.is_relative_to(root) for root in installed):
        return None
    return path


def _imported(module: types.ModuleType, path: Path) -> list[types.ModuleType]:
    """The loaded modules that ``module``'s source imports (``import a.b``, ``from a import
    b``, relative imports too): what its code can read, constants included."""
    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return []
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            try:
                base = importlib.util.resolve_name(base, module.__package__ or "")
            except (ImportError, ValueError):
                continue
            names += [base, *(f"{base}.{alias.name}" for alias in node.names)]
    return [sys.modules[name] for name in names if name in sys.modules]


def user_files(objects) -> dict[str, dict[str, str]]:
    """Each user file that ``objects`` can reach, by module name: its path and a hash of it.
    Reached: the modules defining the objects, then every user module their source imports
    (``from helpers import SCALE`` included), and so on. The whole file is hashed, so a
    constant or a helper edited next to a policy counts as much as the policy. Compared by
    module name, so that the same files run from another folder are the same code."""
    installed = _installed_roots()
    todo = [sys.modules.get(getattr(_target(obj), "__module__", None) or "") for obj in objects]
    files: dict[str, dict[str, str]] = {}
    while todo:
        module = todo.pop()
        path = None if module is None else _user_file(module, installed)
        if path is None or module.__name__ in files:
            continue
        files[module.__name__] = {"file": str(path), "source": _file_sha(path)}
        todo.extend(_imported(module, path))
    return dict(sorted(files.items()))


def _file_sha(path: Path) -> str:
    try:
        return _sha(path.read_bytes())
    except OSError:  # deleted since it was imported: what ran can no longer be told
        return "unreadable"


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
        "files": user_files(
            obj for obj in objects.values() if obj is not None and is_external(obj)
        ),
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
        if commits[0] and commits[0] == commits[1]:
            at = f" (uncommitted edits at commit {_short(commits[0])})"
        changes.append(f"the jfl package's source changed{at}")
    before, now = old.get("external", {}), new.get("external", {})
    for role in sorted(set(before) | set(now)):
        if role not in now:
            changes.append(f"{role} ({before[role]['name']}) is no longer used")
        elif role not in before:
            changes.append(f"{role} ({now[role]['name']}) is new")
        elif before[role] != now[role]:
            changes.append(f"the source of {role} ({now[role]['name']}) changed")
    if "data" in old and old["data"] != new.get("data"):
        changes.append(f"the dataset changed ({old['data']} → {new.get('data')})")
    # A file whose changed object was named already is not named again.
    named = [now[role]["name"] for role in now if role in before and before[role] != now[role]]
    before, now = old.get("files", {}), new.get("files", {})
    for module in sorted(set(before) | set(now)):
        if any(name.startswith(module + ".") for name in named):
            continue
        if module not in now:
            changes.append(f"{before[module]['file']} is no longer used")
        elif module not in before:
            changes.append(f"{now[module]['file']} is new")
        elif before[module]["source"] != now[module]["source"]:
            changes.append(f"{now[module]['file']} changed")
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
