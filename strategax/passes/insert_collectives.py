"""insert-collectives: the communication TensorFlow's variable rules imply, made explicit.

- An update (`sx.var_assign*`) of a mirrored (ON_WRITE) variable in replica context whose
  aggregation is SUM or MEAN gets an `sx.all_reduce` of its value; ONLY_FIRST_REPLICA gets an
  `sx.broadcast` of replica 0's value. Aggregation NONE and sync-on-read updates stay local.
- A read (`sx.var_read`) of a sync-on-read variable in cross-replica context is followed by
  its aggregation (SUM/MEAN all_reduce, ONLY_FIRST_REPLICA broadcast) and its uses take that.
Each inserted collective carries a `reason` and the user's line (the op's location); the op is
marked `reduced = true` so the pass is idempotent. Inside a region (a loop body, a branch) the
collective goes right before the update, in the region: it runs once per iteration.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..dialects.variables import UPDATES, variable_of
from ..ir import Block, Module, Operation, Value
from .rewrite import BlockRewriter


def aggregation_op(agg: str, value: Value, reason: str, loc) -> Operation:
    """The collective that combines `value` across replicas by aggregation `agg`."""
    result = Value(value.type.with_locality(None))
    if agg == "only_first_replica":
        return Operation("sx.broadcast", [value], [result], {"source": 0, "reason": reason}, loc=loc)
    return Operation("sx.all_reduce", [value], [result], {"op": agg, "reason": reason, "carries": "variable"},
                     loc=loc)


def _aggregation(op: Operation, decls: dict) -> tuple[str, str, str] | None:
    """(aggregation, "update" or "read", variable name) when TensorFlow's rules put a collective
    at `op`."""
    var = variable_of(op)
    decl = decls.get(var.name) if var is not None else None
    if decl is None or op.attrs.get("reduced"):
        return None
    sync, agg = decl.attrs.get("sync"), decl.attrs.get("agg")
    if agg not in ("sum", "mean", "only_first_replica"):
        return None
    if op.name in UPDATES and op.attrs["ctx"] == "replica" and sync == "on_write":
        return agg, "update", decl.name
    if op.name == "sx.var_read" and op.attrs["ctx"] == "cross_replica" and sync == "on_read":
        return agg, "read", decl.name
    return None


def insert_block(block: Block, decls: dict) -> bool:
    """Insert the collectives of `block` (and, first, of its ops' regions)."""
    rw = BlockRewriter(block)
    changed = False
    for op in rw.ops():
        for region in op.regions:
            changed |= insert_block(region, decls)
        found = _aggregation(op, decls)
        if found is None:
            continue
        agg, kind, name = found
        rw.set_attrs(op, reduced=True)
        if kind == "update":
            coll = aggregation_op(agg, op.operands[0], f"{agg} aggregation of an update of @{name} in replica context",
                                  op.loc)
            rw.insert_before(op, [coll])
            rw.set_operands(op, [coll.result])
        else:
            coll = aggregation_op(agg, op.result,
                                  f"{agg} aggregation of a read of sync-on-read @{name} in cross-replica context",
                                  op.loc)
            rw.insert_after(op, [coll])
            rw.replace_uses(op.result, coll.result, except_in=[coll])
    return rw.commit() or changed


@dataclass(frozen=True)
class InsertCollectives:
    """Insert the all-reduces/broadcasts that variable aggregation implies."""

    name: ClassVar[str] = "insert-collectives"
    requires: ClassVar[tuple[str, ...]] = ()

    def apply(self, module: Module) -> bool:
        decls = {v.name: v for v in module.vars}
        changed = False
        for f in module.funcs:
            changed |= insert_block(f.body, decls)
        return changed

    @staticmethod
    def satisfied(module: Module) -> bool:
        """Whether no variable op of `module` still lacks the collective its aggregation implies."""
        decls = {v.name: v for v in module.vars}
        return all(_aggregation(op, decls) is None for op in module.walk())
