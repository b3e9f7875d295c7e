"""Process settings of the test suite, made here rather than by importing a package
(ARCHITECTURE §4): float64 for theory checks and ODEs, strict dtype promotion (as diffrax's
tests do: an implicit mix of dtypes is an error, not a silent up- or down-cast), a
non-interactive matplotlib, and one JAX CPU device per process."""

import os

import jax
import matplotlib

from simulate.runtime import use_float64

# pytest-xdist already runs one process per core: a device per core in each would oversubscribe
# them, and which test first configures JAX in a worker would decide its device count (the
# CLI's configure() only sets it before JAX runs); tests of the sharded path set it themselves
os.environ.setdefault("STAGEWISE_CPU_DEVICES", "1")
use_float64()
jax.config.update("jax_numpy_dtype_promotion", "strict")
matplotlib.use("Agg")

# A local Ray instance started by the sweep tests binds to loopback only (Ray's single-machine
# mode must be chosen before Ray is imported).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
