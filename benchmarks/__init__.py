"""Benchmarks of stagewise (issue 15): ``python -m benchmarks [--quick] [--out FILE.json]
[--only NAME ...]`` measures every hot path against a baseline timed in the same run and prints
one table. One module per family: ``ode``, ``peak``, ``seeds``, ``compile_wall`` (family
``figures``), ``memory``; the older scripts (``training``, ``markov_training``, ``vmap_seeds``,
``clustering_epochs``, ``emergence_steps``) still run on their own."""
