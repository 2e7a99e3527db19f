"""dce: drop ops whose results nobody uses (ops with no results, such as variable writes, stay)."""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import Block, Module


def _has_effects(op) -> bool:
    """An op with no results (a variable write), or one whose regions hold one."""
    return not op.results or any(_has_effects(inner) for r in op.regions for inner in r.ops)


def dce_block(block: Block) -> None:
    live = set(map(id, block.results))
    kept = []
    for op in reversed(block.ops):
        if not any(id(r) in live for r in op.results) and not _has_effects(op):
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
