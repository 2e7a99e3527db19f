"""Partial batches: per-replica batches are padded to one static row count and carry each
replica's real row count, passed to the compiled program as a hidden input (see
`trace.distributed_values.PerReplicaBatch`). While a program is traced the count is visible
through `strategax._context.batch()`; the helpers here use it to tell per-example values
(`is_per_example`: its local results can only be returned) and to mask rows in the user's
code (`sx.nn.batch_mask`). The `mask-padding` pass (`passes/mask_padding/`) keeps padded
rows out of everything the program combines, and the call cuts them from what it hands back.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from .. import _context


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


def mask_rows(x, mask):
    """`x` with the rows where `mask` is False replaced by zeros."""
    x = jnp.asarray(x)
    return jnp.where(mask.reshape(mask.shape + (1,) * (x.ndim - 1)), x, jnp.zeros((), x.dtype))
