"""Numerical side of stagewise: compiled fields, diffrax integration, training, the run store.

The engine (trainer, runner, store, sweep, experiment registry, process settings) sits at the top,
shared measurement rules in ``simulate.measure``, and each paper has a wing of its own. Importing
the package changes no global setting: entry points call ``simulate.runtime.configure()``.
"""
