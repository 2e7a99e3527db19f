"""`sx.Optimizer`: any `optax.GradientTransformation`, made strategy-aware.

Its state lives in variables colocated with the parameters (mirrored, created on first use from
the parameters' current values). `apply_gradients` in replica context follows the seed's recipe:
`merge_call`, one `batch_reduce_to(SUM)` of all gradients (bucketed by `options.bytes_per_pack`),
then `extended.update` of each variable with optax's update; in cross-replica context it takes
already-reduced gradients. With `loss_scale` it scales the loss for float16 as TensorFlow's
`LossScaleOptimizer` (`loss_scale.py`): the check for inf/NaN runs on the all-reduced gradients,
so an overflow on any replica skips the step on every replica.

With `shard_state=True` under a strategy of N > 1 replicas (ZeRO stage 1/2) every slot shaped
like its parameter is a `ShardedSlotVariable` (1/N per replica) and a compiled step takes each
replica's piece of the reduced gradient and of the parameter (`sx.shard`), applies optax to
the pieces, and `sx.all_gather`s the new parameter values; the `shard-optimizer-state` pass
then turns `sx.shard(sx.all_reduce(g))` into `sx.reduce_scatter(g)`. The update must act
element by element (checked on optax's jaxpr when the slots are made: `slots.check_elementwise`).
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterable

import jax
import jax.numpy as jnp
import numpy as np

from .. import _context
from .._markers import is_variable
from ..dialects import collectives
from ..errors import DistributionTypeError, DistributionValueError, check_type
from ..trace.distributed_values import PerReplica, is_distributed
from . import loss_scale as loss_scales
from . import slots
from .enums import VariableAggregation
from .sharded import ShardedVariable
from .sharded_slots import ShardedSlotVariable
from .slots import Params, StatePath
from .variables import Variable


def _add_update(var, update):
    return var.assign_add(update)


def _assign(var, value):
    return var.assign(value)


def _num_shards(strategy, name: str, shard_state: bool) -> int:
    """How many pieces each slot is cut in: the replica count, or 1 (not sharded)."""
    n = strategy.num_replicas_in_sync if strategy is not None and _context.has_strategy() else 1
    if not shard_state or n <= 1:
        return 1  # OneDeviceStrategy and the default strategy: nothing to split
    if not getattr(strategy, "_shards_optimizer_state", False):
        raise DistributionValueError(
            f"optimizer {name!r}: shard_state=True under {type(strategy).__name__}, which keeps "
            "variables its own way", "use MirroredStrategy, MultiWorkerMirroredStrategy or TPUStrategy, "
            "or shard_state=False")
    return n


def _unshard(grads: list, variables: list) -> tuple[list, list]:
    """A sharded variable's gradient split by rows, one (piece, shard) pair per shard."""
    out_g, out_v = [], []
    for g, v in zip(grads, variables):
        if isinstance(v, ShardedVariable):
            out_g.extend(v.split(g))
            out_v.extend(v.variables)
        else:
            out_g.append(g)
            out_v.append(v)
    return out_g, out_v


def _array(value, what: str, fix: str):
    """`value` as an array (a traced one inside a trace); anything else is a located TypeError."""
    try:
        return jnp.asarray(value)
    except (TypeError, ValueError):
        raise DistributionTypeError(f"{what} must be an array, not {type(value).__name__} {value!r:.60}",
                                    fix) from None


class Optimizer:
    """Wrap `tx` (an optax GradientTransformation); create it in `strategy.scope()`.
    `loss_scale="dynamic"` (or a fixed number) scales the loss for float16 as TensorFlow's
    `LossScaleOptimizer`. `shard_state=True` holds each slot 1/N per replica (ZeRO 1/2)."""

    def __init__(self, tx, name: str = "Optimizer", loss_scale=None, shard_state: bool = False):
        if not (hasattr(tx, "init") and hasattr(tx, "update")):
            raise DistributionValueError(f"sx.Optimizer needs an optax.GradientTransformation, not {tx!r}",
                                         "pass e.g. optax.adam(1e-3)")
        check_type(shard_state, bool, "shard_state", "pass shard_state=True or False")
        self._tx, self._name = tx, name
        self._strategy = _context.strategy()
        self._shard_state = shard_state
        self._num_shards = _num_shards(self._strategy, name, shard_state)
        self.iterations = Variable(0, name=f"{name}/iterations", dtype=jnp.int32, trainable=False,
                                   aggregation=VariableAggregation.ONLY_FIRST_REPLICA)
        self._loss_scale = loss_scales.make(loss_scale, name)
        for var in self.non_slot_variables().values():
            var._optimizer_state = True  # counted as optimizer state in f.stats().memory
        self._groups: dict[frozenset, SlotGroup] = {}  # the ids of a group's variables -> its slots
        self._pending: dict[int, tuple[Variable, dict]] = {}  # restored slots waiting for their group

    def __reduce_ex__(self, protocol):
        """A strategy whose steps run in other processes says how its optimizers travel there."""
        reduce = getattr(self._strategy, "_reduce_optimizer", None)
        return reduce(self) if reduce is not None else super().__reduce_ex__(protocol)

    @property
    def tx(self):
        return self._tx

    @property
    def name(self) -> str:
        return self._name

    @property
    def shard_state(self) -> bool:
        """Whether slots are held 1/N per replica (False where N is 1: nothing to split)."""
        return self._num_shards > 1

    def non_slot_variables(self) -> dict[tuple[str, ...], Variable]:
        """The optimizer's own variables by checkpoint path: `iterations`, and with a dynamic
        loss scale `loss_scale/current_loss_scale` and `loss_scale/good_steps` (TF's names)."""
        scale = self._loss_scale.variables() if self._loss_scale is not None else {}
        return {("iterations",): self.iterations, **scale}

    # --- loss scaling (TensorFlow's LossScaleOptimizer) ----------------------------------------
    @property
    def dynamic(self) -> bool:
        """Whether the loss scale changes (loss_scale="dynamic")."""
        return isinstance(self._loss_scale, loss_scales.DynamicLossScale)

    @property
    def loss_scale(self):
        """The current loss scale (float32), or None without loss scaling."""
        return None if self._loss_scale is None else self._loss_scale.value()

    @property
    def dynamic_counter(self) -> Variable | None:
        """The good steps since the scale last changed (a variable); None unless dynamic."""
        scale = self._loss_scale
        return scale.good_steps if isinstance(scale, loss_scales.DynamicLossScale) else None

    @property
    def initial_scale(self) -> float | None:
        return None if self._loss_scale is None else self._loss_scale.initial_scale

    @property
    def dynamic_growth_steps(self) -> int | None:
        scale = self._loss_scale
        return scale.growth_steps if isinstance(scale, loss_scales.DynamicLossScale) else None

    def _scale(self, method: str):
        if self._loss_scale is None:
            raise DistributionValueError(
                f"optimizer {self._name!r} has no loss scale: {method} needs one",
                "create it with sx.Optimizer(tx, loss_scale=\"dynamic\") (or a fixed number)")
        return self._loss_scale.value()

    def get_scaled_loss(self, loss):
        """`loss` times the loss scale, in the loss's dtype; a callable gives a callable."""
        if callable(loss):
            return lambda: self.get_scaled_loss(loss())
        scale = self._scale("get_scaled_loss")
        loss = _array(loss, "get_scaled_loss's loss", "pass the loss (an array or scalar) or a function returning it")
        return loss * scale.astype(loss.dtype)

    def get_unscaled_gradients(self, grads):
        """Each gradient times 1 / the loss scale (in its dtype); None stays None. Takes a list as
        TensorFlow's, or any pytree of gradients (what `jax.grad` returns)."""
        reciprocal = 1.0 / self._scale("get_unscaled_gradients")

        def unscale(g):
            g = _array(g, "a gradient given to get_unscaled_gradients",
                       "pass a list (or pytree) of gradient arrays, None where there is none")
            return g * reciprocal.astype(g.dtype)
        unscaled = jax.tree_util.tree_map(unscale, grads)
        return list(unscaled) if isinstance(grads, tuple) else unscaled

    # --- slots ------------------------------------------------------------------------------
    def _slots(self, variables: list[Variable]) -> SlotGroup:
        """The slot group of exactly these variables (created on first use, in this order)."""
        key = frozenset(id(v) for v in variables)
        group = self._groups.get(key)
        if group is None:
            taken = [v.name for v in variables if self.has_slots(v)]
            if taken:
                raise DistributionValueError(
                    f"optimizer {self._name!r} already keeps state for {', '.join(taken)} from an "
                    "apply_gradients call with a different set of variables (optax state is per call group)",
                    "apply gradients to the same set of variables every time, or use one optimizer per set")
            group = self._groups[key] = SlotGroup(self, list(variables))
        return group

    def slot_variables(self) -> list[tuple[Variable, StatePath, Variable]]:
        """(variable, optax state path, slot) for every slot; a group-wide leaf (Adam's
        `count`) is listed under each variable of its group."""
        return [entry for group in self._groups.values() for entry in group.entries()]

    def slot_spec(self, variable: Variable) -> dict[StatePath, jax.ShapeDtypeStruct]:
        """The slots `variable` gets (from optax's init on it alone), by state path."""
        return slots.slot_spec(self._tx, variable.shape, variable.dtype)

    def has_slots(self, variable: Variable) -> bool:
        return any(id(variable) in k for k in self._groups)

    def defer_slots(self, variable: Variable, values: dict[StatePath, Any]) -> None:
        """Restored slot values for a variable whose slots do not exist yet: used when they are."""
        self._pending[id(variable)] = (variable, dict(values))

    # --- applying gradients -------------------------------------------------------------------
    def apply_gradients(self, grads_and_vars: Iterable, options=None):
        """Apply gradients: reduced across replicas first when called in replica context."""
        try:
            pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        except (TypeError, ValueError):
            raise DistributionTypeError(
                f"apply_gradients takes (gradient, variable) pairs, not {grads_and_vars!r:.60}",
                "pass zip(grads, variables) or [(grad, var), ...]") from None
        for _, v in pairs:
            if not is_variable(v):
                raise DistributionTypeError(f"apply_gradients got a {type(v).__name__} where a variable goes",
                                            "pass (gradient, variable) pairs with sx.Variable objects")
        grads, variables = [g for g, _ in pairs], [v for _, v in pairs]
        entry = _context.current()
        strategy = _context.strategy()
        replica = entry.replica_context if entry is not None else None  # None: not in replica context
        if replica is not None and _context.is_tracing() and _context.has_strategy():
            grads, variables = _unshard(grads, variables)
            return replica._merge_anywhere(
                self._merge_apply, args=(grads,), kwargs={"variables": variables, "options": options})
        grads, variables = _unshard([self._reduced(g) for g in grads], variables)
        return self._apply(strategy, grads, variables, cross_replica=_context.has_strategy())

    def _merge_apply(self, strategy, grads, variables, options=None):
        reduced = strategy.extended.batch_reduce_to("SUM", list(zip(grads, variables)), options)
        return self._apply(strategy, [r.tracer if is_distributed(r) else r for r in reduced], variables, True)

    @staticmethod
    def _reduced(g):
        if isinstance(g, PerReplica):
            raise DistributionValueError(
                "apply_gradients in cross-replica context got PerReplica gradients",
                "reduce them first (strategy.reduce / extended.batch_reduce_to), or call "
                "apply_gradients inside strategy.run")
        if is_distributed(g):
            return g.tracer if g.tracer is not None else g.values[0]
        return g

    def _apply(self, strategy, grads: list, variables: list[Variable], cross_replica: bool):
        group = self._slots(variables)
        order = {id(v): i for i, v in enumerate(variables)}
        grads = [grads[order[id(v)]] for v in group.variables]  # the group's own order
        if group.sharded and _context.is_tracing() and _context.session() is not None:
            return self._apply_sharded(strategy, grads, group, cross_replica)
        state = jax.tree_util.tree_unflatten(group.treedef, [s.read_value() for s in group.slots])
        params = Params([v.read_value() for v in group.variables])
        updates, new_state = self._tx.update(Params([jnp.asarray(g) for g in grads]), state, params)
        scale = self._loss_scale
        if isinstance(scale, loss_scales.DynamicLossScale):  # a non-finite gradient skips the step
            finite = loss_scales.all_finite([jnp.asarray(g) for g in grads])
            updates = [jnp.where(finite, u, jnp.zeros_like(u)) for u in updates]
            new_state = jax.tree_util.tree_map(lambda new, old: jnp.where(finite, new, old), new_state, state)
            scale.update(finite)
        for v, u in zip(group.variables, updates):
            if cross_replica:
                strategy.extended.update(v, _add_update, args=(u,))
            else:
                v.assign_add(u)
        for s, value in zip(group.slots, jax.tree_util.tree_leaves(new_state)):
            s.assign(value)
        self.iterations.assign_add(1)
        return None

    def _apply_sharded(self, strategy, grads: list, group: "SlotGroup", cross_replica: bool):
        """The traced step on pieces: each replica updates 1/N of every slot and parameter and
        the new parameter values are gathered whole (see the module docstring)."""
        n = self._num_shards

        def piece(x, v: Variable, what: str):
            return collectives.shard(jnp.asarray(x), n, f"sx.Optimizer(shard_state=True): {what} of {v.name}",
                                     serves=v.name)
        g_pieces = [piece(g, v, "gradient") for g, v in zip(grads, group.variables)]
        p_pieces = [piece(v.read_value(), v, "value") for v in group.variables]
        leaves = [s.read_piece() if isinstance(s, ShardedSlotVariable) else s.read_value() for s in group.slots]
        state = jax.tree_util.tree_unflatten(group.treedef, leaves)
        updates, new_state = self._tx.update(Params(g_pieces), state, Params(p_pieces))
        scale = self._loss_scale
        if isinstance(scale, loss_scales.DynamicLossScale):  # a non-finite piece anywhere skips every shard
            local = loss_scales.all_finite(g_pieces).astype(jnp.int32)
            finite = collectives.all_reduce(local, "min", "sx.Optimizer(shard_state=True): all gradients finite") > 0
            updates = [jnp.where(finite, u, jnp.zeros_like(u)) for u in updates]
            new_state = jax.tree_util.tree_map(lambda new, old: jnp.where(finite, new, old), new_state, state)
            scale.update(finite)
        for v, p, u in zip(group.variables, p_pieces, updates):
            new = (p + jnp.asarray(u).astype(v.dtype)).astype(v.dtype)
            whole = collectives.all_gather(new, 0, n, f"sx.Optimizer(shard_state=True): new value of {v.name}")
            value = collectives.unshard(whole, tuple(v.shape))
            if cross_replica:
                strategy.extended.update(v, _assign, args=(value,))
            else:
                v.assign(value)
        for s, value in zip(group.slots, jax.tree_util.tree_leaves(new_state)):
            if isinstance(s, ShardedSlotVariable):
                s.assign_piece(value)
            else:
                s.assign(value)
        self.iterations.assign_add(1)
        return None


class SlotGroup:
    """The optax state of one set of variables, one slot variable per state leaf."""

    def __init__(self, optimizer: Optimizer, variables: list[Variable]):
        self.variables = variables
        with jax.ensure_compile_time_eval():
            state = optimizer.tx.init(Params([v._store.eager_read() for v in variables]))
        self.treedef = jax.tree_util.tree_structure(state)
        self.leaves = slots.state_leaves(state)  # (owner index or None, state path, initial value)
        pending = [optimizer._pending.pop(id(v), (v, {}))[1] for v in variables]
        scope = _context.push(optimizer._strategy) if _context.has_strategy() else contextlib.nullcontext()
        n = optimizer._num_shards
        # a slot shaped like its parameter is split (Adam's mu and nu); others (a count) are not
        split = [n > 1 and owner is not None and tuple(np.shape(leaf)) == tuple(variables[owner].shape)
                 and np.size(leaf) > 0 for owner, _, leaf in self.leaves]
        self.sharded = any(split)
        if self.sharded:
            self._check_elementwise(optimizer, split)
        with scope:
            self.slots = [self._slot(optimizer, pending, owner, path, leaf, s)
                          for (owner, path, leaf), s in zip(self.leaves, split)]
        for slot in self.slots:
            slot._optimizer_state = True  # counted as optimizer state in f.stats().memory

    @classmethod
    def adopt(cls, optimizer: Optimizer, variables: list[Variable], slot_variables: list[Variable]) -> "SlotGroup":
        """The group of slot variables that exist already (a parameter-server job's, made by a worker)."""
        group = cls.__new__(cls)
        group.variables, group.slots = list(variables), list(slot_variables)
        group.sharded = False  # a parameter-server job's slots are never split
        for slot in group.slots:
            slot._optimizer_state = True  # counted as optimizer state in f.stats().memory
        state = jax.eval_shape(optimizer.tx.init, Params([jax.ShapeDtypeStruct(v.shape, v.dtype) for v in variables]))
        group.treedef = jax.tree_util.tree_structure(state)
        group.leaves = slots.state_leaves(state)
        return group

    def _slot(self, optimizer: Optimizer, pending: list[dict], owner, path: StatePath, leaf, split: bool):
        initial = self._initial(optimizer.name, pending, owner, path, leaf)
        name = f"{optimizer.name}/{self._label(owner)}/{'/'.join(path)}"
        if split:
            return ShardedSlotVariable(initial, name=name, serves=self.variables[owner].name,
                                       num_replicas=optimizer._num_shards)
        return Variable(initial, trainable=False, name=name)

    def _check_elementwise(self, optimizer: Optimizer, split: list[bool]) -> None:
        """Raise unless optax's update on pieces gives the pieces of its update (slots.check_elementwise)."""
        n = optimizer._num_shards

        def piece(shape, dtype):
            return jax.ShapeDtypeStruct((collectives.shard_size(int(np.prod(shape, dtype=np.int64)), n),), dtype)
        leaves = [piece(np.shape(leaf), leaf.dtype) if s else jax.ShapeDtypeStruct(np.shape(leaf), leaf.dtype)
                  for (_, _, leaf), s in zip(self.leaves, split)]
        state = jax.tree_util.tree_unflatten(self.treedef, leaves)
        pieces = [piece(v.shape, v.dtype) for v in self.variables]
        slots.check_elementwise(optimizer.name, optimizer.tx, pieces, state, pieces, split)

    def _label(self, owner: int | None) -> str:
        return "group" if owner is None else self.variables[owner].name

    @staticmethod
    def _initial(name: str, pending: list[dict], owner: int | None, path: StatePath, leaf):
        if owner is not None:
            return pending[owner].get(path, leaf)
        restored = [p[path] for p in pending if path in p]
        return slots.group_value(name, path, restored) if restored else leaf

    def entries(self) -> list[tuple[Variable, StatePath, Variable]]:
        out = []
        for (owner, path, _), slot in zip(self.leaves, self.slots):
            owners = self.variables if owner is None else [self.variables[owner]]
            out.extend((v, path, slot) for v in owners)
        return out
