"""A worker's copy of a parameter server's variable, and how a step's updates of it are sent
back so that the server applies them atomically.

The copy is an ordinary variable of the worker's strategy (compiled steps read and update
it on the worker's devices, aggregating over its replicas as any variable), fetched from the
server when a step first uses it. Beside it, two variables of the worker record what the
step did: `delta` accumulates what was added (with the copy's synchronization and
aggregation, so a replica-context `assign_add` is aggregated the same way) and `assigned`
turns 1 on an `assign`. After the step the server gets `assign_add(delta)`, or, after an
assign, the copy's final value: an addition is applied to the server's current value (no
update is lost), an assignment replaces it."""
from __future__ import annotations

from typing import TypeVar

import numpy as np

from ...variables import Variable
from ...variables.buffers import VarBuffer, place
from ...variables.enums import VariableAggregation

_Buffer = TypeVar("_Buffer", bound=VarBuffer)


def store(var: Variable, kind: type[_Buffer]) -> _Buffer:
    """`var`'s storage, which the worker made a `kind` (a copy's ShadowBuffer, a record's RecordBuffer)."""
    buffer = var._store
    assert isinstance(buffer, kind), f"{var.name!r} is stored in a {type(buffer).__name__}, not a {kind.__name__}"
    return buffer


class RecordBuffer(VarBuffer):
    """The storage of a `delta` or `assigned` variable: knows whether this step touched it."""

    def __init__(self, var, initial):
        super().__init__(var, initial)
        self.touched = False
        self.zero = np.zeros(var.shape, var.dtype)

    def argument(self, layout):
        self.touched = True
        return super().argument(layout)

    def eager_update(self, kind: str, value) -> None:
        self.touched = True
        super().eager_update(kind, value)

    def reset(self) -> None:
        """Back to zero for the next step (only when this one touched it): placed from the host
        directly (no eager op: this runs once per scheduled step)."""
        if self.touched:
            layout = self.layout
            if layout is None:
                self.eager_update("assign", self.zero)
            elif layout.per_replica:
                self.array = layout.assemble([np.zeros_like(self.zero)] * layout.num_local_replicas)
            else:
                self.array = place(np.zeros_like(self.zero), layout.sharding)
            self.touched = False


class ShadowBuffer(VarBuffer):
    """The storage of a worker's copy: fetched from its server at the first use in each step."""

    def __init__(self, var, initial, runtime, ref):
        super().__init__(var, initial)
        self.runtime, self.ref = runtime, ref
        self.step = -1  # the step whose value it holds
        self.delta: Variable  # the record variables (see the module doc), attached once the copy is made
        self.assigned: Variable

    def fresh(self) -> None:
        if self.step != self.runtime.step:
            self.runtime.fetch([self])

    def load(self, value) -> None:
        """Hold the server's `value` for this step: every copy (a sync-on-read SUM variable:
        the first copy, the others zero, so the copies still add up to it)."""
        value = np.array(value, dtype=self.var.dtype, copy=True)
        layout = self.layout
        assert layout is not None, "a worker's copy is made in the worker strategy's scope"
        if layout.per_replica:
            zero = np.zeros_like(value)
            first_only = self.var.aggregation is VariableAggregation.SUM
            self.array = layout.assemble([value if i == 0 or not first_only else zero
                                          for i in range(layout.num_local_replicas)])
        else:
            self.array = place(value, layout.sharding)  # `value` is this step's own copy
        self.step = self.runtime.step

    # --- reads and updates of the copy ---------------------------------------------------------
    def argument(self, layout):
        self.fresh()
        self.runtime.note_used(self)
        return super().argument(layout)

    def components(self) -> tuple:
        self.fresh()
        return super().components()

    def eager_update(self, kind: str, value) -> None:
        self.fresh()
        super().eager_update(kind, value)
        if kind == "assign":
            self.assigned.assign(1)
        else:
            getattr(self.delta, kind)(value)

    def traced_update(self, kind: str, value, ctx: str) -> None:
        """The same update traced into the record variables (in the same context)."""
        if kind == "assign":
            self.assigned.assign(1)
        else:
            getattr(self.delta, kind)(value)

    # --- after the step --------------------------------------------------------------------------
    def update(self):
        """What the server must apply for this step: ("assign", value), ("assign_add", delta) or None."""
        if store(self.assigned, RecordBuffer).touched and int(np.asarray(self.assigned.read_value())) != 0:
            return "assign", np.asarray(self.eager_read())
        if store(self.delta, RecordBuffer).touched:
            return "assign_add", np.asarray(self.delta.read_value())
        return None

    def reset(self) -> None:
        store(self.delta, RecordBuffer).reset()
        store(self.assigned, RecordBuffer).reset()
