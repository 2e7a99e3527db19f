"""Partial batches: per-replica batches are padded to one static row count and carry each
replica's real row count, passed to the compiled program as a hidden input (see
`trace.distributed_values.PerReplicaBatch`). While a program is traced the count is visible
through `strategax._context.batch()`; the helpers here use it so padded rows count for
nothing in `strategy.reduce(..., axis=0)`, and trim what `reduce`/`gather` hand back. Inside
the user's own code the `mask-padding` pass does this (`passes/mask_padding.py`): the
helpers are not needed for correctness there.
"""
from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import _context
from ..dialects.collectives import all_reduce
from ..errors import DistributionValueError
from ..trace.distributed_values import PerReplicaBatch, is_distributed


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


def reduce_rows(op_name: str, local, axis: int):
    """`strategy.reduce(op, v, axis=0)` in traced code: the sum over axis 0 (the mask-padding
    pass masks padded rows exactly when `local`'s axis 0 is a partial batch's row axis) and,
    for MEAN, a division by the number of rows summed over all replicas, counted the same way
    (the real global row count of a per-example value, rows x replicas of any other value)."""
    total = all_reduce(jnp.sum(local, axis=0), "sum", "Strategy.reduce")
    if op_name == "sum" or total.size == 0:  # nothing to divide: an empty mean is empty
        return total
    shape = jnp.shape(local)
    first = jnp.reshape(local, (shape[0], math.prod(shape[1:])))[:, 0] if len(shape) > 1 else local
    ones = jnp.where(first == first, 1.0, 1.0).astype(  # noqa: PLR0124 - a value that follows local's rows
        total.dtype if jnp.issubdtype(total.dtype, jnp.floating) else jnp.float32)
    n = all_reduce(jnp.sum(ones), "sum", "Strategy.reduce")
    return total / n  # no rows anywhere: NaN, as TensorFlow's mean of nothing


def check_even(value: Any, axis: int | None = None, gather: bool = False) -> None:
    """`reduce(op, v)` without axis (or over another axis than the batch's) combines row by row,
    and `gather` along another axis needs equal rows: the replicas' real row counts must agree."""
    for v in jax.tree_util.tree_leaves(value, is_leaf=is_distributed):
        if not isinstance(v, PerReplicaBatch) or len(set(v._counts)) <= 1:
            continue
        ndim = max(v._ndim, 1)
        if axis is not None and axis % ndim == 0:
            continue
        if gather:
            raise DistributionValueError(
                f"strategy.gather(axis={axis}) of a partial batch whose replicas hold different numbers "
                f"of real rows ({list(v._counts)}): the pieces do not line up (TensorFlow raises too)",
                "gather along the batch axis (axis=0)")
        raise DistributionValueError(
            f"strategy.reduce {'without axis' if axis is None else f'over axis {axis}'} combines the "
            f"replicas' values row by row, but their real row counts differ ({list(v._counts)}) in this "
            "partial batch (TensorFlow raises too)",
            "reduce over the batch axis (axis=0), or reduce per-replica scalars such as losses")


def trim_reduced(value: Any, result: Any) -> Any:
    """`reduce(op, v)` without axis of a padded per-example `v`: drop the padded rows of the
    result (replicas with equal real row counts combine row by row, as in TensorFlow)."""
    def one(v, r):
        if isinstance(v, PerReplicaBatch) and max(v._counts) < v._rows:
            return r[:max(v._counts)]
        return r
    return jax.tree_util.tree_map(one, value, result, is_leaf=is_distributed)


def trim_gathered(value: Any, result: Any, axis: int) -> Any:
    """`gather(v, axis=0)` of padded per-example values: keep each replica's real rows only."""
    def one(v, r):
        if not isinstance(v, PerReplicaBatch) or axis % max(v._ndim, 1) != 0 \
                or min(v._counts) == v._rows:
            return r
        index = np.concatenate([np.arange(i * v._rows, i * v._rows + c) for i, c in enumerate(v._counts)])
        return jnp.asarray(r)[index]
    return jax.tree_util.tree_map(one, value, result, is_leaf=is_distributed)
