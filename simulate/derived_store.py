"""Derived numbers computed once per machine, not once per process.

The summary of every ``heads-gd`` run (incremental.md §5.2: the plateau levels L_0..L_K and the
stage times of ``theory.incremental.stages``) is sympy work of about 2.7 s, more than a short run's
training, and a new process (a ``stagewise run``, each worker of a sweep) did it again.
``on_disk`` keeps such a result as JSON beside the compilation cache, under a key of the function,
its arguments' ``repr``, the source of ``theory`` and ``simulate`` and the versions of the
libraries that compute it; any edit of our source or upgrade of those libraries recomputes it.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from simulate.program_store import library_versions, package_digest
from simulate.runtime import cache_dir

R = TypeVar("R")

_LIBRARIES = ("sympy", "mpmath", "numpy", "scipy", "jax", "diffrax")


def on_disk(decode: Callable[[Any], R]) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Decorate a function of hashable, ``repr``-stable arguments whose result JSON holds
    exactly (floats, ints, None, lists); ``decode`` rebuilds the result from its JSON form."""

    def decorate(fn: Callable[..., R]) -> Callable[..., R]:
        @wraps(fn)
        def stored(*args: Any) -> R:
            parts = (
                fn.__module__,
                fn.__qualname__,
                repr(args),
                package_digest(),
                library_versions(_LIBRARIES),
            )
            name = hashlib.sha256(repr(parts).encode()).hexdigest()
            path = cache_dir() / "derived" / f"{name}.json"
            try:
                return decode(json.loads(path.read_text())["value"])
            except (OSError, ValueError, KeyError, TypeError):
                pass  # absent, or cut by a kill: computed and written again
            value = fn(*args)
            path.parent.mkdir(parents=True, exist_ok=True)
            part = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.part")
            part.write_text(json.dumps({"value": value}))
            os.replace(part, path)
            return value

        return stored

    return decorate
