"""One replica's share of a Keras step: Keras' own `train_step(state, data)` (or `test_step`,
`predict_step`) run under `strategy.run`, with what makes N replicas give one device's numbers.

While a replica step is traced a `StepContext` is active; the hooks `_keras3.py` installs in
Keras consult it:
- the optimizer's `stateless_apply` first combines the replicas' gradients (`combine_grads`):
  each replica's gradient is of its own loss, a mean over its real rows (the `mask-padding`
  pass makes Keras' means count real rows), so the batch's gradient is the sum over replicas
  of `n_i / N` times it (n_i this replica's real rows, N the batch's): the mean over the batch's
  real rows, whatever the split, an empty replica contributing nothing (a full batch, every
  n_i / N = 1/R: the sum divided by R after the all-reduce, `_combine_full`);
- `_update_metrics_variables` (`update_metrics`) updates the metrics from zero on each replica,
  with the padded rows weighted 0 and the loss weighted by the real rows, sums those
  increments across replicas by the variables' `aggregation` and adds them to the state, so
  metrics are those of the whole batch on every replica.
After the step, `finish_state` combines the non-trainable state as TensorFlow's
MirroredStrategy keeps it (see `combine_non_trainable`). Every value handed back is then the
same on every replica, which strategax's locality inference checks (a per-replica result raises).
"""
from __future__ import annotations

import threading

import jax
import jax.numpy as jnp

from .. import _context
from ..distribute.context import get_replica_context
from ..distribute.reduce_op import ReduceOp
from .errors import KerasAdapterError

_local = threading.local()

# Keras losses whose value is a mean over the batch's elements (rows x other axes): combined
# across replicas as n_i / N times each replica's value.
MEAN_REDUCTIONS = ("sum_over_batch_size", "mean")


def active() -> "StepContext | None":
    """The replica step being traced on this thread, or None."""
    return getattr(_local, "ctx", None)


class StepContext:
    """What a traced replica step of `model` knows: its real row count and the batch's."""

    def __init__(self, model, kind: str):
        self.model, self.kind = model, kind
        self.loss_reduction: str | None = None  # set when Keras' compute_loss ran (checked there)
        self.grads_combined = False
        self.metrics_out: list | None = None  # the metric state update_metrics returned
        self.apply_depth = 0  # nesting of stateless_apply (a LossScaleOptimizer's inner one)
        self.prescaled = False  # the loss was weighted by this replica's share before the gradient
        self.global_statistics = False  # the forward all-reduced batch statistics (synchronized BatchNormalization)
        self.data_rows = 1  # the batch's static (padded) row count, set by the step
        count, padded = _context.batch()
        ctx = get_replica_context()
        assert ctx is not None, "a replica step runs inside strategy.run"
        self.replica = ctx
        if count is None:  # one replica, or a batch without padding: every row is real
            self.rows = None
        else:
            self.rows = jnp.asarray(count, jnp.int32)
        self.padded = padded

    def __enter__(self) -> "StepContext":
        if active() is not None:
            raise KerasAdapterError(
                "a Keras step was started inside another Keras step",
                "call model.fit/evaluate/predict outside train_step, test_step and predict_step")
        _local.ctx = self
        return self

    def __exit__(self, *exc) -> None:
        _local.ctx = None

    # --- the rows ------------------------------------------------------------------------
    def real_rows(self, data_rows: int):
        """This replica's real row count as an int32 scalar (traced under padding)."""
        return self.rows if self.rows is not None else jnp.asarray(data_rows, jnp.int32)

    def row_mask(self, data_rows: int):
        """Float mask of this replica's real rows, [rows]."""
        if self.rows is None or data_rows != self.padded:
            return jnp.ones((data_rows,), jnp.float32)
        return (jnp.arange(data_rows) < self.rows).astype(jnp.float32)

    def weight(self, data_rows: int):
        """n_i / N: this replica's share of the batch's real rows (0 for an empty replica)."""
        n = self.real_rows(data_rows)
        total = self.replica.all_reduce(ReduceOp.SUM, n)
        return n.astype(jnp.float32) / jnp.maximum(total, 1).astype(jnp.float32), n

    # --- gradients -----------------------------------------------------------------------
    def loss_share(self):
        """This replica's share n_i / N of a mean loss, for weighting the loss before the gradient
        (a loss-scaled float16 backward then sees one device's magnitudes, so it overflows where
        one device's would, not N times sooner); None for a sum (or an unknown) reduction."""
        reduction = self.loss_reduction or getattr(self.model, "_sx_loss_reduction", None)
        if reduction != "mean":
            return None
        self.prescaled = True
        return self.weight(self.data_rows)[0]

    def combine_grads(self, grads: list, data_rows: int) -> list:
        """The batch's gradient from each replica's: sum over replicas of w_i * g_i."""
        if self.grads_combined:
            raise KerasAdapterError(
                "the optimizer was applied twice in one Keras train_step",
                "apply the optimizer once per step (strategax combines the replicas' gradients there)")
        reduction = self.loss_reduction or getattr(self.model, "_sx_loss_reduction", None)
        if reduction is None:
            raise KerasAdapterError(
                "strategax cannot tell how this model's loss combines the rows of a batch: the "
                "train_step's loss did not come from Keras' compute_loss with compiled losses, so "
                "the replicas' gradients cannot be combined into the batch's",
                "compute the loss with `self.compute_loss(...)` and losses given to "
                "`model.compile(loss=...)`, or say what your loss is: "
                "`sx.keras.set_loss_reduction(model, 'mean')` (a mean over the batch's rows) or "
                "`'sum'` (a sum over them)")
        if self.rows is None:  # a full batch: every w_i = 1/R, every replica has rows
            return self._combine_full(grads, mean=reduction != "sum" and not self.prescaled)
        w, n = self.weight(data_rows)
        if reduction == "sum" or self.prescaled:
            w = jnp.ones((), jnp.float32)
        has_rows = n > 0

        def share(g):
            if g is None:
                return None
            return jnp.where(has_rows, g * w.astype(g.dtype), jnp.zeros((), g.dtype))

        grads = [share(g) for g in grads]
        return self._sum(grads)

    def _combine_full(self, grads: list, mean: bool) -> list:
        """A full batch's gradient: the SUM of the replicas' gradients, divided by R after the
        all-reduce for a mean loss. Each gradient goes to the collective as `jax.grad` made it
        (no scale or select before it), so simplify-collectives can move a weight gradient's
        transpose after the all-reduce, out of its dot (issue 34: XLA:CPU then runs that dot in
        YNNPACK, as in GSPMD's program); the metrics' sums share its bucket."""
        summed = self._sum(grads)
        r = self.replica.num_replicas_in_sync
        if not mean or r == 1:
            return summed
        return [None if g is None else g / jnp.asarray(r, g.dtype) for g in summed]

    def _sum(self, grads: list) -> list:
        """Every present gradient all-reduced (SUM) across the replicas; None stays None."""
        present = [g for g in grads if g is not None]
        summed = iter(self.replica.all_reduce(ReduceOp.SUM, present))
        self.grads_combined = True
        return [None if g is None else next(summed) for g in grads]


def leading_rows(data) -> int:
    """The static row count of the batch (its first leaf's leading axis)."""
    for leaf in jax.tree_util.tree_leaves(data):
        if jnp.ndim(leaf):
            return int(jnp.shape(leaf)[0])
    return 1


def sum_metric_increments(ctx: StepContext, refs: list, increments: list) -> list:
    """Each metric variable's increment summed across replicas (TensorFlow's sync-on-read SUM
    variables read in cross-replica context); other aggregations are refused."""
    for ref in refs:
        if getattr(ref, "aggregation", "sum") != "sum":
            raise KerasAdapterError(
                f"the metric variable {ref.path!r} has aggregation {ref.aggregation!r}; strategax "
                "combines Keras metric variables across replicas by summing them (aggregation 'sum', "
                "what every Keras metric uses)",
                "create the metric's variables with `self.add_variable(..., aggregation='sum')` and "
                "accumulate totals and counts in them")
    return list(ctx.replica.all_reduce(ReduceOp.SUM, list(increments)))


def combine_non_trainable(ctx: StepContext, refs: list, before: list, after: list) -> list:
    """Non-trainable state after a step, as TensorFlow 2.21's MirroredStrategy keeps Keras 3's:
    a variable with aggregation 'none' (BatchNormalization's moving statistics, a seed
    generator's state) takes replica 0's value; 'mean' the mean over replicas, 'sum' their sum,
    'only_first_replica' replica 0's. A value the step left alone is kept as is."""
    out = []
    replica_id = ctx.replica.replica_id_in_sync_group
    for ref, old, new in zip(refs, before, after):
        if new is old:
            out.append(new)
            continue
        agg = getattr(ref, "aggregation", "none")
        if agg == "mean":
            out.append(ctx.replica.all_reduce(ReduceOp.MEAN, new))
        elif agg == "sum":
            out.append(ctx.replica.all_reduce(ReduceOp.SUM, new))
        else:  # "none", "only_first_replica": replica 0's value
            first = jnp.where(replica_id == 0, new, jnp.zeros((), new.dtype))
            out.append(ctx.replica.all_reduce(ReduceOp.SUM, first))
    return out
