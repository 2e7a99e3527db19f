"""dce: drop ops whose results nobody uses (ops with no results, such as variable writes, stay)."""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import Block, Module


def dce_block(block: Block) -> None:
    live = set(map(id, block.results))
    kept = []
    for op in reversed(block.ops):
        if op.results and not any(id(r) in live for r in op.results):
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
