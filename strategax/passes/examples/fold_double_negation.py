"""fold-double-negation: `-(-x)` is `x`. The example pass of docs/passes.md ("Adding a pass"):
a copy of this file is where a new pass starts. Exact for every dtype (negation is exact on
floats, and wraps back to `x` on integers), so it changes no number."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from strategax.ir import Module
from strategax.passes.rewrite import BlockRewriter, rewrite_blocks


def fold_block(rw: BlockRewriter) -> None:
    """Replace each `jax.neg` of a `jax.neg` of this block by the inner operand."""
    for op in rw.ops():
        if op.name != "jax.neg":
            continue
        inner = rw.producer(op.operands[0])  # None for a block argument
        if inner is not None and inner.name == "jax.neg":
            rw.replace(op, [inner.operands[0]])  # the inner neg stays while others read it


@dataclass(frozen=True)
class FoldDoubleNegation:
    """Replace `-(-x)` by `x`."""

    name: ClassVar[str] = "fold-double-negation"
    requires: ClassVar[tuple[str, ...]] = ()  # passes whose results this one reads

    def apply(self, module: Module) -> bool:
        return rewrite_blocks(module, fold_block)  # every block, regions included
