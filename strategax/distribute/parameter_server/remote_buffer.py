"""A coordinator's variable of a ParameterServerStrategy: its value lives on a parameter
server. Reading it fetches the current value; an update is sent to the server, which applies
it atomically. Pickled (shipped to a worker with a step), it becomes that worker's copy of it
(`worker_runtime.shadow_of`)."""
from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

from ...errors import DistributionRuntimeError
from ...variables.buffers import VarBuffer
from . import current


@dataclass(frozen=True)
class VarRef:
    """A variable on a parameter server, and what a worker needs to make its copy."""
    ps: int
    id: int
    name: str
    shape: tuple
    dtype: str
    sync: str  # VariableSynchronization name
    aggregation: str  # VariableAggregation name
    trainable: bool

    @property
    def key(self) -> tuple[int, int]:
        return self.ps, self.id

    @classmethod
    def of(cls, var, ps: int, var_id: int) -> "VarRef":
        return cls(ps, var_id, var.name, tuple(var.shape), np.dtype(var.dtype).name, var._sync.name,
                   var.aggregation.name, var.trainable)


class RemoteBuffer(VarBuffer):
    """The storage of a coordinator's variable: a reference to its parameter server (it holds
    no array; every access asks the server)."""

    def __init__(self, var, cluster, ps: int, var_id: int):  # no local buffer: VarBuffer's is not made
        self.var, self.cluster, self.layout = var, cluster, None
        self.ref = VarRef.of(var, ps, var_id)

    @property
    def num_copies(self) -> int | None:
        return 1  # the server keeps one value (a sync-on-read variable's aggregate)

    @classmethod
    def create(cls, var, initial, cluster, ps: int) -> "RemoteBuffer":
        var_id, _ = cluster.call_ps(ps, "create", np.asarray(initial))
        return cls(var, cluster, ps, var_id)

    # --- what a compiled program would ask: never on the coordinator ------------------------
    def argument(self, layout):
        raise self._run_on_coordinator()

    def set(self, array) -> None:
        raise self._run_on_coordinator()

    def _run_on_coordinator(self) -> DistributionRuntimeError:
        return DistributionRuntimeError(
            f"variable {self.var.name!r} of a ParameterServerStrategy was used by a program run on the "
            "coordinator; steps run on the workers",
            "schedule the step: coordinator = sx.experimental.coordinator.ClusterCoordinator(strategy); "
            "coordinator.schedule(step_fn, args=(...))")

    # --- cross-replica (eager) access ---------------------------------------------------------
    def eager_read(self):
        return jnp.asarray(self.cluster.call_ps(self.ref.ps, "read", [self.ref.id])[0])

    def global_value(self):
        return self.eager_read()

    def components(self) -> tuple:
        return (self.eager_read(),)

    def eager_update(self, kind: str, value) -> None:
        self.cluster.call_ps(self.ref.ps, "update", self.ref.id, kind, np.asarray(value, self.var.dtype))

    def reduce_variable(self) -> tuple | None:
        return current.shadow_of, (self.ref,)
