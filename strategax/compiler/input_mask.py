"""Partial batches under compilation: per-replica batches are padded to one static row count
and carry each replica's real row count, passed to the compiled program as a hidden input.

Inside a trace, `batch_scope` makes the count visible; `batch_mask`, `compute_average_loss`
and `strategy.reduce(..., axis=0)` use it so padded rows count for nothing, and per-example
outputs of `run` come back trimmed to the real rows.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any

import jax
import jax.numpy as jnp

from .distributed_values import PerReplica


class PerReplicaBatch(PerReplica):
    """A PerReplica input batch (or per-example output): components padded to `_rows` rows on
    the devices, of which the first `_counts[i]` are real on replica i. `values` gives the real
    rows, as TensorFlow does; the compiled program sees the padded ones plus the counts."""

    _kind = "PerReplica"

    @classmethod
    def _from_global_batch(cls, array: jax.Array, layout, counts: tuple, count_value) -> "PerReplicaBatch":
        self = cls._from_global(array, layout)
        self._counts, self._rows, self._count_value = counts, layout.type.shape[0], count_value
        return self

    @property
    def values(self) -> tuple:
        padded = PerReplica.values.fget(self)
        return tuple(c if n == self._rows else c[:n] for c, n in zip(padded, self._counts))


class _Scope(threading.local):
    def __init__(self):
        self.stack: list[tuple[Any, int]] = []


_scope = _Scope()


@contextlib.contextmanager
def batch_scope(count, rows: int | None):
    """While tracing: this replica's real row count (a traced int32 scalar) of `rows` padded rows."""
    _scope.stack.append((count, rows))
    try:
        yield
    finally:
        _scope.stack.pop()


def current() -> tuple[Any, int | None]:
    """(count, rows) of the batch being traced, or (None, None) when no padded batch is in use."""
    return _scope.stack[-1] if _scope.stack else (None, None)


def batch_mask(x) -> jax.Array:
    """Boolean [rows] mask of this replica's real rows of `x` (all True without padding)."""
    rows = jnp.shape(x)[0]
    count, padded = current()
    if count is None or rows != padded:
        return jnp.ones((rows,), bool)
    return jnp.arange(rows) < count


def _mask_rows(x, mask):
    x = jnp.asarray(x)
    return jnp.where(mask.reshape(mask.shape + (1,) * (x.ndim - 1)), x, jnp.zeros((), x.dtype))


def compute_average_loss(per_example_loss, sample_weight=None,
                         global_batch_size: int | None = None) -> jax.Array:
    """Sum of this replica's real per-example losses over the global batch size (TensorFlow's
    `tf.nn.compute_average_loss`); without `global_batch_size`, over the real global row count,
    so a partial batch is averaged exactly. Sum the results (or gradients) across replicas."""
    from .context import get_replica_context

    loss = jnp.asarray(per_example_loss)
    if sample_weight is not None:
        loss = loss * jnp.asarray(sample_weight, loss.dtype)
    mask = batch_mask(loss) if loss.ndim else jnp.ones((), bool)
    total = jnp.sum(_mask_rows(loss, mask) if loss.ndim else loss)
    if global_batch_size is not None:
        return total / jnp.asarray(global_batch_size, loss.dtype)
    local = jnp.sum(mask).astype(loss.dtype)
    ctx = get_replica_context()
    count = local if ctx is None else ctx.all_reduce("sum", local)
    return total / jnp.maximum(count, 1)


def reduce_rows(op_name: str, local, axis: int):
    """`strategy.reduce(op, v, axis=0)` of a per-example value: masked sum over real rows, and
    for MEAN a division by the real global row count; None when `local` is not per-example."""
    from . import primitives

    count, rows = current()
    if count is None or axis != 0 or jnp.ndim(local) == 0 or jnp.shape(local)[0] != rows:
        return None
    mask = jnp.arange(rows) < count
    total = primitives.all_reduce(jnp.sum(_mask_rows(local, mask), axis=0), "sum", "Strategy.reduce")
    if op_name == "sum":
        return total
    n = primitives.all_reduce(count.astype(total.dtype) if jnp.issubdtype(total.dtype, jnp.floating)
                              else count.astype(jnp.float32), "sum", "Strategy.reduce")
    return total / jnp.maximum(n, 1)


def check_even(value: Any) -> None:
    """`reduce(op, v)` without axis combines row by row: replicas' real row counts must agree."""
    from .distributed_values import is_distributed
    from .errors import DistributionValueError

    for v in jax.tree_util.tree_leaves(value, is_leaf=is_distributed):
        if isinstance(v, PerReplicaBatch) and len(set(v._counts)) > 1:
            raise DistributionValueError(
                f"strategy.reduce without axis combines the replicas' values row by row, but their "
                f"real row counts differ ({list(v._counts)}) in this partial batch (TensorFlow raises too)",
                "reduce over the batch axis (axis=0), or reduce per-replica scalars such as losses")


def trim_reduced(value: Any, result: Any) -> Any:
    """`reduce(op, v)` without axis of a padded per-example `v`: drop the padded rows of the
    result (replicas with equal real row counts combine row by row, as in TensorFlow)."""
    from .distributed_values import is_distributed

    def one(v, r):
        if isinstance(v, PerReplicaBatch) and max(v._counts) < v._rows:
            return r[:max(v._counts)]
        return r
    return jax.tree_util.tree_map(one, value, result, is_leaf=is_distributed)


def trim_gathered(value: Any, result: Any, axis: int) -> Any:
    """`gather(v, axis=0)` of padded per-example values: keep each replica's real rows only."""
    from .distributed_values import is_distributed
    import numpy as np

    def one(v, r):
        if not isinstance(v, PerReplicaBatch) or axis % max(len(v._global[1].type.shape), 1) != 0 \
                or min(v._counts) == v._rows:
            return r
        index = np.concatenate([np.arange(i * v._rows, i * v._rows + c) for i, c in enumerate(v._counts)])
        return jnp.asarray(r)[index]
    return jax.tree_util.tree_map(one, value, result, is_leaf=is_distributed)
