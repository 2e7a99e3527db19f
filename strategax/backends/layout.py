"""How a per-replica or mirrored value sits in one global `jax.Array` over the replica mesh.

A per-replica value of rank >= 1 is the replicas' pieces concatenated along axis 0, so a
piece already on its device becomes a shard without a copy; a per-replica scalar is stacked
into a vector. A mirrored value is replicated.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ..ir import Locality, TensorType

AXIS = "replica"


@dataclass(frozen=True)
class ReplicaLayout:
    mesh: Mesh
    type: TensorType

    @property
    def num_replicas(self) -> int:
        return self.mesh.devices.size

    @property
    def per_replica(self) -> bool:
        return self.type.locality is Locality.PER_REPLICA

    @property
    def stacked(self) -> bool:
        return self.per_replica and not self.type.shape

    @cached_property
    def global_shape(self) -> tuple[int, ...]:
        shape = self.type.shape
        if not self.per_replica:
            return shape
        if self.stacked:
            return (self.num_replicas,)
        return (shape[0] * self.num_replicas, *shape[1:])

    @cached_property
    def spec(self) -> PartitionSpec:
        return PartitionSpec(AXIS) if self.per_replica else PartitionSpec()

    @cached_property
    def sharding(self) -> NamedSharding:
        return NamedSharding(self.mesh, self.spec)

    @cached_property
    def _device_index(self) -> dict:
        return {d: i for i, d in enumerate(self.mesh.devices.flat)}

    def components(self, array: jax.Array) -> tuple:
        """One array per replica, in replica order (views of the shards where possible)."""
        order = self._device_index
        shards = sorted(array.addressable_shards, key=lambda s: order[s.device])
        if self.stacked:
            return tuple(s.data.reshape(()) for s in shards)
        return tuple(s.data for s in shards)

    def assemble(self, components: Sequence) -> jax.Array:
        """A global array from one component per replica (no copy for pieces already placed)."""
        devices = list(self.mesh.devices.flat)
        pieces = []
        want = (1,) if self.stacked else self.type.shape
        for comp, dev in zip(components, devices):
            if not (isinstance(comp, jax.Array) and comp.committed and comp.devices() == {dev}):
                comp = jax.device_put(np.asarray(comp, self.type.dtype) if not isinstance(comp, jax.Array) else comp, dev)
            if comp.dtype != self.type.dtype:
                comp = comp.astype(self.type.dtype)
            if comp.shape != want:
                comp = comp.reshape(want)
            pieces.append(comp)
        return jax.make_array_from_single_device_arrays(self.global_shape, self.sharding, pieces)
