"""`CentralStorageStrategy`: compute mirrored on the compute devices, variables stored once,
on the parameter device.

Each step the variables are broadcast from the parameter device to the compute replicas
(`sx.broadcast`, reason "CentralStorage broadcast") and their aggregated updates are reduced
back (the update's all_reduce, reason "reduce to parameter device"); between steps only the
parameter device holds a variable (`variables.central_buffer`). See passes/central_storage.py.
"""
from __future__ import annotations

from typing import Any, Sequence

import jax

from ..variables.buffers import VarBuffer
from ..variables.central_buffer import CentralVarBuffer
from .devices import resolve_device, resolve_devices
from .extended import StrategyExtended
from .strategy import Strategy


class CentralStorageExtended(StrategyExtended):
    """Variables have one home: the parameter device."""

    @property
    def parameter_devices(self) -> tuple:
        return (self._strategy._parameter_device,)


def _default_parameter_device(compute: list[jax.Device]) -> jax.Device:  # pyright: ignore[reportInvalidTypeForm]  jaxlib ships no stub for Device
    """TensorFlow's choice: the only compute device, else the first CPU."""
    if len(compute) == 1:
        return compute[0]
    return jax.devices("cpu")[0]


class CentralStorageStrategy(Strategy):
    """One replica per compute device; variables live on `parameter_device`."""

    def __init__(self, compute_devices: Sequence[Any] | None = None, parameter_device: Any = None):
        compute = resolve_devices(compute_devices)
        super().__init__(compute)
        self._parameter_device = (_default_parameter_device(compute) if parameter_device is None
                                  else resolve_device(parameter_device))
        # the replica that already holds the parameters (0 when the parameter device computes nothing)
        self._parameter_replica = compute.index(self._parameter_device) if self._parameter_device in compute else 0
        self._extended = CentralStorageExtended(self)

    @property
    def parameter_device(self) -> jax.Device:  # pyright: ignore[reportInvalidTypeForm]  jaxlib ships no stub for Device
        return self._parameter_device

    def _ir_module_attrs(self) -> dict:
        return {"parameter_replica": self._parameter_replica}

    def _var_buffer(self, var, initial):
        """Storage of a variable created in this scope: central unless it is sync-on-read."""
        cls = VarBuffer if var._per_replica else CentralVarBuffer
        return cls(var, initial)

    def __repr__(self) -> str:
        devs = ", ".join(f"{d.platform.upper()}:{d.id}" for d in self._devices)
        p = self._parameter_device
        return f"CentralStorageStrategy(compute=[{devs}], parameter={p.platform.upper()}:{p.id})"
