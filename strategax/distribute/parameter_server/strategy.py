"""`ParameterServerStrategy` on the coordinator: variables created in its scope live on the
parameter-server actors (round-robin, as TensorFlow; a partitioner splits a large one into a
`ShardedVariable` of shards placed in turn), and steps run on the worker actors through a
`ClusterCoordinator`. On the coordinator itself nothing is compiled: `run` and friends say to
schedule the step. Pickled into a worker, the strategy becomes that worker's strategy."""
from __future__ import annotations

import inspect
import itertools
import threading
import weakref
from typing import TYPE_CHECKING

import jax
import numpy as np

from ... import _context
from ...cluster.ray import placement_of
from ...errors import DistributionRuntimeError, DistributionValueError, check_callable
from ...variables import Optimizer, ShardedVariable, Variable
from ...variables.optimizer import SlotGroup
from ...variables.sharded import shard_rows
from ...variables.variables import _initial_array
from ..extended import StrategyExtended
from ..strategy import Strategy
from . import current
from .cluster import Cluster
from .remote_buffer import RemoteBuffer, VarRef

if TYPE_CHECKING:  # annotations only: the coordinator module imports this one
    from .coordinator import ClusterCoordinator

_VARIABLE_ARGS = inspect.signature(Variable.__init__)
_OPTIMIZER_IDS = itertools.count()


class ParameterServerExtended(StrategyExtended):
    """Variables live on the parameter servers."""

    @property
    def parameter_devices(self) -> tuple:
        return tuple(f"/job:ps/replica:0/task:{i}/device:CPU:0" for i in range(self._strategy._cluster.num_ps))

    @property
    def worker_devices(self) -> tuple:
        return tuple(f"/job:worker/replica:0/task:{i}/device:CPU:0" for i in range(self._strategy._cluster.num_workers))


def _on_workers(api: str):
    def method(self, *args, **kwargs):
        raise DistributionRuntimeError(
            f"ParameterServerStrategy.{api} was called on the coordinator; it runs inside a step that a "
            "worker runs", "put it in a function and schedule that: "
            "sx.experimental.coordinator.ClusterCoordinator(strategy).schedule(step_fn, args=(...))")
    method.__name__ = api
    return method


class ParameterServerStrategy(Strategy):
    """Asynchronous training: variables on parameter servers, steps scheduled on workers."""

    def __init__(self, cluster_resolver, variable_partitioner=None):
        if variable_partitioner is not None:
            check_callable(variable_partitioner, "variable_partitioner",
                           "pass e.g. sx.experimental.partitioners.FixedShardsPartitioner(2), or None")
        self._cluster = Cluster(placement_of(cluster_resolver))
        super().__init__(jax.local_devices()[:1])  # nothing runs here: a mesh only for the base class
        self._cluster_resolver = cluster_resolver
        self._partitioner = variable_partitioner
        self._extended = ParameterServerExtended(self)
        self._placed = 0  # variables placed so far: the next goes to server placed % num_ps
        self._local = threading.local()  # what the variable being made is (adopting a worker's slot)
        self._variables: "weakref.WeakValueDictionary[tuple, Variable]" = weakref.WeakValueDictionary()
        self._optimizers: "weakref.WeakValueDictionary[int, Optimizer]" = weakref.WeakValueDictionary()
        self._optimizer_ids: "weakref.WeakKeyDictionary[Optimizer, int]" = weakref.WeakKeyDictionary()
        self._coordinator: ClusterCoordinator | None = None  # made by its first construction
        weakref.finalize(self, self._cluster.shutdown)

    @property
    def num_replicas_in_sync(self) -> int:
        """Replicas per worker (TensorFlow's: a step's `strategy.run` runs on one worker's devices)."""
        return self._cluster.replicas_per_worker

    @property
    def cluster_resolver(self):
        return self._cluster_resolver

    def __reduce__(self):
        return current.worker_strategy, ()

    def __repr__(self) -> str:
        return (f"ParameterServerStrategy({self._cluster.num_workers} workers, {self._cluster.num_ps} "
                "parameter servers)")

    run = _on_workers("run")
    reduce = _on_workers("reduce")
    gather = _on_workers("gather")
    experimental_distribute_dataset = _on_workers("experimental_distribute_dataset")
    distribute_datasets_from_function = _on_workers("distribute_datasets_from_function")
    experimental_distribute_values_from_function = _on_workers("experimental_distribute_values_from_function")

    # --- variables ----------------------------------------------------------------------------------
    def _make_variable(self, args: tuple, kwargs: dict):
        """A partitioned variable as a ShardedVariable (TensorFlow's rule: split along axis 0
        only, never a scalar); None to make an ordinary one."""
        if self._partitioner is None or getattr(self._local, "making", False):
            return None
        bound = _VARIABLE_ARGS.bind(None, *args, **kwargs)
        bound.apply_defaults()
        options = dict(bound.arguments)
        options.pop("self")
        array = _initial_array(options.pop("initial_value"), options.pop("dtype"))
        parts = [1] if array.ndim == 0 else list(self._partitioner(shape=tuple(array.shape), dtype=array.dtype))
        if array.ndim and (len(parts) != array.ndim or parts[0] < 1 or any(p != 1 for p in parts[1:])):
            raise DistributionValueError(
                f"the variable_partitioner returned {parts} for a variable of shape {tuple(array.shape)} "
                "(ParameterServerStrategy splits variables along their first axis only)",
                "return [k, 1, 1, ...] with one entry per axis")
        k = min(parts[0], array.shape[0]) if array.ndim else 1
        name = options.pop("name") or "Variable"
        self._local.making = True
        try:
            if k <= 1:
                return Variable(array, name=name, **options)
            rows, start, shards = shard_rows(array.shape[0], k), 0, []
            for i, n in enumerate(rows):
                shards.append(Variable(array[start:start + n], name=f"{name}/part_{i}", **options))
                start += n
            return ShardedVariable(shards, name=name)
        finally:
            self._local.making = False

    def _var_buffer(self, var, initial) -> RemoteBuffer:
        """The variable's value goes to the next parameter server in turn (or, for a slot a
        worker made, it is there already)."""
        ref = getattr(self._local, "adopting", None)
        if ref is not None:
            buffer = RemoteBuffer(var, self._cluster, ref.ps, ref.id)
        else:
            ps = self._placed % self._cluster.num_ps
            self._placed += 1
            buffer = RemoteBuffer.create(var, initial, self._cluster, ps)
        self._variables[buffer.ref.key] = var
        return buffer

    def _adopt(self, ref: VarRef) -> Variable:
        """The coordinator's variable for a variable a worker made on a parameter server."""
        var = self._variables.get(ref.key)
        if var is not None:
            return var
        self._local.adopting, self._local.making = ref, True
        try:
            with _context.push(self):
                return Variable(np.zeros(ref.shape, ref.dtype), name=ref.name, dtype=ref.dtype,
                                trainable=ref.trainable, synchronization=ref.sync, aggregation=ref.aggregation)
        finally:
            self._local.adopting, self._local.making = None, False

    # --- optimizers ----------------------------------------------------------------------------------
    def _reduce_optimizer(self, optimizer: Optimizer):
        """An optimizer travels to a worker as its state; its slots are the servers' variables."""
        uid = self._optimizer_ids.get(optimizer)
        if uid is None:
            uid = self._optimizer_ids[optimizer] = next(_OPTIMIZER_IDS)
            self._optimizers[uid] = optimizer
        state = {k: v for k, v in vars(optimizer).items() if k not in ("_strategy", "_groups", "_pending")}
        groups = [(g.variables, g.slots) for g in optimizer._groups.values()]
        return current.worker_optimizer, (uid, state, groups, list(optimizer._pending.values()))

    def _adopt_slots(self, uid: int, var_keys: list, slot_refs: list) -> None:
        """A worker made optimizer `uid`'s slots for these variables: the optimizer here adopts them."""
        optimizer = self._optimizers.get(uid)
        found = [self._variables.get(k) for k in var_keys]
        variables = [v for v in found if v is not None]
        if optimizer is None or len(variables) < len(found):
            return
        key = frozenset(id(v) for v in variables)
        if key in optimizer._groups:
            return
        optimizer._groups[key] = SlotGroup.adopt(optimizer, variables, [self._adopt(r) for r in slot_refs])
        for v in variables:
            optimizer._pending.pop(id(v), None)

    def _shutdown(self) -> None:
        """Stop the workers and parameter servers (their variables are gone)."""
        if self._coordinator is not None:
            self._coordinator._stop()
        self._cluster.shutdown()
