"""Numerical side of stagewise: compiled fields, diffrax integration, stage detection (jax)."""
