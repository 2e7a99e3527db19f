"""`keras.layers.BatchNormalization(synchronized=True)` under a strategax strategy: the batch's
mean and variance over the REAL rows of the whole global batch, every replica's, as one device
computes them on the whole batch (TensorFlow's synchronized layer all-reduces each replica's
sums; padded rows of a partial batch count for nothing here). No Keras internals: `_keras3.py`
hands this the layer's input, mask and reduction axes."""
from __future__ import annotations

import jax.numpy as jnp

from .. import _context
from ..distribute.reduce_op import ReduceOp
from ..input.padding import batch_mask
from .errors import KerasAdapterError


def replica_context():
    """The replica context of a strategax replica function being traced, else None (outside
    `strategy.run` a layer sees the whole batch: its own statistics are the batch's)."""
    if not (_context.is_tracing() and _context.in_replica_context()):
        return None
    entry = _context.current()
    return None if entry is None else entry.replica_context


def global_moments(replica, layer_name: str, inputs, mask, axes: list[int], epsilon: float):
    """(mean, variance) over `axes` of the real rows of every replica's `inputs` (Keras'
    formulas: with a `mask`, its weighted mean and variance, dividing by the weight + epsilon)."""
    count, padded = _context.batch()
    rows = jnp.shape(inputs)[0]
    if count is not None and rows != padded:
        raise KerasAdapterError(
            f"the synchronized BatchNormalization {layer_name!r} normalizes a value of {rows} rows, "
            f"not the batch's {padded}: strategax cannot tell its real rows from the padded rows "
            "of a partial batch, so it cannot compute the global batch's statistics",
            "apply the synchronized BatchNormalization to values whose first axis is the batch")
    if 0 not in axes:
        raise KerasAdapterError(
            f"the synchronized BatchNormalization {layer_name!r} normalizes along axis 0 (the batch): "
            "its statistics are not over the batch's rows, so there is nothing to synchronize",
            "use synchronized=False (or normalize along another axis)")
    real = batch_mask(inputs).astype(inputs.dtype)
    weights = real.reshape((rows,) + (1,) * (inputs.ndim - 1))
    if mask is not None:
        weights = weights * jnp.expand_dims(jnp.asarray(mask, inputs.dtype), -1)
    weights = jnp.broadcast_to(weights, inputs.shape)
    total, n = replica.all_reduce(ReduceOp.SUM, [jnp.sum(inputs * weights, axes, keepdims=True),
                                                 jnp.sum(weights, axes, keepdims=True)])
    denominator = n + epsilon if mask is not None else n
    mean = total / denominator
    squares = replica.all_reduce(ReduceOp.SUM, jnp.sum(jnp.square(inputs - mean) * weights, axes, keepdims=True))
    variance = squares / denominator
    return jnp.squeeze(mean, axes), jnp.squeeze(variance, axes)
