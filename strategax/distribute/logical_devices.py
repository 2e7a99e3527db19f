"""`experimental_split_to_logical_devices` and friends: the seed's validation, then an
annotation op in the traced program (outside tracing they check and return the value)."""
from __future__ import annotations

import math
from typing import Any, Sequence

import jax.numpy as jnp
import numpy as np

from .. import _context
from ..dialects.logical import assign_p, replicate_p, split_p
from ..errors import DistributionTypeError, DistributionValueError
from ..ir.sharding import assign_axes
from ..trace.distributed_values import is_distributed


class LogicalDevicesMixin:
    """Model parallelism inside a replica: the three annotation methods of TPUStrategy."""

    _logical_axes: tuple[tuple[str, int], ...] = ()  # the replica's logical mesh axes

    @property
    def logical_devices_per_replica(self) -> int:
        return math.prod(size for _, size in self._logical_axes)

    def experimental_split_to_logical_devices(self, tensor: Any, partition_dimensions: Sequence[int]):
        """Split `tensor` over the logical devices: dimension i into partition_dimensions[i] pieces."""
        x = self._annotation_operand(tensor, "experimental_split_to_logical_devices")
        try:
            if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in partition_dimensions):
                raise TypeError
            dims = tuple(int(d) for d in partition_dimensions)
        except TypeError:
            raise DistributionTypeError(
                f"partition_dimensions must be a flat list of ints, not {partition_dimensions!r}",
                "pass one split count per dimension of the tensor, e.g. [1, 2, 4, 1]") from None
        n = self.logical_devices_per_replica
        if len(dims) != x.ndim:
            raise DistributionValueError(
                f"partition_dimensions {list(dims)} has {len(dims)} entries but the tensor has rank "
                f"{x.ndim} (shape {tuple(x.shape)})",
                f"give exactly {x.ndim} split counts, one per dimension (1 for an unsplit one)")
        if any(d < 1 for d in dims) or math.prod(dims) != n:
            raise DistributionValueError(
                f"the product of partition_dimensions {list(dims)} is {math.prod(dims)}, but each "
                f"replica has {n} logical devices",
                f"choose split counts whose product is {n} (logical_devices_per_replica)")
        for i, (size, d) in enumerate(zip(x.shape, dims)):
            if size % d:
                raise DistributionValueError(
                    f"dimension {i} of the tensor (size {size}) cannot be split {d} ways "
                    f"(shape {tuple(x.shape)}, partition_dimensions {list(dims)})",
                    f"make dimension {i} a multiple of {d}, or split another dimension instead")
        if not _context.is_tracing():
            return tensor
        return split_p.bind(x, partition_dimensions=dims, axes=assign_axes(dims, self._logical_axes))

    def experimental_assign_to_logical_device(self, tensor: Any, logical_device_id: int):
        """Place `tensor` (and the computation that produces it) on one logical device."""
        x = self._annotation_operand(tensor, "experimental_assign_to_logical_device")
        n = self.logical_devices_per_replica
        if isinstance(logical_device_id, bool) or not isinstance(logical_device_id, (int, np.integer)):
            raise DistributionTypeError(f"logical_device_id must be an int, not {logical_device_id!r}",
                                        f"pass an int in [0, {n})")
        if not 0 <= logical_device_id < n:
            raise DistributionValueError(
                f"logical_device_id {logical_device_id} is out of range: each replica has {n} "
                f"logical device(s), ids 0 to {n - 1}",
                f"pass an id in [0, {n}) (logical_devices_per_replica is {n})")
        if not _context.is_tracing():
            return tensor
        return assign_p.bind(x, logical_device=int(logical_device_id))

    def experimental_replicate_to_logical_devices(self, tensor: Any):
        """Replicate `tensor` on every logical device of the replica."""
        x = self._annotation_operand(tensor, "experimental_replicate_to_logical_devices")
        if not _context.is_tracing():
            return tensor
        return replicate_p.bind(x)

    def _annotation_operand(self, tensor: Any, what: str):
        if is_distributed(tensor):
            raise DistributionValueError(
                f"{what} got a {type(tensor).__name__}; it annotates a tensor inside the replica function",
                "call it inside strategy.run on the replica's own tensor")
        if not hasattr(tensor, "dtype") and not isinstance(tensor, (int, float, bool, list, tuple)):
            raise DistributionTypeError(f"{what} takes a tensor, not {type(tensor).__name__} {tensor!r:.40}",
                                        "pass the replica's array")
        return jnp.asarray(tensor)
