"""A coordinator's optimizer inside a worker. Its slots live on the parameter servers, each
beside its variable: the first worker to apply gradients to a set of variables creates them
there (get-or-create by a key every worker computes alike, so all workers share them) and
reports them to the coordinator, whose optimizer adopts them (checkpoints see them)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import jax

from ...variables import Optimizer
from ...variables.optimizer import SlotGroup
from ...variables.slots import Params, state_leaves

if TYPE_CHECKING:  # annotations only: the worker runtime imports this module
    from .worker_runtime import WorkerRuntime


class WorkerOptimizer(Optimizer):
    """An optimizer rebuilt in a worker from the coordinator's (`rebuild`)."""

    _runtime: WorkerRuntime  # the worker it runs in, and the coordinator's id of the optimizer
    _uid: int

    @classmethod
    def rebuild(cls, runtime: WorkerRuntime, uid: int, state: dict, groups: list, pending: list) -> "WorkerOptimizer":
        """From the coordinator's optimizer: its attributes (tx, iterations, loss scale, ...;
        variables as this worker's copies), its slot groups and restored slots not yet used."""
        self = cls.__new__(cls)
        vars(self).update(state)
        self._strategy, self._runtime, self._uid = runtime.strategy, runtime, uid
        self._groups = {frozenset(id(v) for v in variables): SlotGroup.adopt(self, variables, slots)
                        for variables, slots in groups}
        self._pending = {id(var): (var, values) for var, values in pending}
        return self

    def _slots(self, variables: list) -> SlotGroup:
        if frozenset(id(v) for v in variables) in self._groups:
            return super()._slots(variables)
        owners = [owner for owner, _, _ in state_leaves(jax.eval_shape(
            self._tx.init, Params([jax.ShapeDtypeStruct(v.shape, v.dtype) for v in variables])))]
        refs = [v._store.ref for v in variables]
        with self._runtime.creating_slots(self._uid, refs, owners):
            group = super()._slots(variables)
        self._runtime.slots_created(self._uid, refs, group)
        return group
