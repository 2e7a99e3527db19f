"""central-storage: make CentralStorageStrategy's communication visible.

For a module with a `parameter_replica` attribute (compiled by CentralStorageStrategy): every
replica-context read of a mirrored variable gets an `sx.broadcast` from the parameter replica
(reason "CentralStorage broadcast"), and every all_reduce whose result flows into a variable
update is the "reduce to parameter device". Other modules pass through unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..dialects.variables import UPDATES
from ..ir import Block, Module, Operation, Value
from .rewrite import all_blocks, replace_value_after

BROADCAST_REASON = "CentralStorage broadcast"
REDUCE_REASON = "reduce to parameter device"


def _broadcast_reads(block: Block, decls: dict, source: int) -> None:
    out: list[Operation] = []
    pending = list(block.ops)
    for i, op in enumerate(pending):
        out.append(op)
        for region in op.regions:
            _broadcast_reads(region, decls, source)
        decl = decls.get(op.attrs["var"].name) if op.name == "sx.var_read" else None
        if (decl is None or op.attrs.get("ctx") != "replica" or decl.attrs.get("sync") != "on_write"
                or op.attrs.get("central")):
            continue
        op.attrs = {**op.attrs, "central": True}
        result = Value(op.result.type.with_locality(None))
        out.append(Operation("sx.broadcast", [op.result], [result],
                             {"source": source, "reason": BROADCAST_REASON}, loc=op.loc))
        replace_value_after(pending[i + 1:], block.results, op.result, result)
    block.ops[:] = out


def _name_reductions(block: Block) -> None:
    """An all_reduce whose value (through any ops of this block) reaches a variable update."""
    origins: dict[int, set[int]] = {}  # value id -> ids of the all_reduce ops it derives from
    reduces = {}
    for op in block.ops:
        src = set().union(*(origins.get(id(v), set()) for v in op.operands)) if op.operands else set()
        if op.name == "sx.all_reduce":
            reduces[id(op)] = op
            src = src | {id(op)}
        if op.name in UPDATES:
            for k in src:
                r = reduces[k]
                reason = r.attrs.get("reason", "")
                if not reason.startswith(REDUCE_REASON):
                    r.attrs = {**r.attrs, "reason": f"{REDUCE_REASON} ({reason})" if reason else REDUCE_REASON}
        for r in op.results:
            origins[id(r)] = src


@dataclass(frozen=True)
class CentralStorage:
    """Broadcast variables from, and name reductions to, the parameter device."""

    name: str = "central-storage"

    def apply(self, module: Module) -> Module:
        source = module.attrs.get("parameter_replica")
        if source is None:
            return module
        decls = {v.name: v for v in module.vars}
        for f in module.funcs:
            _broadcast_reads(f.body, decls, int(source))
        for block in all_blocks(module):
            _name_reductions(block)
        return module
