"""Loss helpers in the spirit of `tf.nn`, aware of padded partial batches (see
`input.padding`): padded rows count for nothing."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from .distribute.context import get_strategy, has_strategy, in_cross_replica_context
from .errors import DistributionRuntimeError
from .input.padding import batch_mask, mask_rows


def _require_replica_context(name: str) -> None:
    """TensorFlow's rule: inside a strategy's scope, these helpers belong in the replica function."""
    if has_strategy() and in_cross_replica_context():
        raise DistributionRuntimeError(
            f"`{name}` was called in cross-replica context, while it was expected to be called in "
            "replica context", f"call `sx.nn.{name}` inside the function given to `strategy.run`")


def compute_average_loss(per_example_loss, sample_weight=None,
                         global_batch_size: int | None = None) -> jax.Array:
    """This replica's real per-example losses summed and divided by the global batch size
    (TensorFlow 2.21's `tf.nn.compute_average_loss`). Without `global_batch_size` the divisor is
    TensorFlow's: this replica's real row count times the number of replicas (0 for a replica
    without rows), and calling it in cross-replica context raises. Sum the results (or the
    gradients) across replicas."""
    loss = jnp.asarray(per_example_loss)
    if sample_weight is not None:
        loss = loss * jnp.asarray(sample_weight, loss.dtype)
    mask = batch_mask(loss) if loss.ndim else jnp.ones((), bool)
    total = jnp.sum(mask_rows(loss, mask) if loss.ndim else loss)
    if global_batch_size is None:
        _require_replica_context("compute_average_loss")
        rows = jnp.sum(mask).astype(loss.dtype) if loss.ndim else jnp.ones((), loss.dtype)
        divisor = rows * get_strategy().num_replicas_in_sync
    else:
        divisor = jnp.asarray(global_batch_size, loss.dtype)
    return jnp.where(divisor == 0, jnp.zeros_like(total), total / jnp.where(divisor == 0, 1, divisor))


def scale_regularization_loss(regularization_loss) -> jax.Array:
    """The sum of `regularization_loss` divided by the number of replicas, so that summing the
    replicas' losses counts it once (TensorFlow's `tf.nn.scale_regularization_loss`); raises in
    cross-replica context."""
    _require_replica_context("scale_regularization_loss")
    return jnp.sum(jnp.asarray(regularization_loss)) / get_strategy().num_replicas_in_sync


__all__ = ["batch_mask", "compute_average_loss", "scale_regularization_loss"]
