"""dce: drop ops whose results nobody uses; ops that write (a variable update, or a region
holding one) always stay. What counts as a write is the op declaration's (`ir.writes`)."""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import Block, Module, writes


def dce_block(block: Block) -> None:
    live = set(map(id, block.results))
    kept = []
    for op in reversed(block.ops):
        if not any(id(r) in live for r in op.results) and not writes(op):
            continue
        for region in op.regions:
            dce_block(region)
        live.update(id(v) for v in op.operands)
        kept.append(op)
    kept.reverse()
    block.ops[:] = kept


@dataclass(frozen=True)
class DeadCodeElimination:
    """Remove ops whose results are unused."""

    name: str = "dce"

    def apply(self, module: Module) -> Module:
        for f in module.funcs:
            dce_block(f.body)
        return module
