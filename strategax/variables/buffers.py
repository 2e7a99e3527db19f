"""A variable's storage: one global `jax.Array` over its strategy's replica mesh (replicated
for a mirrored variable, one piece per replica for a sync-on-read one), threaded through
compiled programs as a donated input/output, and updated directly in cross-replica code."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from ..backends import ReplicaLayout
from ..ir import Locality, TensorType
from .enums import VariableAggregation


def place(value, sharding) -> jax.Array:
    """`value` on `sharding`; over several processes (a multi-worker job, every process holding
    the same value) each process fills its own shards: no cross-host transfer."""
    if sharding.is_fully_addressable:
        return jax.device_put(value, sharding)
    host = np.asarray(value)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def first_replica_value(mesh, value) -> np.ndarray:
    """Replica 0's copy of `value`, on every process of a multi-worker job: each process
    contributes its own (possibly different) value and all get worker 0's, exactly (a
    selection, not a sum). What a variable created on several workers starts from: TensorFlow
    broadcasts the chief's initial values. Every process must call it, in the same order."""
    host = np.asarray(value)
    layout = ReplicaLayout(mesh, TensorType(host.shape, host.dtype, Locality.PER_REPLICA))
    with jax.ensure_compile_time_eval():  # a variable may be created while a program is traced
        copies = layout.assemble([host] * layout.num_local_replicas)
        first = _aggregator(layout, VariableAggregation.ONLY_FIRST_REPLICA)(copies)
        return np.asarray(first.addressable_data(0))


@dataclass(frozen=True)
class PerCopy:
    """An update that gives replica 0's copy `first` and every other copy `rest`."""

    rest: Any
    first: Any


class VarBuffer:
    """The buffer of one variable, and its layout on the mesh that last used it. Storage kept
    elsewhere (a parameter server's `RemoteBuffer`, a worker's `ShadowBuffer`) subclasses it and
    overrides the hooks below, whose defaults are a plain buffer's."""

    def __init__(self, var, initial: jax.Array):
        self.var = var
        strategy = var._strategy
        self.layout = None if strategy is None else ReplicaLayout(strategy._mesh, var._ir_type())
        with jax.ensure_compile_time_eval():  # a variable may be created while a program is traced
            if self.layout is None:
                self.array = jnp.array(initial, copy=True)
            elif self.layout.per_replica:
                self.array = self.layout.assemble([np.asarray(initial)] * self.layout.num_local_replicas)
            else:
                # a copy first: device_put may alias the source's buffer, and ours is donated
                self.array = place(jnp.array(initial, copy=True), self.layout.sharding)

    # --- compiled programs ---------------------------------------------------------------
    def argument(self, layout: ReplicaLayout) -> jax.Array:
        """The buffer laid out as `layout` wants it (moved only the first time, for a plain variable)."""
        if self.layout is not layout:
            if self.layout is None or self.layout.sharding != layout.sharding:
                self.array = place(self.array, layout.sharding)
            self.layout = layout
        return self.array

    def set(self, array: jax.Array) -> None:
        self.array = array

    # --- hooks: what storage kept elsewhere changes ------------------------------------------
    @property
    def num_copies(self) -> int | None:
        """The copies a sync-on-read variable's value is divided among; None: one per replica."""
        return None

    def traced_update(self, kind: str, value, ctx: str) -> None:
        """Called after an update of the variable is traced (a worker's copy records it too)."""

    def reduce_variable(self) -> tuple | None:
        """How the variable pickles (`__reduce__`'s answer), or None: as usual."""
        return None

    # --- cross-replica (eager) access -------------------------------------------------------
    def components(self) -> tuple:
        if self.layout is None:
            return (self.array,)
        return tuple(self.layout.components(self.array))

    def eager_read(self):
        """Cross-replica value: any copy of a mirrored variable, the aggregate of a sync-on-read one
        (over every worker of a multi-worker job: every process must read it, as in TensorFlow)."""
        comps = self.components()
        if self.layout is None or not self.layout.per_replica:
            return comps[0]
        if not self.array.is_fully_addressable:  # multi-worker: aggregate over every process
            return self.global_value().addressable_shards[0].data
        agg = self.var.aggregation
        if agg is VariableAggregation.ONLY_FIRST_REPLICA:
            return comps[0]
        stacked = np.stack([np.asarray(c) for c in comps])
        total = stacked.sum(0)
        if agg is VariableAggregation.MEAN:
            total = total / len(comps) if np.issubdtype(total.dtype, np.inexact) else total // len(comps)
        return jnp.asarray(total, self.var.dtype)

    def global_value(self) -> jax.Array:
        """The cross-replica value as one array (over every process of a multi-worker job):
        what a checkpoint stores."""
        if self.layout is None or not self.layout.per_replica:
            return self.array
        if self.array.is_fully_addressable:
            return jnp.asarray(self.eager_read())
        combine, array = _aggregator(self.layout, self.var.aggregation), self.array
        return self.var._strategy._across_workers(lambda: combine(array), ("read", self.layout, self.var.aggregation))

    def eager_update(self, kind: str, value) -> None:
        """Apply an update to every copy (the value is already what each copy receives; a
        `PerCopy` gives replica 0's copy a value of its own)."""
        comps = self.components()
        if isinstance(value, PerCopy):
            ids = self.layout.local_replica_ids if self.layout is not None else [0]
            values = [np.asarray(value.first if i == 0 else value.rest) for i in ids]
        else:
            values = [np.asarray(value)] * len(comps)
        new = [_apply(kind, np.asarray(c), v) for c, v in zip(comps, values)]
        if self.layout is None:
            self.array = jnp.asarray(new[0], self.var.dtype)
        elif self.layout.per_replica:
            self.array = self.layout.assemble([np.asarray(x, self.var.dtype) for x in new])
        else:
            self.array = place(np.asarray(new[0], self.var.dtype), self.layout.sharding)


@functools.lru_cache(maxsize=None)
def _aggregator(layout: ReplicaLayout, aggregation: VariableAggregation):
    """A program that combines a sync-on-read buffer's copies over the whole job (every process
    calls it), with `eager_read`'s rule; the result is replicated."""
    n, shape = layout.num_replicas, layout.type.shape

    def combine(array):
        copies = array.reshape((n, *shape))
        if aggregation is VariableAggregation.ONLY_FIRST_REPLICA:
            return copies[0]
        total = copies.sum(0, dtype=copies.dtype)
        if aggregation is VariableAggregation.MEAN:
            return total / n if jnp.issubdtype(total.dtype, jnp.inexact) else total // n
        return total
    return jax.jit(combine, out_shardings=NamedSharding(layout.mesh, PartitionSpec()))


def _apply(kind: str, old: np.ndarray, value: np.ndarray) -> np.ndarray:
    if kind == "assign":
        return value
    return old + value if kind == "assign_add" else old - value


class ShardedBuffer(VarBuffer):
    """A sharded optimizer slot's storage: replica r holds piece r of the flattened value padded
    with zeros to a multiple of N (`collectives.shard`'s cut); eager reads and checkpoints see the
    whole value, eager updates write it whole (cut again)."""

    def __init__(self, var, initial: jax.Array):
        self.var = var
        self.layout = ReplicaLayout(var._strategy._mesh, var._ir_type())
        with jax.ensure_compile_time_eval():
            self.array = self._pieces(np.asarray(initial, var.dtype))

    def _pieces(self, whole: np.ndarray) -> jax.Array:
        n, k = self.layout.num_replicas, self.layout.type.shape[0]
        flat = np.zeros((n * k,), whole.dtype)
        flat[:whole.size] = whole.reshape(-1)
        pieces = flat.reshape(n, k)
        return self.layout.assemble([pieces[i] for i in self.layout.local_replica_ids])

    def global_value(self) -> jax.Array:
        """The whole value, replicated (every process of a multi-worker job must call it)."""
        join, array = _unsharder(self.layout, tuple(self.var.shape)), self.array
        if array.is_fully_addressable:
            return join(array)
        return self.var._strategy._across_workers(lambda: join(array), ("read sharded", self.layout, self.var.shape))

    def eager_read(self):
        return self.global_value().addressable_shards[0].data

    def eager_update(self, kind: str, value) -> None:
        if isinstance(value, PerCopy):
            raise ValueError("internal error: a sharded slot takes one whole value")
        old = np.asarray(self.eager_read())
        self.array = self._pieces(np.asarray(_apply(kind, old, np.asarray(value)), self.var.dtype))


@functools.lru_cache(maxsize=None)
def _unsharder(layout: ReplicaLayout, shape: tuple[int, ...]):
    """A program that puts a sharded slot's pieces back together, replicated."""
    size = int(np.prod(shape, dtype=np.int64))
    return jax.jit(lambda a: a[:size].reshape(shape), out_shardings=NamedSharding(layout.mesh, PartitionSpec()))
