"""The suite's XLA compiler flags (set by ``tests/conftest.py`` before JAX starts), and the
environment of a subprocess that compiles with LLVM's optimisation on, as the CLI does for users.

Both flags shorten compiles, which are most of the suite's time. A few checks hold float32 sums
to a precision that only the optimised code reaches; they run their program in such a
subprocess."""

import os

NO_FUSION_EMITTERS = "--xla_cpu_use_fusion_emitters=false"
"""XLA's older CPU loop emitter builds the same fusions in about half the compile time."""

LLVM_UNOPTIMISED = "--xla_backend_optimization_level=0"
"""LLVM at -O0. Without the loop vectoriser, XLA sums a reduction in sequence: the mean of 256
float32 copies of ln 6 comes out 2.7e-6 off (1.5e-6 relative), against 0 when optimised."""


def suite_flags(flags: str) -> str:
    """``flags`` (the ``XLA_FLAGS`` given) with the suite's flags added where not already set."""
    for flag in (NO_FUSION_EMITTERS, LLVM_UNOPTIMISED):
        if flag.split("=")[0] not in flags:
            flags = f"{flags} {flag}".strip()
    return flags


def optimised_env() -> dict[str, str]:
    """This process's environment with LLVM's optimisation back on for a subprocess."""
    flags = os.environ.get("XLA_FLAGS", "").replace(LLVM_UNOPTIMISED, "")
    return {**os.environ, "XLA_FLAGS": " ".join(flags.split())}
