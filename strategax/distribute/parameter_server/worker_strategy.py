"""What a ParameterServerStrategy is inside a worker: synchronous data parallelism over the
worker's local devices (its replicas all-reduce among themselves, as TensorFlow's workers do),
its variables the worker's copies of the parameter servers' (`shadow`)."""
from __future__ import annotations

from typing import Callable

import jax

from ...input.context import InputContext
from ..extended import StrategyExtended
from ..strategy import Strategy
from . import current


class WorkerExtended(StrategyExtended):
    """Variables live on the parameter servers."""

    @property
    def parameter_devices(self) -> tuple:
        return tuple(f"/job:ps/replica:0/task:{i}/device:CPU:0" for i in range(self._strategy._runtime.num_ps))


class WorkerStrategy(Strategy):
    """The strategy of the steps a worker runs: one replica per local device."""

    def __init__(self, runtime):
        super().__init__(jax.local_devices())
        self._runtime = runtime
        self._extended = WorkerExtended(self)

    def __reduce__(self):
        return current.worker_strategy, ()

    def _var_buffer(self, var, initial):
        """A variable made on a worker is a copy of a parameter server's (see `shadow`)."""
        return self._runtime.buffer_for(var, initial)

    def distribute_datasets_from_function(self, dataset_fn: Callable, options=None):
        """`dataset_fn` gets this worker's InputContext (one input pipeline per worker, as TF)."""
        runtime = self._runtime

        def worker_fn(ctx: InputContext):
            return dataset_fn(InputContext(num_input_pipelines=runtime.num_workers,
                                           input_pipeline_id=runtime.index,
                                           num_replicas_in_sync=ctx.num_replicas_in_sync))
        return super().distribute_datasets_from_function(worker_fn, options)

    def __repr__(self) -> str:
        return (f"ParameterServerStrategy(worker {self._runtime.index} of {self._runtime.num_workers}, "
                f"{self.num_replicas_in_sync} local replicas)")
