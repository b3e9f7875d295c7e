"""Programs traced once per machine, not once per process.

JAX's persistent compilation cache spares a new process XLA's compile, not the tracing and
lowering that compute the cache's key: with the cache warm, a head-ODE batch of
``incremental-ode --quick`` still took 0.8 s before it ran, the tracing of diffrax's loops. A
program whose trace depends only on its arguments' shapes and dtypes, its static arguments and the
source it runs is exported here once (``jax.export``: its StableHLO with its calling convention)
and stored beside the compilation cache; a later process deserialises it and compiles only the
call around it, which the compilation cache serves (0.2 s for that batch).

The entry's key holds everything the trace reads besides the arguments: the function's module and
name, the static arguments, the argument tree with each leaf's shape, dtype and weak type, the
source of ``theory``, ``simulate`` and the function's own module, the versions of the libraries
that trace (JAX, diffrax, equinox, optimistix, lineax, optax) and the JAX settings that change a
trace. Functions that close over arrays or other run-time state do not belong here (the trainer's
chunk, whose problem is a closure, compiles through ``jax.jit`` as before).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import inspect
import os
import sys
import threading
from collections.abc import Callable, Hashable
from functools import cache
from pathlib import Path
from typing import Any

import jax
from jax import export

from simulate.runtime import cache_dir
from simulate.side_by_side import devices

_LIBRARIES = ("jax", "jaxlib", "diffrax", "equinox", "optimistix", "lineax", "optax")
_SETTINGS = (
    "jax_enable_x64",
    "jax_numpy_dtype_promotion",
    "jax_default_matmul_precision",
    "jax_default_prng_impl",
    "jax_threefry_partitionable",
)


def store_dir() -> Path:
    """Where exported programs are kept: ``exported/`` in the compilation cache's directory."""
    return cache_dir() / "exported"


@cache
def _package_digest() -> str:
    """sha256 over the source of ``theory`` and ``simulate`` (paths and contents)."""
    digest = hashlib.sha256()
    for package in ("theory", "simulate"):
        root = Path(importlib.import_module(package).__file__ or "").parent
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(root.parent)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


@cache
def _module_digest(module: str) -> str:
    """sha256 of the source file of ``module`` (a function outside ``theory`` and ``simulate``
    changes its program when its own file changes)."""
    try:
        source = inspect.getsourcefile(sys.modules[module])
    except TypeError:  # no file: a built-in or ``python -c``
        source = None
    return hashlib.sha256(Path(source).read_bytes() if source else b"").hexdigest()


@cache
def _versions() -> tuple[str, ...]:
    found = []
    for name in _LIBRARIES:
        try:
            found.append(f"{name}={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{name}=-")
    return tuple(found)


def key(fn: Callable, args: tuple, static: dict[str, Hashable]) -> str:
    """The entry of ``fn`` (a ``jax.jit`` of a module-level function) at ``args`` and ``static``."""
    leaves, tree = jax.tree_util.tree_flatten(args)
    avals = [(tuple(a.shape), str(a.dtype), bool(a.weak_type)) for a in map(jax.typeof, leaves)]
    parts = (
        fn.__module__,
        fn.__qualname__,
        repr(sorted(static.items())),
        str(tree),
        repr(avals),
        _package_digest(),
        _module_digest(fn.__module__),
        _versions(),
        tuple(repr(getattr(jax.config, name, None)) for name in _SETTINGS),
    )
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _read(path: Path) -> export.Exported | None:
    if not path.exists():
        return None
    try:
        return export.deserialize(bytearray(path.read_bytes()))
    except Exception:  # a truncated or foreign entry: exported again and replaced
        return None


def _write(path: Path, exported: export.Exported) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # processes, and side-by-side jobs (threads of one process), may export the same program at
    # once: each writes its own file and renames
    part = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.part")
    part.write_bytes(exported.serialize())
    os.replace(part, path)


_LOADED: dict[tuple[str, Any], Callable] = {}
"""This process's executables by entry and device: the same program called again on the same
device neither loads nor compiles (an executable runs on the device it was compiled for, and
side-by-side jobs each have their own)."""


def compiled(fn: Callable, args: tuple, static: dict[str, Any] | None = None) -> Callable:
    """``fn.lower(*args, **static).compile()`` through the store: ``fn`` is traced (and
    exported) only when no earlier process stored it, and compiled once per process and device;
    the returned executable takes arguments shaped like ``args``. The store keeps the arguments
    as a flat list (an exported program keeps its argument tree, and our pytree types would
    each need registering); results must be tuples, lists or dicts of arrays."""
    static = static or {}
    entry = key(fn, args, static)
    loaded = (entry, devices()[0])
    if loaded not in _LOADED:
        leaves, tree = jax.tree_util.tree_flatten(args)
        path = store_dir() / f"{entry}.jaxexport"
        program = _read(path)
        if program is None:
            flat = jax.jit(lambda *xs: fn(*jax.tree_util.tree_unflatten(tree, xs), **static))
            program = export.export(flat)(*leaves)
            _write(path, program)
        executable = jax.jit(program.call).lower(*leaves).compile()
        _LOADED[loaded] = lambda *xs: executable(*jax.tree_util.tree_leaves(xs))
    return _LOADED[loaded]
