"""central-storage: make CentralStorageStrategy's communication visible.

For a module with a `parameter_replica` attribute (compiled by CentralStorageStrategy): every
replica-context read of a mirrored variable gets an `sx.broadcast` from the parameter replica
(reason "CentralStorage broadcast"), and every all_reduce whose result flows into a variable
update is the "reduce to parameter device". Other modules pass through unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..dialects.variables import UPDATES, variable_of
from ..ir import Block, Module, Operation, Value
from .rewrite import BlockRewriter, rewrite_blocks

BROADCAST_REASON = "CentralStorage broadcast"
REDUCE_REASON = "reduce to parameter device"


def _broadcast_reads(block: Block, decls: dict, source: int) -> bool:
    rw = BlockRewriter(block)
    changed = False
    for op in rw.ops():
        for region in op.regions:
            changed |= _broadcast_reads(region, decls, source)
        var = variable_of(op) if op.name == "sx.var_read" else None
        decl = decls.get(var.name) if var is not None else None
        if (decl is None or op.attrs.get("ctx") != "replica" or decl.attrs.get("sync") != "on_write"
                or op.attrs.get("central")):
            continue
        rw.set_attrs(op, central=True)
        cast = Operation("sx.broadcast", [op.result], [Value(op.result.type.with_locality(None))],
                         {"source": source, "reason": BROADCAST_REASON}, loc=op.loc)
        rw.insert_after(op, [cast])
        rw.replace_uses(op.result, cast.result, except_in=[cast])
    return rw.commit() or changed


def _name_reductions(rw: BlockRewriter) -> None:
    """An all_reduce whose value (through any ops of this block) reaches a variable update."""
    origins: dict[Value, set[Operation]] = {}  # value -> the all_reduce ops it derives from
    for op in rw.ops():
        src = set().union(*(origins.get(v, set()) for v in op.operands))
        if op.name == "sx.all_reduce":
            src = src | {op}
        if op.name in UPDATES:
            for r in src:
                reason = r.attrs.get("reason", "")
                if not reason.startswith(REDUCE_REASON):
                    rw.set_attrs(r, reason=f"{REDUCE_REASON} ({reason})" if reason else REDUCE_REASON)
        for r in op.results:
            origins[r] = src


@dataclass(frozen=True)
class CentralStorage:
    """Broadcast variables from, and name reductions to, the parameter device."""

    name: ClassVar[str] = "central-storage"
    requires: ClassVar[tuple[str, ...]] = ("insert-collectives",)

    def apply(self, module: Module) -> bool:
        source = module.attrs.get("parameter_replica")
        if source is None:
            return False
        decls = {v.name: v for v in module.vars}
        changed = False
        for f in module.funcs:
            changed |= _broadcast_reads(f.body, decls, int(source))
        return rewrite_blocks(module, _name_reductions) or changed
