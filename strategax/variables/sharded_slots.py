"""An optimizer slot held 1/N per replica (`sx.Optimizer(tx, shard_state=True)`, ZeRO 1/2).

A sync-on-read variable whose copy on replica r is piece r of the flattened slot, padded with
zeros to a multiple of N (`collectives.shard`'s cut). Its IR declaration says so
(`var @adam/w/mu : f32[k] per_replica {sync = "on_read", agg = "none", slot_of = "w", shards = 8}`,
k = ceil(size / N)), so the memory table counts one piece per device. Inside a compiled step
the optimizer reads and writes the local piece; outside (cross-replica: `numpy()`,
checkpoints) it reads and assigns the whole value, so a checkpoint holds whole arrays.
"""
from __future__ import annotations

import jax.numpy as jnp

from .. import _context
from ..dialects import collectives
from ..dialects import variables as var_ops
from ..errors import DistributionValueError
from ..ir import Locality, TensorType
from . import buffers
from .enums import VariableAggregation, VariableSynchronization
from .variables import SyncOnReadVariable


def _traced() -> bool:
    return _context.is_tracing() and _context.session() is not None


class ShardedSlotVariable(SyncOnReadVariable):
    """One optimizer slot of `serves`, split over `num_replicas` replicas."""

    _kind = "ShardedSlotVariable"

    def __init__(self, initial_value, *, name: str, serves: str, num_replicas: int):
        self._serves, self._num_shards = serves, int(num_replicas)
        super().__init__(initial_value, trainable=False, name=name,
                         synchronization=VariableSynchronization.ON_READ,
                         aggregation=VariableAggregation.NONE)

    def _make_store(self, array):
        return buffers.ShardedBuffer(self, array)

    @property
    def piece_size(self) -> int:
        """The elements each replica holds."""
        size = 1
        for d in self._shape:
            size *= int(d)
        return collectives.shard_size(size, self._num_shards)

    def _ir_type(self) -> TensorType:
        return TensorType((self.piece_size,), jnp.dtype(self._dtype), Locality.PER_REPLICA)

    def _ir_attrs(self) -> dict:
        return {**super()._ir_attrs(), "slot_of": self._serves, "shards": self._num_shards}

    # --- inside a compiled step: the local piece --------------------------------------------
    def read_piece(self):
        """This replica's piece (traced)."""
        return var_ops.read(self, "replica")

    def assign_piece(self, value) -> None:
        """Replace this replica's piece (traced)."""
        var_ops.update(self, "assign", jnp.asarray(value).astype(self._dtype), "replica")

    # --- the user's view: the whole slot, outside compiled steps ----------------------------
    def _check_read(self, ctx: str) -> None:
        if _traced():
            raise DistributionValueError(
                f"optimizer slot {self._name!r} is sharded (shard_state=True): inside a compiled "
                "function each replica holds only 1/N of it", "read it outside compiled functions "
                "(slot.numpy()), or create the optimizer with shard_state=False")

    def _check_update(self, kind: str, ctx: str) -> None:
        if _traced():
            raise DistributionValueError(
                f"optimizer slot {self._name!r} is sharded (shard_state=True): only its optimizer "
                "updates it inside a compiled function", "assign it outside compiled functions")

    def _cross_replica_value(self, kind: str, value):
        return value  # the whole value: the buffer cuts it
