"""Input for a multi-worker strategy: each worker feeds only its own replicas.

`experimental_distribute_dataset` is the common one (`input.dataset`, shared between the
workers by `input.shard` as TensorFlow's AutoShardPolicy says). Here: `dataset_fn` runs once
per worker with `InputContext.input_pipeline_id` = the worker index, and its elements are
dealt to that worker's replicas.
"""
from __future__ import annotations

from typing import Any, Callable

import jax
import numpy as np

from .. import _context
from ..input.context import InputContext
from ..trace.distributed_values import PerReplica, regroup
from .strategy import Strategy, ValueContext


def _per_replica(strategy, pieces: list) -> Any:
    devices = [strategy._devices[i] for i in strategy._local_replica_ids]
    placed = [jax.tree_util.tree_map(lambda x, d=d: jax.device_put(np.asarray(x), d), p)
              for p, d in zip(pieces, devices)]
    leaves = [jax.tree_util.tree_leaves(p) for p in placed]
    treedef = jax.tree_util.tree_structure(placed[0])
    return strategy._finalize_outputs(jax.tree_util.tree_unflatten(treedef, [PerReplica(c) for c in zip(*leaves)]))


class _WorkerFunctionDataset:
    """Deals the elements of this worker's pipeline to its replicas, one element each per step."""

    def __init__(self, strategy, dataset):
        self._strategy, self._dataset = strategy, dataset

    def __iter__(self):
        k = len(self._strategy._local_replica_ids)
        it = iter(self._dataset)
        while True:
            step = []
            for element in it:
                step.append(element)
                if len(step) == k:
                    break
            if not step:
                return
            empty = jax.tree_util.tree_map(lambda x: np.asarray(x)[:0], step[-1])
            yield _per_replica(self._strategy, step + [empty] * (k - len(step)))
            if len(step) < k:
                return


class MultiWorkerInputMixin(Strategy):
    """experimental_distribute_dataset / distribute_datasets_from_function, per worker."""

    # set by MultiWorkerMirroredStrategy: the worker runtime (None on one worker), the workers, this one
    _runtime: Any
    _num_workers: int
    _worker_index: int

    def distribute_datasets_from_function(self, dataset_fn: Callable, options=None):
        """`dataset_fn(InputContext)` once for this worker; its elements go to this worker's replicas
        (a final step with fewer elements than local replicas gives the rest empty batches)."""
        if self._runtime is None:
            return super().distribute_datasets_from_function(dataset_fn, options)
        ctx = InputContext(num_input_pipelines=self._num_workers, input_pipeline_id=self._worker_index,
                           num_replicas_in_sync=self.num_replicas_in_sync)
        return _WorkerFunctionDataset(self, dataset_fn(ctx))

    def _input_pipeline(self) -> tuple[int, int]:
        """(number of input pipelines, this process's): one per worker."""
        return self._num_workers, self._worker_index

    def experimental_distribute_values_from_function(self, value_fn: Callable):
        """value_fn runs for this worker's replicas only, with their global replica ids."""
        if self._runtime is None or _context.is_tracing():
            return super().experimental_distribute_values_from_function(value_fn)
        n = self.num_replicas_in_sync
        values = [jax.tree_util.tree_map(lambda x, d=self._devices[i]: jax.device_put(x, d),
                                         value_fn(ValueContext(i, n)))
                  for i in self._local_replica_ids]
        return self._finalize_outputs(regroup(values, PerReplica, "value_fn result"))
