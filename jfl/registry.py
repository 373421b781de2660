"""One registry idiom for every kind of named thing: policies, environments, trackers and
experiments.

A :class:`Registry` is a dict from name to thing that also knows what kind of thing it holds,
so that ``register`` adds (or replaces: rerunning a notebook cell that registers a policy is
harmless) and ``lookup`` refuses an unknown name in one line that lists the known ones and the
closest match.
"""

from __future__ import annotations

import difflib
from typing import TypeVar

T = TypeVar("T")


class Registry(dict[str, T]):
    """Names of one ``kind`` ("policy", "environment", …) and what they name."""

    def __init__(self, kind: str, entries=()):
        super().__init__(entries)
        self.kind = kind

    def register(self, name: str, value: T) -> T:
        """Add ``value`` as ``name`` (replacing one of the same name) and return it."""
        self[name] = value
        return value

    def lookup(self, name: str) -> T:
        """What ``name`` names; ValueError naming the known ones (and the closest) otherwise."""
        if name not in self:
            close = difflib.get_close_matches(name, list(self), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"unknown {self.kind} {name!r}{hint} (choose from {sorted(self)})")
        return self[name]
