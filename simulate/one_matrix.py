"""LAPACK on one matrix at a time under ``vmap``.

jaxlib's LAPACK kernels split a batch of matrices over XLA:CPU's intra-op thread pool
(``ParallelBatchMap``), and two such batches in flight at once, from two side-by-side runs or from
vmapped seeds, intermittently never return: gdb shows both pool threads inside
``ParallelBatchMap`` of ``lapack_dgesdd_ffi``, each waiting for work queued to the same pool.
A function of one matrix wrapped here is batched by a ``lax.map`` instead, so LAPACK sees single
matrices and runs them inline.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import jax

F = TypeVar("F", bound=Callable[..., Any])


def one_matrix_at_a_time(fn: F) -> F:
    """``fn`` of one matrix, batched under vmap by a ``lax.map`` over the batch."""
    batched = jax.custom_batching.custom_vmap(fn)

    @batched.def_vmap
    def _mapped(axis_size, in_batched, x):
        del axis_size, in_batched
        return jax.lax.map(batched, x), True

    return cast(F, batched)
