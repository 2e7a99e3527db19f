"""A CentralStorageStrategy variable's storage: one array on the parameter device.

A compiled step gets it broadcast to the compute replicas (its input layout is replicated)
and hands back the reduced new value on every replica; only the parameter device's copy is
kept (a view of that shard, no copy when the parameter device is a compute device).
"""
from __future__ import annotations

import jax
import numpy as np

from ..backends import ReplicaLayout
from .buffers import VarBuffer, _apply


class CentralVarBuffer(VarBuffer):
    """The buffer of a variable stored once, on its strategy's parameter device."""

    def __init__(self, var, initial: jax.Array):
        self.var = var
        self.device = var._strategy.parameter_device
        self.layout = ReplicaLayout(var._strategy._mesh, var._ir_type())
        with jax.ensure_compile_time_eval():  # optimizer slots are created while a step is traced
            self.array = jax.device_put(initial, self.device)

    def argument(self, layout: ReplicaLayout) -> jax.Array:
        """The broadcast: the parameter device's value on every compute replica."""
        return jax.device_put(self.array, layout.sharding, may_alias=False)  # the step donates it

    def set(self, array: jax.Array) -> None:
        for shard in array.addressable_shards:
            if shard.device == self.device:
                self.array = shard.data
                return
        self.array = jax.device_put(array.addressable_shards[0].data, self.device)

    def components(self) -> tuple:
        return (self.array,)

    def eager_read(self):
        return self.array

    global_value = eager_read

    def eager_update(self, kind: str, value) -> None:
        new = _apply(kind, np.asarray(self.array), np.asarray(value))
        with jax.ensure_compile_time_eval():
            self.array = jax.device_put(np.asarray(new, self.var.dtype), self.device)
