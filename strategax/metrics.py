"""`sx.metrics`: Keras' streaming metrics as the custom-training tutorial uses them under a
strategy. Each keeps a `total` and a `count` in sync-on-read variables (SUM): `update_state`
inside `strategy.run` adds this replica's part locally, and `result()` outside reads the sums
across replicas (TensorFlow's own layout: `tf.keras.metrics.Mean` under MirroredStrategy). Padded
rows of a partial batch count for nothing."""
from __future__ import annotations

import jax.numpy as jnp

from .variables import Variable, VariableAggregation, VariableSynchronization


class Metric:
    """A streaming metric: `update_state(...)`, `result()`, `reset_state()`, `variables`."""

    def __init__(self, name: str | None = None, dtype=jnp.float32):
        self.name = name or type(self).__name__.lower()
        self.dtype = jnp.dtype(dtype)
        self.total = self._state("total")
        self.count = self._state("count")

    def _state(self, what: str) -> Variable:
        return Variable(jnp.zeros((), self.dtype), trainable=False, name=f"{self.name}/{what}",
                        synchronization=VariableSynchronization.ON_READ,
                        aggregation=VariableAggregation.SUM)

    @property
    def variables(self) -> list[Variable]:
        return [self.total, self.count]

    def _add(self, values, sample_weight=None) -> None:
        values = jnp.asarray(values, self.dtype)
        weights = jnp.ones_like(values) if sample_weight is None else jnp.broadcast_to(
            jnp.asarray(sample_weight, self.dtype), values.shape)
        self.total.assign_add(jnp.sum(values * weights))
        self.count.assign_add(jnp.sum(weights))

    def result(self):
        """total / count over every replica (0 before any update), as Keras' divide_no_nan."""
        total, count = jnp.asarray(self.total.read_value()), jnp.asarray(self.count.read_value())
        return jnp.where(count == 0, jnp.zeros_like(total), total / jnp.where(count == 0, 1, count))

    def reset_state(self) -> None:
        """Back to no updates (call it between epochs, outside `strategy.run`)."""
        for v in self.variables:
            v.assign(jnp.zeros_like(jnp.asarray(v.read_value())))

    def __repr__(self) -> str:
        return f"<sx.metrics.{type(self).__name__} {self.name!r}>"


class Mean(Metric):
    """The (weighted) mean of every value seen: `tf.keras.metrics.Mean`."""

    def update_state(self, values, sample_weight=None) -> None:
        self._add(values, sample_weight)


class Accuracy(Metric):
    """How often the prediction equals the label: `tf.keras.metrics.Accuracy`."""

    def __init__(self, name: str | None = "accuracy", dtype=jnp.float32):
        super().__init__(name, dtype)

    def update_state(self, y_true, y_pred, sample_weight=None) -> None:
        self._add((jnp.asarray(y_true) == jnp.asarray(y_pred)).astype(self.dtype), sample_weight)


class SparseCategoricalAccuracy(Metric):
    """How often the integer label equals the argmax of the prediction:
    `tf.keras.metrics.SparseCategoricalAccuracy`."""

    def __init__(self, name: str | None = "sparse_categorical_accuracy", dtype=jnp.float32):
        super().__init__(name, dtype)

    def update_state(self, y_true, y_pred, sample_weight=None) -> None:
        y_pred = jnp.asarray(y_pred)
        y_true = jnp.asarray(y_true)
        if y_true.ndim == y_pred.ndim:  # labels of shape [batch, 1]
            y_true = jnp.squeeze(y_true, -1)
        matches = (jnp.argmax(y_pred, axis=-1) == y_true.astype(jnp.int32)).astype(self.dtype)
        self._add(matches, sample_weight)


__all__ = ["Accuracy", "Mean", "Metric", "SparseCategoricalAccuracy"]
