"""Input for a multi-worker strategy: each worker feeds only its own replicas.

`experimental_distribute_dataset` is shared between the workers by `input.shard` as
TensorFlow's AutoShardPolicy says; `distribute_datasets_from_function` runs `dataset_fn` once
per worker with `InputContext.input_pipeline_id` = the worker index and deals its elements to
that worker's replicas (`input.from_function.across_workers`), the workers agreeing on each
step through `_input_exchange`.
"""
from __future__ import annotations

from typing import Callable

import jax

from .. import _context
from ..cluster import rendezvous
from ..cluster.runtime import STARTUP_SLACK_S, WorkerRuntime
from ..input.prefetch import stopping
from ..trace.distributed_values import PerReplica, regroup
from .strategy import Strategy, ValueContext


class MultiWorkerInputMixin(Strategy):
    """experimental_distribute_dataset / distribute_datasets_from_function, per worker."""

    # set by MultiWorkerMirroredStrategy: the worker runtime (None on one worker), the workers, this one
    _runtime: WorkerRuntime | None
    _num_workers: int
    _worker_index: int

    def _input_exchange(self) -> Callable[[str], list[str]] | None:
        """A new iterator's step-by-step agreement with the other workers (their lines, in worker
        order): bounded like a step, named when a worker is lost, given up when the iterator is."""
        if self._runtime is None:
            return None
        runtime, steps = self._runtime, rendezvous.new_channel("input")
        bound = None if runtime.timeout is None else runtime.timeout + STARTUP_SLACK_S

        def exchange(line: str) -> list[str]:
            return steps.all_gather(runtime, line, "an input step (distribute_datasets_from_function)", bound,
                                    cancelled=stopping)
        return exchange

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
