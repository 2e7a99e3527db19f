"""`InputOptions`: how distributed input is placed on the devices, as in TensorFlow."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InputOptions:
    """`tf.distribute.InputOptions`: whether and how far ahead input is placed on the devices."""
    experimental_fetch_to_device: bool = True
    experimental_per_replica_buffer_size: int = 1
    experimental_replication_mode: str = "PER_WORKER"
    experimental_place_dataset_on_device: bool = False

    def __post_init__(self):
        if self.experimental_per_replica_buffer_size < 1:
            raise ValueError("experimental_per_replica_buffer_size must be >= 1, "
                             f"not {self.experimental_per_replica_buffer_size!r}")
