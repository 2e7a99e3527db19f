"""`InputContext`: what an input function knows about its place among the input pipelines."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import DistributionValueError, check_int


@dataclass(frozen=True)
class InputContext:
    """Given to `dataset_fn` once per input pipeline (one per worker)."""
    num_input_pipelines: int = 1
    input_pipeline_id: int = 0
    num_replicas_in_sync: int = 1

    def __post_init__(self):
        check_int(self.num_input_pipelines, "num_input_pipelines", minimum=1)
        check_int(self.input_pipeline_id, "input_pipeline_id", minimum=0)
        check_int(self.num_replicas_in_sync, "num_replicas_in_sync", minimum=1)
        if self.input_pipeline_id >= self.num_input_pipelines:
            raise DistributionValueError(
                f"input_pipeline_id {self.input_pipeline_id} is not below num_input_pipelines "
                f"{self.num_input_pipelines}", "pass an input_pipeline_id in 0..num_input_pipelines-1")

    def get_per_replica_batch_size(self, global_batch_size: int) -> int:
        """`global_batch_size / num_replicas_in_sync`, which must be a whole number."""
        check_int(global_batch_size, "global_batch_size", minimum=0)
        if global_batch_size % self.num_replicas_in_sync:
            raise DistributionValueError(
                f"the global batch size {global_batch_size} is not divisible by "
                f"num_replicas_in_sync {self.num_replicas_in_sync}",
                f"use a global batch size that is a multiple of {self.num_replicas_in_sync}")
        return global_batch_size // self.num_replicas_in_sync
