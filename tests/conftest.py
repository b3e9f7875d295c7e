"""Process settings of the test suite, made here rather than by importing a package
(ARCHITECTURE §4): float64 for theory checks and ODEs, strict dtype promotion (as diffrax's
tests do: an implicit mix of dtypes is an error, not a silent up- or down-cast), and a
non-interactive matplotlib."""

import os

import jax
import matplotlib

from simulate.runtime import use_float64

use_float64()
jax.config.update("jax_numpy_dtype_promotion", "strict")
matplotlib.use("Agg")

# A local Ray instance started by the sweep tests binds to loopback only (Ray's single-machine
# mode must be chosen before Ray is imported).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
