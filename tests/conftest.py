"""Theory checks and ODEs run in float64 (ARCHITECTURE §4)."""

import jax

jax.config.update("jax_enable_x64", True)
