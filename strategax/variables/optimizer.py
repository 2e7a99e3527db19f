"""`sx.Optimizer`: any `optax.GradientTransformation`, made strategy-aware.

Its state lives in variables colocated with the parameters (mirrored, created on first use from
the parameters' current values). `apply_gradients` in replica context follows the seed's recipe:
`merge_call`, one `batch_reduce_to(SUM)` of all gradients (bucketed by `options.bytes_per_pack`),
then `extended.update` of each variable with optax's update; in cross-replica context it takes
already-reduced gradients.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterable

import jax
import jax.numpy as jnp

from .. import _context
from ..errors import DistributionValueError
from ..trace.distributed_values import PerReplica, is_distributed
from .enums import VariableAggregation
from .variables import Variable


def _add_update(var, update):
    return var.assign_add(update)


class Optimizer:
    """Wrap `tx` (an optax GradientTransformation); create it in `strategy.scope()`."""

    def __init__(self, tx, name: str = "Optimizer"):
        if not (hasattr(tx, "init") and hasattr(tx, "update")):
            raise DistributionValueError(f"sx.Optimizer needs an optax.GradientTransformation, not {tx!r}",
                                         "pass e.g. optax.adam(1e-3)")
        self._tx, self._name = tx, name
        self._strategy = _context.strategy()
        self.iterations = Variable(0, name=f"{name}/iterations", dtype=jnp.int32, trainable=False,
                                   aggregation=VariableAggregation.ONLY_FIRST_REPLICA)
        self._groups: dict[tuple, tuple[list[Variable], Any]] = {}  # param ids -> (state vars, treedef)
        self._pending: dict[str, Any] = {}  # restored slot values waiting for their slot

    @property
    def tx(self):
        return self._tx

    # --- slots ------------------------------------------------------------------------------
    def _slots(self, variables: list[Variable]) -> tuple[list[Variable], Any]:
        key = tuple(id(v) for v in variables)
        group = self._groups.get(key)
        if group is None:
            index = len(self._groups)
            with jax.ensure_compile_time_eval():
                state = self._tx.init([v._store.eager_read() for v in variables])
            leaves, treedef = jax.tree_util.tree_flatten(state)
            scope = _context.push(self._strategy) if _context.has_strategy() else contextlib.nullcontext()
            with scope:
                slots = [Variable(self._pending.pop(f"slots/{index}/{j}", leaf), trainable=False,
                                  name=f"{self._name}/slot_{index}_{j}")
                         for j, leaf in enumerate(leaves)]
            group = self._groups[key] = (slots, treedef)
        return group

    def variables(self) -> dict[str, Variable]:
        """Every variable of the optimizer, by checkpoint path."""
        out = {"iterations": self.iterations}
        for index, (slots, _) in enumerate(self._groups.values()):
            out.update({f"slots/{index}/{j}": s for j, s in enumerate(slots)})
        return out

    def _restore(self, path: str, value) -> bool:
        """Restore one checkpointed value (a slot not created yet is kept for its creation)."""
        current = self.variables()
        if path in current:
            current[path].assign(value)
        else:
            self._pending[path] = value
        return True

    # --- applying gradients -------------------------------------------------------------------
    def apply_gradients(self, grads_and_vars: Iterable, options=None):
        """Apply gradients: reduced across replicas first when called in replica context."""
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        grads, variables = [g for g, _ in pairs], [v for _, v in pairs]
        entry = _context.current()
        strategy = _context.strategy()
        if _context.in_replica_context() and _context.is_tracing() and _context.has_strategy():
            return entry.replica_context.merge_call(
                self._merge_apply, args=(grads,), kwargs={"variables": variables, "options": options})
        return self._apply(strategy, [self._reduced(g) for g in grads], variables,
                           cross_replica=_context.has_strategy())

    def _merge_apply(self, strategy, grads, variables, options=None):
        reduced = strategy.extended.batch_reduce_to("SUM", list(zip(grads, variables)), options)
        return self._apply(strategy, [r._local if is_distributed(r) else r for r in reduced], variables, True)

    @staticmethod
    def _reduced(g):
        if isinstance(g, PerReplica):
            raise DistributionValueError(
                "apply_gradients in cross-replica context got PerReplica gradients",
                "reduce them first (strategy.reduce / extended.batch_reduce_to), or call "
                "apply_gradients inside strategy.run")
        if is_distributed(g):
            return g._local if g._local is not None else g.values[0]
        return g

    def _apply(self, strategy, grads: list, variables: list[Variable], cross_replica: bool):
        slots, treedef = self._slots(variables)
        state = jax.tree_util.tree_unflatten(treedef, [s.read_value() for s in slots])
        params = [v.read_value() for v in variables]
        updates, new_state = self._tx.update([jnp.asarray(g) for g in grads], state, params)
        for v, u in zip(variables, updates):
            if cross_replica:
                strategy.extended.update(v, _add_update, args=(u,))
            else:
                v.assign_add(u)
        for s, value in zip(slots, jax.tree_util.tree_leaves(new_state)):
            s.assign(value)
        self.iterations.assign_add(1)
        return None
