"""Process-wide JAX settings, made by the entry points (the CLI, sweep workers, benchmarks,
``tests/conftest.py``) and never by importing a package (ARCHITECTURE §4).

- Float64: the ODEs and theory checks need it, and so do training runs started at tiny scales
  (symmetry breaking of 1e-9 is lost in float32).
- The persistent compilation cache under the user's cache directory, so that repeated CLI calls
  load compiled programs instead of recompiling.
- One JAX CPU device per core: XLA:CPU runs the small ops of a training step on one core, so
  the trainer shards vmapped seeds over these devices to use every core.
- The Threefry hash behind ``jax.random`` unrolled on the CPU, as on GPUs: the same bits at a
  fraction of the cost where a step draws its own random numbers.
- One persistent-cache entry per program whichever CPU device it runs on: side-by-side runs
  (``simulate.side_by_side``) land on whichever device is free, and a program compiled on one
  must be found when it next runs on another.
"""

from __future__ import annotations

import os
from pathlib import Path

import jax


def use_float64() -> None:
    """Switch JAX to 64-bit floats and integers for this process."""
    jax.config.update("jax_enable_x64", True)


def cache_dir() -> Path:
    """``$STAGEWISE_CACHE_DIR``, else ``$XDG_CACHE_HOME/stagewise/jax``, else
    ``~/.cache/stagewise/jax``."""
    if os.environ.get("STAGEWISE_CACHE_DIR"):
        return Path(os.environ["STAGEWISE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "stagewise" / "jax"


def enable_compilation_cache() -> Path:
    """Point JAX's persistent compilation cache at ``cache_dir()`` and cache every program."""
    path = cache_dir()
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    # the programs here compile in seconds: cache all of them
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path


CPU_DEVICES = "STAGEWISE_CPU_DEVICES"
"""environment variable: JAX CPU devices of a process (default: the cores it may run on)."""


def use_cpu_cores() -> None:
    """One JAX CPU device per core (``$STAGEWISE_CPU_DEVICES`` overrides the count)."""
    count = int(os.environ.get(CPU_DEVICES) or len(os.sched_getaffinity(0)))
    try:
        jax.config.update("jax_num_cpu_devices", max(1, count))
    except RuntimeError:
        # JAX already ran a program in this process (a test calling the CLI in-process); its
        # devices stay as they are
        pass


def use_unrolled_threefry() -> None:
    """Lower ``jax.random``'s Threefry-2x32 hash on the CPU with its rounds unrolled, as JAX
    lowers it for GPUs, instead of as a loop of five trips.

    On XLA:CPU every trip of that loop is a few tiny kernels, paid at every step of a trainer that
    draws its own minibatch (a clustering-head epoch draws 64 x 2048 uniforms: 5.2 ms with the
    loop, 2.8 ms unrolled). The hash is the same integer arithmetic either way, so every random
    number stays bitwise the same. JAX has no public switch for this and its unrolled rule is
    private: where a JAX release moves it, random numbers stay looped (same bits, slower)."""
    try:
        from jax._src.random.threefry2x32 import _threefry2x32_lowering_rule as unrolled
    except ImportError:
        return
    from jax.extend.random import threefry2x32_p
    from jax.interpreters import mlir

    mlir.register_lowering(threefry2x32_p, unrolled, platform="cpu")
    _UNROLLED.append(True)


_UNROLLED: list[bool] = []


def unrolled_threefry() -> bool:
    """Whether this process lowers Threefry unrolled (``use_unrolled_threefry``): a program
    exported by one process is the same in another only if both lower it alike."""
    return bool(_UNROLLED)


def share_cache_between_devices() -> None:
    """Key the persistent compilation cache without the device a program was compiled for, as
    JAX keys it for GPUs.

    On the CPU JAX keeps the device assignment in the key, so a side-by-side run (one device
    per job, whichever is free) found a program in the cache only when it landed on the device
    it had been compiled on: warm, `stagewise compare incremental --quick` compiled its
    regression rows' ODE again (12 s) when they changed device. A CPU executable loaded from
    the cache is set up for the devices of the call that loads it, as on GPUs. JAX has no
    public switch for this and the rule is private: where a JAX release moves it, the key
    keeps the device (programs recompile on another device, nothing else changes)."""
    try:
        from jax._src import cache_key
    except ImportError:
        return
    hash_options = getattr(cache_key, "_hash_serialized_compile_options", None)
    if hash_options is None or hash_options.__name__ == "_without_devices":
        return

    def _without_devices(hash_obj, compile_options, strip_device_assignment=False):
        return hash_options(hash_obj, compile_options, strip_device_assignment=True)

    cache_key._hash_serialized_compile_options = _without_devices


def configure() -> None:
    """What every stagewise process sets before it builds a JAX program."""
    use_cpu_cores()
    use_float64()
    use_unrolled_threefry()
    share_cache_between_devices()
    enable_compilation_cache()
