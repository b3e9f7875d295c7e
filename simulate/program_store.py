"""Programs traced once per machine, not once per process.

JAX's persistent compilation cache spares a new process XLA's compile, not the tracing and
lowering that compute the cache's key: with the cache warm, a head-ODE batch of
``incremental-ode --quick`` still took 0.8 s before it ran, the tracing of diffrax's loops. A
program whose trace depends only on its arguments' shapes and dtypes, its static arguments and the
source it runs is exported here once (``jax.export``: its StableHLO with its calling convention)
and stored beside the compilation cache; a later process deserialises it and compiles only the
call around it, which the compilation cache serves (0.2 s for that batch).

The entry's key holds everything the trace reads besides the arguments: the function's module and
name, the static arguments, the argument tree with each leaf's shape, dtype, weak type and layout
over devices, the source of ``theory``, ``simulate`` and the function's own module, the versions of
the libraries that trace (JAX, diffrax, equinox, optimistix, lineax, optax), the JAX settings that
change a trace and the Threefry lowering (``simulate.runtime.use_unrolled_threefry``).

A function that closes over run-time state (the trainer's chunk closes over its problem and
optimizer) is stored under ``traced_key`` instead: the texts of the jaxprs it inlines, traced at
shapes only (cheap beside tracing the whole program under ``vmap`` and ``scan`` and lowering it),
with the arrays they close over made arguments of the program or hashed into the key. Warm, a
small clustering-head run's chunk then compiled in 0.88-0.90 s instead of 1.54-1.59 s.
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
from functools import cache, partial
from pathlib import Path
from typing import Any

import jax
import jax.extend
from jax import export

from simulate.runtime import cache_dir, unrolled_threefry
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
def package_digest() -> str:
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
def library_versions(names: tuple[str, ...] = _LIBRARIES) -> tuple[str, ...]:
    """``name=version`` of each library of ``names`` (``name=-`` where it is not installed)."""
    found = []
    for name in names:
        try:
            found.append(f"{name}={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{name}=-")
    return tuple(found)


def _environment() -> tuple:
    """What every trace reads besides its function and arguments: our source, the tracing
    libraries' versions, the JAX settings that change a trace, and the Threefry lowering."""
    return (
        package_digest(),
        library_versions(),
        tuple(repr(getattr(jax.config, name, None)) for name in _SETTINGS),
        unrolled_threefry(),
    )


def _arguments(args: tuple) -> tuple[str, str]:
    """The argument tree, and each leaf's shape, dtype, weak type and layout over devices (the
    count and partition, not which devices: a program runs on the devices of its call)."""
    leaves, tree = jax.tree_util.tree_flatten(args)
    avals = [(tuple(a.shape), str(a.dtype), bool(a.weak_type)) for a in map(jax.typeof, leaves)]
    layouts = [
        None if s is None else (len(s.device_set), str(getattr(s, "spec", None)))
        for s in (getattr(leaf, "sharding", None) for leaf in leaves)
    ]
    return str(tree), repr((avals, layouts))


def key(fn: Callable, args: tuple, static: dict[str, Hashable]) -> str:
    """The entry of ``fn`` (a ``jax.jit`` of a module-level function) at ``args`` and ``static``."""
    parts = (
        fn.__module__,
        fn.__qualname__,
        repr(sorted(static.items())),
        *_arguments(args),
        _module_digest(fn.__module__),
        _environment(),
    )
    return hashlib.sha256(repr(parts).encode()).hexdigest()


_KEYED_CODE = set(_LIBRARIES) | {"theory", "simulate"}
"""Top-level packages whose code the key holds (by version or by source digest)."""


def jaxpr_text(closed: jax.extend.core.ClosedJaxpr) -> str | None:
    """``closed``'s jaxpr as text, for ``traced_key``; None where the program it stands for
    would run Python the key does not hold: a host callback, or a batching rule (the one
    function a jaxpr names that a vmapped forward pass calls; its text shows only the name)
    from outside ``_KEYED_CODE``."""
    return None if _runs_unkeyed_code(closed.jaxpr) else str(closed.jaxpr)


def _runs_unkeyed_code(jaxpr: jax.extend.core.Jaxpr) -> bool:
    for eqn in jaxpr.eqns:
        if "callback" in eqn.primitive.name:
            return True
        for param in eqn.params.values():
            for value in param if isinstance(param, tuple | list) else (param,):
                inner = getattr(value, "jaxpr", value)
                if isinstance(inner, jax.extend.core.Jaxpr):
                    if _runs_unkeyed_code(inner):
                        return True
                elif callable(value) and not isinstance(value, type):
                    module = getattr(value, "__module__", None) or ""
                    if module.split(".")[0] not in _KEYED_CODE:
                        return True
    return False


def traced_key(identity: tuple[str | None, ...], args: tuple) -> str | None:
    """The entry of a program that closes over run-time state, at ``args``: ``identity`` names
    that state completely, as texts (the jaxprs the program inlines, by ``jaxpr_text``, with
    what they close over made arguments or hashed in). None where a text is None: such a
    program is traced in every process."""
    if any(text is None for text in identity):
        return None
    parts = ("traced", identity, *_arguments(args), _environment())
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
    return compiled_as(key(fn, args, static), partial(fn, **static), args)


def compiled_as(entry: str, fn: Callable, args: tuple) -> Callable:
    """``jax.jit(fn).lower(*args).compile()`` through the store under ``entry`` (see
    ``traced_key``), for a function the store cannot name by its module and arguments."""
    leaves, tree = jax.tree_util.tree_flatten(args)
    loaded = (entry, tuple(devices()))
    if loaded not in _LOADED:
        path = store_dir() / f"{entry}.jaxexport"
        program = _read(path)
        if program is None:
            flat = jax.jit(lambda *xs: fn(*jax.tree_util.tree_unflatten(tree, xs)))
            program = export.export(flat)(*leaves)
            _write(path, program)
        executable = jax.jit(program.call).lower(*leaves).compile()
        _LOADED[loaded] = lambda *xs: executable(*jax.tree_util.tree_leaves(xs))
    return _LOADED[loaded]
