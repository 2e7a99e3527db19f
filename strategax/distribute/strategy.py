"""The Strategy API: `MirroredStrategy`, `OneDeviceStrategy` and their shared base."""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp

from .. import _context
from ..backends import make_mesh
from ..dialects import collectives
from ..errors import DistributionRuntimeError, DistributionTypeError, DistributionValueError
from ..input import padding
from ..input.dataset import DistributedDataset
from ..input.from_function import DatasetsFromFunction
from ..input.numpy_dataset import NumpyDataset
from ..trace import StrategyFunction
from ..trace.cache import LRU
from ..trace.fn_key import function_key, named_parts
from ..trace.retracing import Detector
from ..trace.distributed_values import DistributedValues, Mirrored, PerReplica, check_components, is_distributed, regroup
from . import context
from .devices import resolve_device, resolve_devices
from .extended import StrategyExtended
from .logical_devices import LogicalDevicesMixin
from .reduce_op import ReduceOp
from .replica_context import DefaultReplicaContext, ReplicaContext


class ValueContext:
    """What `experimental_distribute_values_from_function`'s value_fn is told."""

    def __init__(self, replica_id_in_sync_group: int = 0, num_replicas_in_sync: int = 1):
        self.replica_id_in_sync_group = replica_id_in_sync_group
        self.num_replicas_in_sync = num_replicas_in_sync

    def __repr__(self) -> str:
        return (f"ValueContext(replica_id_in_sync_group={self.replica_id_in_sync_group}, "
                f"num_replicas_in_sync={self.num_replicas_in_sync})")


def _tree_map_distributed(fn, tree):
    return jax.tree_util.tree_map(fn, tree, is_leaf=is_distributed)


class Strategy(LogicalDevicesMixin):
    """A compiled distribution strategy over a list of devices, one replica per device."""

    _strategax_key_by_identity = True  # captured by an eager run's function: keyed by identity (fn_key)

    def __init__(self, devices: Sequence[jax.Device]):
        self._devices = list(devices)
        self._mesh = make_mesh(self._devices)
        self._extended = StrategyExtended(self)
        # eager run/reduce/gather: one compiled function per (function, options), LRU-bounded
        # (STRATEGAX_CACHE_SIZE); each keeps its programs per input signature
        self._run_functions = LRU()
        self._reduce_functions = LRU()

    # --- basics -----------------------------------------------------------------------
    @property
    def num_replicas_in_sync(self) -> int:
        return len(self._devices)

    @property
    def _num_local_replicas(self) -> int:
        """The replicas this process feeds and sees (all of them unless a multi-worker job)."""
        return len(self._local_replica_ids)

    @property
    def _local_replica_ids(self) -> list[int]:
        return list(range(self.num_replicas_in_sync))

    def _execute(self, executable, args: list):
        """Run one compiled program on global arrays (a multi-worker strategy bounds and watches it)."""
        return executable(*args)

    _execute._runs_directly = True  # a cached call may call the jax.jit function itself (trace/fast_call.py)

    def _ir_module_attrs(self) -> dict:
        """Extra attributes for the modules this strategy compiles (none by default)."""
        return {}

    @property
    def extended(self) -> StrategyExtended:
        return self._extended

    @property
    def cluster_resolver(self):
        return None

    def __repr__(self) -> str:
        devs = ", ".join(f"{d.platform.upper()}:{d.id}" for d in self._devices)
        return f"{type(self).__name__}([{devs}])"

    @contextlib.contextmanager
    def scope(self):
        """Enter cross-replica context for this strategy (variables created here are distributed)."""
        entry = _context.current()
        if entry is not None and entry.strategy is not self and not entry.is_global:
            raise DistributionRuntimeError(
                f"cannot enter the scope of {self!r} inside the scope of {entry.strategy!r}",
                "use one strategy at a time: leave the other scope first")
        if entry is not None and entry.replica_context is not None and entry.strategy is self:
            yield self  # scope() inside the replica function: stays in replica context, as in TF
            return
        with _context.push(self):
            yield self

    def function(self, fn: Callable | None = None, *, name: str | None = None, reduce_retracing: bool = False):
        """Compile a whole Python step (run, reduce and all) into one program (like tf.function);
        `reduce_retracing=True` traces Python ints, floats and complexes as values (one program
        for a learning-rate schedule) instead of baking each value into its own program."""
        if fn is None:
            return lambda f: StrategyFunction(self, f, name, reduce_retracing=reduce_retracing)
        return StrategyFunction(self, fn, name, reduce_retracing=reduce_retracing)

    def _eager(self, key, make_fn: Callable[[], Callable], name: str) -> StrategyFunction:
        """The compiled function of an eager reduce/gather/batch_reduce_to (cached by `key`)."""
        return self._reduce_functions.get_or_make(
            key, lambda: StrategyFunction(self, make_fn(), name=name, detector=Detector()))

    # --- run ---------------------------------------------------------------------------
    def run(self, fn: Callable, args: Sequence = (), kwargs: dict | None = None, options=None):
        """Run `fn` on every replica; per-replica arguments give replica i its component i."""
        kwargs = kwargs or {}
        if not isinstance(args, (tuple, list)):
            raise DistributionTypeError(f"`args` must be a tuple or list, not {type(args).__name__}",
                                        "wrap a single argument as args=(x,)")
        entry = _context.current()
        if entry is not None and entry.replica_context is not None:
            raise DistributionRuntimeError("strategy.run was called inside a replica function",
                                           "call strategy.run from cross-replica code only")
        if not _context.is_tracing():  # a function of the same code, defaults and captures: one runner
            runner = self._run_functions.get_or_make(function_key(fn), lambda: StrategyFunction(
                self, lambda *a, **k: self.run(fn, a, k), name=getattr(fn, "__name__", "run"),
                origin=fn, parts=named_parts(fn)))
            return runner(*args, **kwargs)
        local_args, local_kwargs = _tree_map_distributed(self._to_local, (tuple(args), kwargs))
        with _context.push(self, ReplicaContext(self)):
            result = fn(*local_args, **local_kwargs)
        return _tree_map_distributed(
            lambda x: x if is_distributed(x) else PerReplica._traced(jnp.asarray(x)), result)

    def _to_local(self, x):
        if not is_distributed(x):
            return x
        if x._local is None:
            raise DistributionValueError(
                f"a {type(x).__name__} built outside this function was captured by it",
                "pass distributed values to the function as arguments")
        return x._local

    def _finalize_outputs(self, tree):
        """With one replica TensorFlow hands back plain values, not distributed ones."""
        if self.num_replicas_in_sync == 1:
            return _tree_map_distributed(lambda x: x.values[0] if is_distributed(x) else x, tree)
        return tree

    def _default_replica_context(self):
        return DefaultReplicaContext(self)

    # --- reduce, gather, local results --------------------------------------------------------
    def reduce(self, reduce_op, value: Any, axis: int | None = None):
        """Combine a distributed value (or a pytree of them) across replicas into one value."""
        context.require_cross_replica("strategy.reduce")
        op = ReduceOp.parse(reduce_op)
        leaves = jax.tree_util.tree_leaves(value, is_leaf=is_distributed)
        n = self.num_replicas_in_sync
        if not any(is_distributed(x) for x in leaves):
            return self._reduce_plain(op, value, axis)
        for x in leaves:
            if is_distributed(x) and x._local is None:
                check_components(x, n, self._num_local_replicas)
        if not _context.is_tracing():
            fn = self._eager(("reduce", op, axis), lambda: lambda value: self.reduce(op, value, axis), "reduce")
            if axis is None:
                padding.check_even(value)
                return padding.trim_reduced(value, fn(value))
            return fn(value)
        return _tree_map_distributed(lambda x: self._reduce_traced(op, x, axis), value)

    def _reduce_plain(self, op: ReduceOp, value: Any, axis: int | None):
        """TensorFlow 2.21 treats a plain value as the same on every replica: MEAN returns it
        (its mean over `axis`), SUM over `axis` is N times its sum, SUM without axis raises."""
        n = self.num_replicas_in_sync
        if op is ReduceOp.SUM and axis is None and n > 1:
            raise DistributionValueError(
                f"strategy.reduce(SUM, ...) got a value that is not distributed, on {n} replicas "
                "(TensorFlow raises here too: the sum is ambiguous)",
                "pass the PerReplica value that strategy.run returned, give an axis, or use MEAN")
        if axis is None:
            return value
        if op is ReduceOp.MEAN:
            return jax.tree_util.tree_map(lambda x: jnp.mean(jnp.asarray(x), axis=axis), value)
        return jax.tree_util.tree_map(lambda x: n * jnp.sum(jnp.asarray(x), axis=axis), value)

    def _reduce_traced(self, op: ReduceOp, x, axis):
        local = x._local if is_distributed(x) else jnp.asarray(x)
        if axis is None:
            return collectives.all_reduce(local, op.ir_name, "Strategy.reduce")
        axis = axis % max(local.ndim, 1)
        if axis == 0 and local.ndim:  # counts only real rows where local is per-example
            return padding.reduce_rows(op.ir_name, local, axis)
        total = collectives.all_reduce(jnp.sum(local, axis=axis), "sum", "Strategy.reduce")
        if op is ReduceOp.MEAN:
            total = total / (local.shape[axis] * self.num_replicas_in_sync)
        return total

    def gather(self, value: Any, axis: int):
        """Concatenate the replicas' values along `axis` (a pytree of distributed values)."""
        context.require_cross_replica("strategy.gather")
        if not _context.is_tracing():
            if not any(is_distributed(x) for x in jax.tree_util.tree_leaves(value, is_leaf=is_distributed)):
                return value
            gathered = self._eager(("gather", axis), lambda: lambda value: self.gather(value, axis), "gather")(value)
            return padding.trim_gathered(value, gathered, axis)
        n = self.num_replicas_in_sync
        return _tree_map_distributed(
            lambda x: collectives.all_gather(x._local, axis, n, "Strategy.gather") if is_distributed(x) else x,
            value)

    def experimental_local_results(self, value: Any) -> tuple:
        """One value per local replica (a 1-tuple for a plain value)."""
        if is_distributed(value):
            if value._local is not None:
                return self._local_results_traced(value)
            return tuple(value.values)
        leaves, treedef = jax.tree_util.tree_flatten(value, is_leaf=is_distributed)
        if not any(is_distributed(x) for x in leaves):
            return (value,)
        per_leaf = [self.experimental_local_results(x) if is_distributed(x) else (x,) * self.num_replicas_in_sync
                    for x in leaves]
        return tuple(jax.tree_util.tree_unflatten(treedef, [p[i] for p in per_leaf])
                     for i in range(self.num_replicas_in_sync))

    def _local_results_traced(self, value: DistributedValues) -> tuple:
        n = self.num_replicas_in_sync
        if isinstance(value, Mirrored):
            return (value._local,) * n
        gathered = collectives.all_gather(value._local[None], 0, n, "experimental_local_results")
        return tuple(gathered[i] for i in range(n))

    # --- distributing values --------------------------------------------------------------
    def experimental_distribute_values_from_function(self, value_fn: Callable):
        """Call value_fn(ValueContext(i, N)) for each replica i; replica i gets its result."""
        n = self.num_replicas_in_sync
        if _context.is_tracing():
            values = [value_fn(ValueContext(i, n)) for i in range(n)]
            grouped = regroup(values, PerReplica, "value_fn result")
            index = collectives.replica_id()
            return _tree_map_distributed(
                lambda v: PerReplica._traced(jnp.stack([jnp.asarray(c) for c in v.values])[index]), grouped)
        per_replica = []
        for i, device in enumerate(self._devices):
            v = value_fn(ValueContext(i, n))
            per_replica.append(jax.tree_util.tree_map(lambda x: jax.device_put(x, device), v))
        return self._finalize_outputs(regroup(per_replica, PerReplica, "value_fn result"))

    def experimental_distribute_dataset(self, dataset, options=None):
        """Split each global batch of `dataset` across the replicas (see `input.dataset`)."""
        return DistributedDataset(self, dataset, options)

    def distribute_datasets_from_function(self, dataset_fn: Callable, options=None):
        """`dataset_fn(InputContext)` per input pipeline yields per-replica batches, dealt in turn."""
        return DatasetsFromFunction(self, dataset_fn, options)

    def experimental_distribute_datasets_from_function(self, dataset_fn: Callable, options=None):
        """The older name of `distribute_datasets_from_function`."""
        return self.distribute_datasets_from_function(dataset_fn, options)

    def experimental_make_numpy_dataset(self, numpy_input):
        """A dataset of the rows of `numpy_input` (an array or pytree of arrays); `.batch(n)` it."""
        return NumpyDataset(numpy_input)


class MirroredStrategy(Strategy):
    """Synchronous data parallelism: one replica per device, variables mirrored on all."""

    def __init__(self, devices: Sequence[Any] | None = None, cross_device_ops=None):
        super().__init__(resolve_devices(devices))
        self._cross_device_ops = cross_device_ops


class OneDeviceStrategy(Strategy):
    """Everything on one device; `run` returns plain values."""

    def __init__(self, device: Any):
        super().__init__([resolve_device(device)])
