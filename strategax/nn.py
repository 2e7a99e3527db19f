"""Loss helpers in the spirit of `tf.nn`, aware of padded partial batches (see
`input.padding`): padded rows count for nothing. Plain JAX code does not need them: the
`mask-padding` pass masks padded rows wherever rows are combined."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from .distribute.context import get_replica_context
from .input.padding import batch_mask, mask_rows


def compute_average_loss(per_example_loss, sample_weight=None,
                         global_batch_size: int | None = None) -> jax.Array:
    """Sum of this replica's real per-example losses over the global batch size (TensorFlow's
    `tf.nn.compute_average_loss`); without `global_batch_size`, over the real global row count,
    so a partial batch is averaged exactly. Sum the results (or gradients) across replicas."""
    loss = jnp.asarray(per_example_loss)
    if sample_weight is not None:
        loss = loss * jnp.asarray(sample_weight, loss.dtype)
    mask = batch_mask(loss) if loss.ndim else jnp.ones((), bool)
    total = jnp.sum(mask_rows(loss, mask) if loss.ndim else loss)
    if global_batch_size is not None:
        return total / jnp.asarray(global_batch_size, loss.dtype)
    local = jnp.sum(mask).astype(loss.dtype)
    ctx = get_replica_context()
    count = local if ctx is None else ctx.all_reduce("sum", local)
    return total / jnp.maximum(count, 1)


__all__ = ["batch_mask", "compute_average_loss"]
