"""`TPUStrategy`: replicas that each span several logical devices, on any JAX backend, and
`DeviceAssignment` (how many replicas, and how many logical devices each spans).

The mesh is `replica` x the logical axes (one per prime factor of the logical devices per
replica, `l0`, `l1`, ...); replica r owns the devices of row r. The lowering is manual over
`replica` and leaves the logical axes to XLA's partitioner, steered by the annotations.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import jax
import numpy as np
from jax.sharding import AxisType, Mesh

from ..backends import AXIS
from ..errors import DistributionTypeError, DistributionValueError, check_int, check_type
from ..ir.sharding import logical_axes
from .devices import resolve_devices
from .strategy import Strategy


@dataclass(frozen=True)
class DeviceAssignment:
    """R replicas of prod(computation_shape) logical devices each (TF's DeviceAssignment)."""

    num_replicas: int
    computation_shape: tuple[int, ...] = (1,)

    @classmethod
    def build(cls, topology=None, computation_shape: Sequence[int] | None = None,
              computation_stride=None, num_replicas: int = 1) -> "DeviceAssignment":
        """Like tf.tpu.experimental.DeviceAssignment.build; `topology` is ignored (any backend)."""
        check_int(num_replicas, "num_replicas", minimum=1)
        if computation_shape is not None and (not isinstance(computation_shape, (list, tuple)) or not all(
                isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in computation_shape)):
            raise DistributionTypeError(
                f"computation_shape must be a list of ints, not {computation_shape!r:.40}",
                "pass e.g. computation_shape=[1, 1, 1, 2] (its product is the logical devices per replica)")
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


def make_logical_mesh(devices: Sequence[jax.Device], num_replicas: int,  # pyright: ignore[reportInvalidTypeForm]  jaxlib ships no stub for Device
                      axes: tuple[tuple[str, int], ...]) -> Mesh:
    """The (replica, l0, l1, ...) mesh; all axes Auto so sharding constraints may name them."""
    shape = (num_replicas, *[size for _, size in axes])
    names = (AXIS, *[name for name, _ in axes])
    return Mesh(np.array(list(devices)).reshape(shape), names, axis_types=(AxisType.Auto,) * len(names))


class TPUStrategy(Strategy):
    """Data parallelism over replicas, model parallelism over each replica's logical devices."""

    _shards_optimizer_state = True  # sx.Optimizer(shard_state=True) splits its slots over the replicas

    def __init__(self, devices: Sequence[Any] | Any = None, *, logical_devices_per_replica: int | None = None,
                 experimental_device_assignment: DeviceAssignment | None = None):
        if devices is not None and not isinstance(devices, (list, tuple, str, jax.Device)):
            devices = None  # a TPUClusterResolver-like first argument, as in TF: use local devices
        check_type(experimental_device_assignment, DeviceAssignment, "experimental_device_assignment",
                   "pass sx.DeviceAssignment.build(num_replicas=R, computation_shape=[...]), or leave it out",
                   allow_none=True)
        all_devices = resolve_devices(devices)
        per_replica = self._logical_count(logical_devices_per_replica, experimental_device_assignment)
        replicas = (experimental_device_assignment.num_replicas if experimental_device_assignment
                    else len(all_devices) // per_replica)
        if replicas < 1 or replicas * per_replica > len(all_devices) or (
                experimental_device_assignment is None and len(all_devices) % per_replica):
            raise DistributionValueError(
                f"cannot make {replicas or 'any'} replica(s) of {per_replica} logical devices from "
                f"{len(all_devices)} device(s)",
                "use a logical_devices_per_replica that divides the device count, or pass fewer replicas")
        used = all_devices[:replicas * per_replica]
        super().__init__(used[::per_replica])  # one (first) device per replica
        self._logical_axes = logical_axes(per_replica)
        self._all_devices = used
        self._device_assignment = experimental_device_assignment
        self._mesh = make_logical_mesh(used, replicas, self._logical_axes)

    @staticmethod
    def _logical_count(count: int | None, assignment: DeviceAssignment | None) -> int:
        if assignment is not None:
            if count is not None and count != assignment.num_cores_per_replica:
                raise DistributionValueError(
                    f"logical_devices_per_replica={count} disagrees with the device assignment's "
                    f"{assignment.num_cores_per_replica} cores per replica",
                    "pass one of them, or make them agree")
            return assignment.num_cores_per_replica
        count = 1 if count is None else count
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise DistributionValueError(f"logical_devices_per_replica must be a positive int, not {count!r}",
                                         "pass e.g. logical_devices_per_replica=4")
        return count

    def _ir_module_attrs(self) -> dict:
        """Module attributes that record the replica's logical mesh (for passes and lowering)."""
        return {"logical_axes": self._logical_axes} if self._logical_axes else {}

    def __repr__(self) -> str:
        return (f"TPUStrategy(num_replicas={self.num_replicas_in_sync}, "
                f"logical_devices_per_replica={self.logical_devices_per_replica})")
