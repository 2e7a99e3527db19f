"""check-locality: TensorFlow's rules on who may change a variable, as trace-time errors that
name the user's line. Runs after `insert-collectives` and `infer-locality`.

- a mirrored variable updated in replica context with a per-replica value and no aggregation
  (TensorFlow lets the copies drift apart; strategax refuses);
- a mirrored variable assigned a per-replica value in cross-replica context;
- `assign_add`/`assign_sub` of a SUM sync-on-read variable in cross-replica context;
- a read of an aggregation-NONE sync-on-read variable in cross-replica context;
- inside a `cond` or `while` whose predicate is per-replica (replicas may take different
  paths): an update of a mirrored variable (its copies would differ) or a collective (the
  replicas that skip it would leave the others waiting: the program would hang).
Updates inside `cond`/`while`/`scan` are otherwise checked like any other.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...dialects.control_flow import branch_predicate
from ...dialects.variables import UPDATES, variable_of
from ...errors import DistributionRuntimeError, DistributionValueError
from ...ir import Block, Locality, Module, Operation, is_collective

_AGG_FIX = ("give the variable an aggregation (sx.VariableAggregation.SUM, MEAN or ONLY_FIRST_REPLICA), "
            "all-reduce the value first (sx.get_replica_context().all_reduce), or update it in "
            "cross-replica context (merge_call / extended.update)")


_DIVERGE_FIX = ("make the predicate the same on every replica (compute it from mirrored values, or "
                "all-reduce it first)")


def _divergent(op: Operation) -> str | None:
    """What makes replicas take different paths through `op`'s regions, if anything can."""
    predicate = branch_predicate(op)
    if predicate is not None and predicate[0].type.locality is Locality.PER_REPLICA:
        return f"{predicate[1]} differs across replicas"
    return None


def _check_op(op: Operation, decls: dict, divergent: str | None) -> None:
    if divergent and is_collective(op):
        reason = op.attrs.get("reason")
        raise DistributionRuntimeError(
            f"{op.name}{f' ({reason})' if reason else ''} runs inside {divergent}: the replicas "
            "that skip it would leave the others waiting (the program would hang)",
            _DIVERGE_FIX, op=op)
    var = variable_of(op)
    decl = decls.get(var.name) if var is not None else None
    if decl is None:
        return
    sync, agg, ctx = decl.attrs.get("sync"), decl.attrs.get("agg"), op.attrs.get("ctx")
    name = f"@{decl.name}"
    if op.name in UPDATES:
        kind = op.name[len("sx.var_"):]
        if divergent and sync == "on_write":
            raise DistributionValueError(
                f"{kind} of mirrored variable {name} inside {divergent}: its copies would no "
                "longer be identical", _DIVERGE_FIX, op=op)
        per_replica = op.operands[0].type.locality is Locality.PER_REPLICA
        if sync == "on_write" and agg == "none" and ctx == "replica" and per_replica:
            raise DistributionValueError(
                f"{kind} of mirrored variable {name} (aggregation NONE) in replica context with a "
                "value that differs across replicas: its copies would no longer be identical",
                _AGG_FIX, op=op)
        if sync == "on_write" and ctx == "cross_replica" and per_replica:
            raise DistributionValueError(
                f"{kind} of a per-replica value to mirrored variable {name} in cross-replica context",
                "reduce the value first (strategy.reduce / extended.reduce_to)", op=op)
        if sync == "on_read" and ctx == "cross_replica" and kind != "assign" and agg == "sum":
            raise DistributionValueError(
                f"{kind} of sync-on-read variable {name} (aggregation SUM) in cross-replica context",
                "use assign (the value is divided among the replicas), or update it in strategy.run",
                op=op)
    elif op.name == "sx.var_read" and sync == "on_read" and ctx == "cross_replica" and agg == "none":
        raise DistributionValueError(
            f"sync-on-read variable {name} has aggregation NONE and cannot be read in "
            "cross-replica context", "give it aggregation SUM, MEAN or ONLY_FIRST_REPLICA",
            op=op)


def check_block(block: Block, decls: dict, divergent: str | None = None) -> None:
    for op in block.ops:
        _check_op(op, decls, divergent)
        inner = divergent or _divergent(op)
        for region in op.regions:
            check_block(region, decls, inner)


@dataclass(frozen=True)
class CheckLocality:
    """Raise, naming the user's line, where a variable rule of tf.distribute is broken."""

    name: ClassVar[str] = "check-locality"
    requires: ClassVar[tuple[str, ...]] = ("insert-collectives", "infer-locality")

    def apply(self, module: Module) -> bool:
        decls = {v.name: v for v in module.vars}
        for f in module.funcs:
            check_block(f.body, decls)
        return False
