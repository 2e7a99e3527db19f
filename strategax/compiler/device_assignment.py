"""`DeviceAssignment.build(num_replicas, computation_shape)`: how many replicas, and how
many logical devices (the product of `computation_shape`) each one spans."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from .errors import DistributionValueError


@dataclass(frozen=True)
class DeviceAssignment:
    """R replicas of prod(computation_shape) logical devices each (TF's DeviceAssignment)."""

    num_replicas: int
    computation_shape: tuple[int, ...] = (1,)

    @classmethod
    def build(cls, topology=None, computation_shape: Sequence[int] | None = None,
              computation_stride=None, num_replicas: int = 1) -> "DeviceAssignment":
        """Like tf.tpu.experimental.DeviceAssignment.build; `topology` is ignored (any backend)."""
        shape = tuple(int(d) for d in (computation_shape or (1,)))
        if num_replicas < 1 or not shape or any(d < 1 for d in shape):
            raise DistributionValueError(
                f"invalid device assignment: num_replicas={num_replicas}, computation_shape={list(shape)}",
                "use num_replicas >= 1 and positive computation_shape entries")
        return cls(int(num_replicas), shape)

    @property
    def num_cores_per_replica(self) -> int:
        return math.prod(self.computation_shape)

    @property
    def num_logical_devices_per_replica(self) -> int:
        return self.num_cores_per_replica
