"""Process settings of the test suite, made here rather than by importing a package
(ARCHITECTURE §4): float64 for theory checks and ODEs, a non-interactive matplotlib."""

import os

import matplotlib

from simulate.runtime import use_float64

use_float64()
matplotlib.use("Agg")

# A local Ray instance started by the sweep tests binds to loopback only (Ray's single-machine
# mode must be chosen before Ray is imported).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
