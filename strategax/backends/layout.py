"""How a per-replica or mirrored value sits in one global `jax.Array` over the replica mesh.

A per-replica value of rank >= 1 is the replicas' pieces concatenated along axis 0, so a
piece already on its device becomes a shard without a copy; a per-replica scalar is stacked
into a vector. A mirrored value is replicated.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ..ir import Locality, TensorType
from . import transfer

AXIS = "replica"


def _own_copy(value: Any, dtype) -> np.ndarray:
    """`value` as a host array of `dtype` that shares no memory with the caller's: JAX's CPU
    transfer may alias an aligned host array (even with `may_alias=False`, JAX 0.10), so what
    is transferred must be strategax's own (aligned: the CPU runtime then uses it in place)."""
    host = np.asarray(value, dtype)
    if isinstance(value, (int, float, complex, list, tuple)):  # (bool is an int) a new array already
        return host
    return transfer.host_array(host.shape, host.dtype, fill=host)


@dataclass(frozen=True)
class ReplicaLayout:
    mesh: Mesh
    type: TensorType

    @property
    def num_replicas(self) -> int:
        return self.mesh.shape[AXIS]

    @cached_property
    def replica_devices(self) -> list[list]:
        """The devices of each replica (one, or its logical devices), in replica order."""
        return [list(row) for row in self.mesh.devices.reshape(self.num_replicas, -1)]

    @cached_property
    def local_replica_devices(self) -> list[list]:
        """The devices of this process's replicas (all of them unless several processes share the mesh)."""
        me = jax.process_index()
        return [row for row in self.replica_devices if row[0].process_index == me]

    @cached_property
    def local_replica_ids(self) -> list[int]:
        """The replica ids of this process's replicas (all of them in a one-process job)."""
        me = jax.process_index()
        return [i for i, row in enumerate(self.replica_devices) if row[0].process_index == me]

    @property
    def num_local_replicas(self) -> int:
        return len(self.local_replica_devices)

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
    def logical_axes(self) -> tuple[tuple[str, ...], ...] | None:
        """The logical mesh axes of each dimension when the value is split within a replica."""
        s = self.type.sharding
        if s is None or s.kind != "split" or len(self.mesh.axis_names) < 2 or self.stacked:
            return None
        return s.axes

    @cached_property
    def sharding(self) -> NamedSharding:
        """The global array's sharding: over `replica`, and over logical axes where split."""
        if self.logical_axes is None:
            return NamedSharding(self.mesh, self.spec)
        dims = [tuple(d) for d in self.logical_axes]
        if self.per_replica:
            dims[0] = (AXIS, *dims[0])
        return NamedSharding(self.mesh, PartitionSpec(*[d if d else None for d in dims]))

    @cached_property
    def _device_index(self) -> dict:
        return {row[0]: i for i, row in enumerate(self.replica_devices)}

    def components(self, array: jax.Array) -> tuple:
        """One array per replica, in replica order (views of the shards where possible)."""
        if self.logical_axes is not None:  # split over logical devices: slice the global array
            if not self.per_replica:
                return (array,) * self.num_replicas
            n = self.type.shape[0]
            return tuple(array[r * n:(r + 1) * n] for r in range(self.num_replicas))
        order = self._device_index
        shards = sorted((s for s in array.addressable_shards if s.device in order),
                        key=lambda s: order[s.device])
        if self.stacked:
            return tuple(s.data.reshape(()) for s in shards)
        return tuple(s.data for s in shards)

    def assemble(self, components: Sequence, owned: bool = False) -> jax.Array:
        """A global array from one component per replica (no copy for pieces already placed);
        in a multi-process job, one component per replica of this process. A host component
        (the user's NumPy array) is transferred as a copy: JAX's CPU transfer can alias an
        aligned host array, and the global array, kept with the value for later calls, would
        change when the user refills theirs. `owned`: host components are strategax's own
        copies already (the input pipeline's), transferred as they are."""
        pieces = []
        want = (1,) if self.stacked else self.type.shape
        rows = self.replica_devices if len(components) == self.num_replicas else self.local_replica_devices
        for comp, row in zip(components, rows):
            for dev in row:  # a replica of several logical devices holds a copy on each
                piece = comp
                if not (isinstance(piece, jax.Array) and piece.committed and piece.devices() == {dev}):
                    if isinstance(piece, jax.Array):
                        piece = jax.device_put(piece, dev)
                    else:
                        host = np.asarray(piece, self.type.dtype) if owned else _own_copy(piece, self.type.dtype)
                        piece = jax.device_put(host, dev)
                if piece.dtype != self.type.dtype:
                    piece = piece.astype(self.type.dtype)
                if piece.shape != want:
                    piece = piece.reshape(want)
                pieces.append(piece)
        whole = jax.make_array_from_single_device_arrays(
            self.global_shape, NamedSharding(self.mesh, self.spec), pieces)
        return whole if self.logical_axes is None else jax.device_put(whole, self.sharding)
