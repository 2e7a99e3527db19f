"""`InputContext`: what an input function knows about its place among the input pipelines."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import DistributionValueError


@dataclass(frozen=True)
class InputContext:
    """Given to `dataset_fn` once per input pipeline (one per worker)."""
    num_input_pipelines: int = 1
    input_pipeline_id: int = 0
    num_replicas_in_sync: int = 1

    def get_per_replica_batch_size(self, global_batch_size: int) -> int:
        """`global_batch_size / num_replicas_in_sync`, which must be a whole number."""
        if global_batch_size % self.num_replicas_in_sync:
            raise DistributionValueError(
                f"the global batch size {global_batch_size} is not divisible by "
                f"num_replicas_in_sync {self.num_replicas_in_sync}",
                f"use a global batch size that is a multiple of {self.num_replicas_in_sync}")
        return global_batch_size // self.num_replicas_in_sync
