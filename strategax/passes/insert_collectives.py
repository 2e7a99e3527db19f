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

from ..dialects.variables import UPDATES
from ..ir import Block, Module, Operation, Value
from .rewrite import replace_value_after


def aggregation_op(agg: str, value: Value, reason: str, loc) -> Operation:
    """The collective that combines `value` across replicas by aggregation `agg`."""
    result = Value(value.type.with_locality(None))
    if agg == "only_first_replica":
        return Operation("sx.broadcast", [value], [result], {"source": 0, "reason": reason}, loc=loc)
    return Operation("sx.all_reduce", [value], [result], {"op": agg, "reason": reason}, loc=loc)


def insert_block(block: Block, decls: dict) -> None:
    out: list[Operation] = []
    pending = list(block.ops)
    for i, op in enumerate(pending):
        for region in op.regions:
            insert_block(region, decls)
        decl = decls.get(op.attrs["var"].name) if "var" in op.attrs and op.name.startswith("sx.var_") else None
        if decl is None or op.attrs.get("reduced"):
            out.append(op)
            continue
        sync, agg = decl.attrs.get("sync"), decl.attrs.get("agg")
        if (op.name in UPDATES and op.attrs["ctx"] == "replica" and sync == "on_write"
                and agg in ("sum", "mean", "only_first_replica")):
            coll = aggregation_op(agg, op.operands[0],
                                  f"{agg} aggregation of an update of @{decl.name} in replica context", op.loc)
            out.append(coll)
            op.operands = [coll.result]
            op.attrs = {**op.attrs, "reduced": True}
            out.append(op)
        elif (op.name == "sx.var_read" and op.attrs["ctx"] == "cross_replica" and sync == "on_read"
              and agg in ("sum", "mean", "only_first_replica")):
            op.attrs = {**op.attrs, "reduced": True}
            coll = aggregation_op(agg, op.result,
                                  f"{agg} aggregation of a read of sync-on-read @{decl.name} in cross-replica context",
                                  op.loc)
            out.extend([op, coll])
            replace_value_after(pending[i + 1:], block.results, op.result, coll.result)
        else:
            out.append(op)
    block.ops[:] = out


@dataclass(frozen=True)
class InsertCollectives:
    """Insert the all-reduces/broadcasts that variable aggregation implies."""

    name: str = "insert-collectives"

    def apply(self, module: Module) -> Module:
        decls = {v.name: v for v in module.vars}
        for f in module.funcs:
            insert_block(f.body, decls)
        return module
