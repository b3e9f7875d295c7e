"""Symbolic side of stagewise: reduced gradient flows, fixed points, spectra, stage-time
predictions.

The generic machinery sits at the top (``gradient_flow``: symbolic flows and their fixed points;
``validation``: one-line configuration errors), and each paper has a subpackage of its own
(``incremental``, ``focus_dilution``, ``clustering_head``, ``emergence``, ``mean_field``); the
paper subpackages never import each other. Pure mathematics (sympy, numpy, scipy): never imports
jax, ``simulate`` or ``figures``.
"""
