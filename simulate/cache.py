"""Persistent JAX compilation cache under the user's cache directory (ARCHITECTURE §4), so repeated
CLI calls load compiled programs instead of recompiling."""

from __future__ import annotations

import os
from pathlib import Path

import jax


def cache_dir() -> Path:
    """``$STAGEWISE_CACHE_DIR``, else ``$XDG_CACHE_HOME/stagewise/jax``, else ``~/.cache/stagewise/jax``."""
    if os.environ.get("STAGEWISE_CACHE_DIR"):
        return Path(os.environ["STAGEWISE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "stagewise" / "jax"


def enable_compilation_cache() -> Path:
    path = cache_dir()
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    # the programs here compile in seconds: cache all of them
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path
