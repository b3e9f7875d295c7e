"""Symbolic side of stagewise: reduced gradient flows, fixed points, spectra, stage-time predictions.

Pure mathematics (sympy + numpy); never imports jax, ``simulate`` or ``figures``.
"""
