"""The Strategy API: `MirroredStrategy`, `OneDeviceStrategy` and their shared base."""
from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import core as jax_core

from .. import _context
from .._markers import is_variable
from ..backends import make_mesh
from ..dialects import collectives
from ..errors import (DistributionRuntimeError, DistributionTypeError, DistributionValueError, check_callable,
                      check_int, check_mapping, check_type)
from ..input.dataset import DistributedDataset
from ..input.from_function import DatasetsFromFunction
from ..input.numpy_dataset import Dataset
from ..input.options import InputOptions
from ..trace import StrategyFunction
from ..trace.signature import check_input_signature, result_array
from ..trace.cache import LRU
from ..trace.fn_key import function_key
from ..trace.distributed_values import PerReplica, is_distributed, local_value, regroup
from . import context, cross_replica
from .devices import resolve_device, resolve_devices
from .extended import StrategyExtended
from .logical_devices import LogicalDevicesMixin
from .options import CommunicationOptions
from .reduce_op import ReduceOp
from .replica_context import DefaultReplicaContext, ReplicaContext


class ValueContext:
    """What `experimental_distribute_values_from_function`'s value_fn is told."""

    def __init__(self, replica_id_in_sync_group: int = 0, num_replicas_in_sync: int = 1):
        check_int(num_replicas_in_sync, "num_replicas_in_sync", minimum=1)
        check_int(replica_id_in_sync_group, "replica_id_in_sync_group", minimum=0)
        if replica_id_in_sync_group >= num_replicas_in_sync:
            raise DistributionValueError(
                f"replica_id_in_sync_group {replica_id_in_sync_group} is not below num_replicas_in_sync "
                f"{num_replicas_in_sync}", "pass a replica id in 0..num_replicas_in_sync-1")
        self.replica_id_in_sync_group = replica_id_in_sync_group
        self.num_replicas_in_sync = num_replicas_in_sync

    def __repr__(self) -> str:
        return (f"ValueContext(replica_id_in_sync_group={self.replica_id_in_sync_group}, "
                f"num_replicas_in_sync={self.num_replicas_in_sync})")


_VALUE_TYPES = (jax.Array, jax_core.Tracer, np.ndarray, np.generic, int, float, complex, bool)


def check_values(value: Any, api: str) -> None:
    """Every leaf of `value` is an array, a number, a distributed value or a variable."""
    for x in jax.tree_util.tree_leaves(value, is_leaf=is_distributed):
        if not (is_distributed(x) or is_variable(x) or isinstance(x, _VALUE_TYPES)):
            raise DistributionTypeError(
                f"{api} got a {type(x).__name__} ({x!r:.60}) where it takes arrays, numbers or "
                "distributed values", "pass arrays (or pytrees of them), e.g. what strategy.run returned")


def _check_run_options(options) -> None:
    if options is not None and type(options).__name__ != "RunOptions":
        raise DistributionTypeError(
            f"strategy.run's options must be None or a RunOptions, not {type(options).__name__}",
            "leave options out (strategax compiles every run; TensorFlow's RunOptions are accepted and ignored)")


def _check_input_options(options) -> None:
    check_type(options, InputOptions, "options", "pass sx.InputOptions(...), or leave options out",
               allow_none=True)


def _tree_map_distributed(fn, tree):
    return jax.tree_util.tree_map(fn, tree, is_leaf=is_distributed)


class StrategyScope:
    """What `strategy.scope()` returns: a context manager that may be entered again after it
    exits (TensorFlow 2.21 fails part-way through a second entry; see docs/porting.md)."""

    def __init__(self, strategy):
        self._strategy = strategy
        self._entered: list[bool] = []  # per active entry: whether it pushed a context

    def __enter__(self):
        strategy = self._strategy
        entry = _context.current()
        if entry is not None and entry.strategy is not strategy and not entry.is_global:
            raise DistributionRuntimeError(
                f"cannot enter the scope of {strategy!r} inside the scope of {entry.strategy!r}",
                "use one strategy at a time: leave the other scope first")
        # scope() inside the replica function stays in replica context, as in TensorFlow
        pushed = not (entry is not None and entry.replica_context is not None and entry.strategy is strategy)
        if pushed:
            _context.enter(strategy)
        self._entered.append(pushed)
        return strategy

    def __exit__(self, *exc) -> None:
        if self._entered.pop():
            _context.leave(self._strategy)


class Strategy(LogicalDevicesMixin):
    """A compiled distribution strategy over a list of devices, one replica per device."""

    _strategax_key_by_identity = True  # captured by an eager run's function: keyed by identity (fn_key)
    _communication_options = CommunicationOptions()  # the collectives' defaults (communication_options=)

    def __init__(self, devices: Sequence[jax.Device]):  # pyright: ignore[reportInvalidTypeForm]  jaxlib ships no stub for Device
        self._devices = list(devices)
        self._mesh = make_mesh(self._devices)
        self._extended = StrategyExtended(self)
        # every eager API call's compiled function (cross_replica.eager_function), LRU-bounded
        # (STRATEGAX_CACHE_SIZE); each keeps its programs per input signature
        self._eager_functions = LRU()

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

    # Whether `_execute` is the plain call above, so a cached call may call the jax.jit function
    # itself (trace/fast_call.py); a strategy that bounds or watches its programs says False.
    _executes_directly: bool = True

    def _across_workers(self, fn: Callable, key) -> Any:
        """Run `fn`, a program every worker runs together outside a compiled step (a multi-worker
        strategy bounds it and names a lost worker); `key` identifies the program."""
        return fn()

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

    def scope(self) -> "StrategyScope":
        """Enter cross-replica context for this strategy (variables created here are distributed)."""
        return StrategyScope(self)

    def function(self, fn: Callable | None = None, *, name: str | None = None, reduce_retracing: bool = False,
                 input_signature=None):
        """Compile a whole Python step (run, reduce and all) into one program (like tf.function);
        `reduce_retracing=True` traces Python ints, floats and complexes as values (one program
        for a learning-rate schedule) instead of baking each value into its own program;
        `input_signature` (specs, e.g. an iterator's `element_spec`) checks every call's arguments."""
        check_type(name, str, "strategy.function's name", "pass a string name, or leave it out",
                   allow_none=True)
        check_type(reduce_retracing, bool, "reduce_retracing", "pass reduce_retracing=True or False")
        if fn is not None:
            check_callable(fn, "strategy.function's fn", "decorate a function: @strategy.function")
        check_input_signature(input_signature)
        if fn is None:
            return lambda f: StrategyFunction(self, f, name, reduce_retracing=reduce_retracing,
                                              input_signature=input_signature)
        return StrategyFunction(self, fn, name, reduce_retracing=reduce_retracing, input_signature=input_signature)

    # --- run ---------------------------------------------------------------------------
    def run(self, fn: Callable, args: Sequence = (), kwargs: dict | None = None, options=None):
        """Run `fn` on every replica; per-replica arguments give replica i its component i."""
        check_callable(fn, "strategy.run's fn", "pass the replica function: strategy.run(fn, args=(x,))")
        if not isinstance(args, (tuple, list)):
            raise DistributionTypeError(f"`args` must be a tuple or list, not {type(args).__name__}",
                                        "wrap a single argument as args=(x,)")
        check_mapping(kwargs, "strategy.run's kwargs", "pass keyword arguments as kwargs={'name': value}")
        _check_run_options(options)
        kwargs = dict(kwargs or {})
        entry = _context.current()
        if entry is not None and entry.replica_context is not None:
            raise DistributionRuntimeError("strategy.run was called inside a replica function",
                                           "call strategy.run from cross-replica code only")
        if not _context.is_tracing():  # a function of the same code, defaults and captures: one runner
            padded_args, padded_kwargs = cross_replica.ragged_as_batches(self, (tuple(args), kwargs))
            runner = cross_replica.eager_function(self, ("run", function_key(fn)), lambda: lambda *a, **k: self.run(
                fn, a, k), getattr(fn, "__name__", "run"), origin=fn)
            return runner(*padded_args, **padded_kwargs)
        local_args, local_kwargs = _tree_map_distributed(self._to_local, (tuple(args), kwargs))
        with _context.push(self, ReplicaContext(self)):
            result = fn(*local_args, **local_kwargs)
        what = f"the replica function {getattr(fn, '__name__', type(fn).__name__)}"
        return jax.tree_util.tree_map_with_path(
            lambda path, x: x if is_distributed(x) else PerReplica.from_tracer(
                result_array(x, what, jax.tree_util.keystr(path))), result, is_leaf=is_distributed)

    def _to_local(self, x):
        return local_value(x) if is_distributed(x) else x

    def _finalize_outputs(self, tree):
        """With one replica TensorFlow hands back plain values, not distributed ones."""
        if self.num_replicas_in_sync == 1:
            return _tree_map_distributed(lambda x: x.values[0] if is_distributed(x) else x, tree)
        return tree

    def _default_replica_context(self):
        return DefaultReplicaContext(self)

    # --- reduce, gather, local results (computed in cross_replica.py) ------------------------
    def reduce(self, reduce_op, value: Any, axis: int | None = None):
        """Combine a distributed value (or a pytree of them) across replicas into one value."""
        context.require_cross_replica("strategy.reduce")
        op = ReduceOp.parse(reduce_op)
        collectives.check_axis_type(axis, "strategy.reduce", allow_none=True)
        check_values(value, "strategy.reduce")
        return cross_replica.reduce(self, op, value, axis)

    def gather(self, value: Any, axis: int):
        """Concatenate the replicas' values along `axis` (a pytree of distributed values)."""
        context.require_cross_replica("strategy.gather")
        collectives.check_axis_type(axis, "strategy.gather")
        check_values(value, "strategy.gather")
        return cross_replica.gather(self, value, axis)

    def experimental_local_results(self, value: Any) -> tuple:
        """One value per local replica (a 1-tuple for a plain value)."""
        return cross_replica.local_results(self, value)

    # --- distributing values --------------------------------------------------------------
    def experimental_distribute_values_from_function(self, value_fn: Callable):
        """Call value_fn(ValueContext(i, N)) for each replica i; replica i gets its result."""
        check_callable(value_fn, "value_fn", "pass a function value_fn(ctx) returning replica "
                       "ctx.replica_id_in_sync_group's value")
        n = self.num_replicas_in_sync
        if _context.is_tracing():
            values = [value_fn(ValueContext(i, n)) for i in range(n)]
            grouped = regroup(values, PerReplica, "value_fn result")
            index = collectives.replica_id()
            return _tree_map_distributed(
                lambda v: PerReplica.from_tracer(jnp.stack([jnp.asarray(c) for c in v.values])[index]), grouped)
        per_replica = []
        for i, device in enumerate(self._devices):
            v = value_fn(ValueContext(i, n))
            check_values(v, "the result of value_fn")
            per_replica.append(jax.tree_util.tree_map(lambda x, d=device: jax.device_put(x, d), v))
        return self._finalize_outputs(regroup(per_replica, PerReplica, "value_fn result"))

    def experimental_distribute_dataset(self, dataset, options=None):
        """Split each global batch of `dataset` across the replicas (see `input.dataset`)."""
        _check_input_options(options)
        return DistributedDataset(self, dataset, options)

    def distribute_datasets_from_function(self, dataset_fn: Callable, options=None):
        """`dataset_fn(InputContext)` per input pipeline yields per-replica batches, dealt in turn."""
        check_callable(dataset_fn, "dataset_fn", "pass a function dataset_fn(input_context) returning a dataset")
        _check_input_options(options)
        return DatasetsFromFunction(self, dataset_fn, options)

    def experimental_distribute_datasets_from_function(self, dataset_fn: Callable, options=None):
        """The older name of `distribute_datasets_from_function`."""
        return self.distribute_datasets_from_function(dataset_fn, options)

    def experimental_make_numpy_dataset(self, numpy_input):
        """A dataset of the rows of `numpy_input` (an array or pytree of arrays), as
        `sx.data.Dataset.from_tensor_slices`: `.shuffle(n).batch(b)` it."""
        return Dataset.from_tensor_slices(numpy_input)


class MirroredStrategy(Strategy):
    """Synchronous data parallelism: one replica per device, variables mirrored on all."""

    _shards_optimizer_state = True  # sx.Optimizer(shard_state=True) splits its slots over the replicas

    def __init__(self, devices: Sequence[Any] | None = None, cross_device_ops=None,
                 communication_options: CommunicationOptions | None = None):
        """`communication_options`: the defaults of this strategy's all_reduce and
        batch_reduce_to (each call's own options override them field by field)."""
        super().__init__(resolve_devices(devices))
        self._cross_device_ops = cross_device_ops
        if communication_options is not None:
            check_type(communication_options, CommunicationOptions, "communication_options",
                       "pass sx.CommunicationOptions(...), or leave it out")
            self._communication_options = communication_options
        if devices is None and len(self._devices) == 1 and self._devices[0].platform == "cpu":
            _say_one_cpu_replica()


_ONE_CPU_SAID = []  # the one-CPU-replica line is logged once per process


def _say_one_cpu_replica() -> None:
    """JAX shows one CPU device unless told otherwise: say so once, with the flag."""
    if not _ONE_CPU_SAID:
        _ONE_CPU_SAID.append(True)
        logging.getLogger("strategax").warning(
            "strategax: MirroredStrategy found one CPU device, so it runs one replica. For N "
            "simulated CPU devices set XLA_FLAGS=--xla_force_host_platform_device_count=N before "
            "JAX is imported (e.g. os.environ['XLA_FLAGS'] = "
            "'--xla_force_host_platform_device_count=8' at the top of your script).")


class OneDeviceStrategy(Strategy):
    """Everything on one device; `run` returns plain values."""

    def __init__(self, device: Any):
        super().__init__([resolve_device(device)])
