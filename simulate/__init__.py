"""Numerical side of stagewise: compiled fields, diffrax integration, training, the run store.

Float64 is switched on here, once for the whole package: the ODEs and theory checks need it, and
so do the training runs started at tiny scales (symmetry breaking of 1e-9 is lost in float32).
"""

import jax

jax.config.update("jax_enable_x64", True)
