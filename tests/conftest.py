"""Process settings of the test suite, made here rather than by importing a package
(ARCHITECTURE §4): float64 for theory checks and ODEs, strict dtype promotion (as diffrax's
tests do: an implicit mix of dtypes is an error, not a silent up- or down-cast), a
non-interactive matplotlib, one JAX CPU device per process, XLA flags that shorten compiles
(``tests/xla_flags.py``), the unrolled Threefry lowering every entry point uses
(``simulate.runtime.configure``), and a compilation cache of the session's own."""

import atexit
import os
import shutil
import tempfile

import jax
import matplotlib

from simulate.runtime import use_float64, use_unrolled_threefry
from tests.xla_flags import suite_flags

# pytest-xdist already runs a process per core or more: a device per core in each would swamp
# the cores, and which test first configures JAX in a worker would decide its device count (the
# CLI's configure() only sets it before JAX runs); tests of the sharded path set it themselves
os.environ.setdefault("STAGEWISE_CPU_DEVICES", "1")
use_float64()
use_unrolled_threefry()

# One persistent compilation cache for the session, not the user's own (a test calling the CLI
# in-process or in a subprocess would write there): the controller makes it before xdist starts
# the workers, which inherit it, and removes it at the end. Programs that take a second or more to
# compile (a trainer's chunk, a diffrax solve) recur across tests and workers: caching those cut
# the user time of the clustering and training tests by a tenth (240 against 271 s); caching
# every program, as the CLI does, gave nothing, the many small ones cost more to write than to
# compile.
if "STAGEWISE_CACHE_DIR" not in os.environ:
    os.environ["STAGEWISE_CACHE_DIR"] = tempfile.mkdtemp(prefix="stagewise-tests-jax-")
    atexit.register(shutil.rmtree, os.environ["STAGEWISE_CACHE_DIR"], ignore_errors=True)
# Compile was 41% of the suite's in-test time (3911 programs), and XLA's backend most of it.
# Two flags each about halve it (tests/xla_flags.py). Without XLA's CPU fusion emitters its
# older loop emitter builds the same fusions: the suite on 2 cores took 640 and 684 s against
# 836 s (programs heavy in Threefry bits compile slower so, 6.0 against 1.4 s for the
# cellular-automaton sampler, and that is in the total). LLVM at -O0 then took it from 556 to
# 465 s (user CPU 923 against 731 s) with every test in-process (README, "The suite compiles
# with LLVM at -O0").
# Tests check behaviour, not codegen: float32 results move by about 1e-5 relative, and the two
# checks that hold a float32 mean to 1e-6 run the optimised code in a subprocess; the CLI and
# `python -m benchmarks` keep XLA's defaults for users. The suite's subprocesses inherit the flags.
os.environ["XLA_FLAGS"] = suite_flags(os.environ.get("XLA_FLAGS", ""))
jax.config.update("jax_compilation_cache_dir", os.environ["STAGEWISE_CACHE_DIR"])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
jax.config.update("jax_numpy_dtype_promotion", "strict")
matplotlib.use("Agg")

# A local Ray instance started by the sweep tests binds to loopback only (Ray's single-machine
# mode must be chosen before Ray is imported).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
