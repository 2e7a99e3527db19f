"""Partial batches: per-replica batches are padded to one static row count and carry each
replica's real row count, passed to the compiled program as a hidden input (see
`trace.distributed_values.PerReplicaBatch`). While a program is traced the count is visible
through `strategax._context.batch()`; the helpers here use it to tell per-example values
(`is_per_example`), to refuse what would mix padded rows into a result (`check_not_padded`)
and to mask rows in the user's code (`sx.nn.batch_mask`). The `mask-padding` pass
(`passes/mask_padding.py`) keeps padded rows out of everything the program combines; the
eager `reduce`/`gather` trim them from what they hand back (`distribute/cross_replica.py`).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from .. import _context
from ..errors import DistributionValueError


def batch_mask(x) -> jax.Array:
    """Boolean [rows] mask of this replica's real rows of `x` (all True without padding)."""
    rows = jnp.shape(x)[0]
    count, padded = _context.batch()
    if count is None or rows != padded:
        return jnp.ones((rows,), bool)
    return jnp.arange(rows) < count


def is_per_example(local) -> bool:
    """Whether the traced `local` carries the padded rows of a partial batch (or of a batch
    taken inside the program, which may be partial)."""
    count, rows = _context.batch()
    return count is not None and jnp.ndim(local) > 0 and jnp.shape(local)[0] == rows


def check_not_padded(local, api: str, fix: str) -> None:
    """Raise where `api` would mix a partial batch's padded rows into its result."""
    if is_per_example(local):
        raise DistributionValueError(
            f"{api} of per-example values of an input batch inside a compiled function: the program "
            "also serves partial batches, whose replicas hold different numbers of real rows, so the "
            "result has no static shape (TensorFlow raises for differing shapes too) and would "
            "include padded rows", fix)


def mask_rows(x, mask):
    """`x` with the rows where `mask` is False replaced by zeros."""
    x = jnp.asarray(x)
    return jnp.where(mask.reshape(mask.shape + (1,) * (x.ndim - 1)), x, jnp.zeros((), x.dtype))
