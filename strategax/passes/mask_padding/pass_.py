"""The `mask-padding` pass itself: the steps of the package's other modules, in order."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...ir import Module
from ..rewrite import BlockRewriter, all_blocks, rewrite_blocks
from . import fixed_extents, masker  # by module: a mutant (tests/fuzz/mutants.py) re-executes them in place
from .counts import Counts, gather_real
from .divisors import Divisors
from .gaps import GAPS, PADDED_RESULTS, Gaps
from .results import trims
from .rows import follow


def _drop_marks(rw: BlockRewriter) -> None:
    for op in rw.ops():
        if op.name == "sx.rows":
            rw.replace(op, [op.operands[0]])


@dataclass(frozen=True)
class MaskPadding:
    """Follow the padded row axes from `sx.rows`; mask every op that combines rows."""

    name: ClassVar[str] = "mask-padding"
    requires: ClassVar[tuple[str, ...]] = ()

    def apply(self, module: Module) -> bool:
        every = all_blocks(module)
        if not any(op.name == "sx.rows" for b in every for op in b.ops):
            return False
        batch_counts = {op.operands[1] for b in every for op in b.ops
                        if op.name == "sx.rows" and not op.attrs.get("extent")}
        while True:
            gaps = Gaps()
            marks = [op for b in every for op in b.ops if op.name == "sx.rows"]
            rows = follow(every, marks, gaps)
            if not gather_real(every, rows, module.attrs.get("num_replicas", 1)):
                break
            every = all_blocks(module)
        for at, message in fixed_extents.fixed_extent_sources(module, every, rows.of):  # `x @ W` along padding
            gaps.add(at, message, fixed_extents.FIX)
        producer = {r: op for b in every for op in b.ops for r in op.results}
        threads = Counts(every)
        per_example, padded = trims(module.main, rows, batch_counts, threads.home, gaps, producer)
        maskers = [masker.Masker(b, rows, threads, gaps) for b in every]
        for m in maskers:
            m.mask()
        divisors = Divisors(every)  # after the masks: the region constants they added are in place
        for m in maskers:
            m.means(divisors)
        rewrite_blocks(module, _drop_marks)
        if per_example:
            module.attrs["per_example_results"] = per_example
        if padded:  # plain data, as IR attributes are
            module.attrs[PADDED_RESULTS] = tuple(tuple(p) for p in padded)
        if gaps:
            module.attrs[GAPS] = tuple(tuple(g) for g in gaps)
        return True
