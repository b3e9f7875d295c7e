"""Theory checks and ODEs run in float64 (ARCHITECTURE §4)."""

import os

import jax

jax.config.update("jax_enable_x64", True)

# A local Ray instance started by the sweep tests binds to loopback only (Ray's single-machine
# mode must be chosen before Ray is imported).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
