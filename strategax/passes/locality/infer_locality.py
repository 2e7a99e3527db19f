"""infer-locality: mark every value per_replica or mirrored.

An op's results follow its declaration's locality rule (by default: per_replica if any
operand is); region arguments take their operands' locality, and loop carries are iterated
until they stop changing. Function arguments keep the locality they were declared with.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...dialects.control_flow import region_flows
from ...ir import Block, Locality, Module, Operation, Value, declaration
from ..rewrite import all_values as values

Before = dict[Value, "Locality | None"]  # each value the pass changed -> its locality before


def _set(v: Value, loc: Locality, before: Before) -> bool:
    if v.type.locality is loc:
        return False
    before.setdefault(v, v.type.locality)
    v.type = v.type.with_locality(loc)
    return True


def _infer_op(op: Operation, before: Before) -> None:
    if op.regions:
        _infer_regions(op, before)
    outs = declaration(op).locality(op, [v.type.locality or Locality.MIRRORED for v in op.operands])
    for r, loc in zip(op.results, outs):
        _set(r, loc, before)


def _join(locs) -> Locality:
    out = Locality.MIRRORED
    for x in locs:
        out = out.join(x or Locality.MIRRORED)
    return out


def _infer_regions(op: Operation, before: Before) -> None:
    """A region argument of `op` joins the localities of every value that flows into it
    (`region_flows`: operands, loop carries), iterated until the loop carries stop changing
    (the op's declared rule then joins the results)."""
    sources: dict[Value, list[Value]] = {}
    for src, dst, _ in region_flows(op):
        sources.setdefault(dst, []).append(src)
    args = [a for region in op.regions for a in region.args if a in sources]
    for _ in range(len(args) + 2):
        changed = False
        for a in args:
            changed |= _set(a, _join(v.type.locality for v in sources[a]), before)
        for region in op.regions:
            infer_block(region, before)
        if not changed:
            break


def infer_block(block: Block, before: Before) -> None:
    for op in block.ops:
        _infer_op(op, before)


@dataclass(frozen=True)
class InferLocality:
    """Give every value a locality (per_replica or mirrored)."""

    name: ClassVar[str] = "infer-locality"
    requires: ClassVar[tuple[str, ...]] = ()

    def apply(self, module: Module) -> bool:
        """Infer in place; True when some value's locality ends up other than it was."""
        before: Before = {}
        for f in module.funcs:
            for a in f.body.args:
                if a.type.locality is None:
                    _set(a, Locality.PER_REPLICA, before)
            infer_block(f.body, before)
        return any(v.type.locality is not loc for v, loc in before.items())

    @staticmethod
    def satisfied(module: Module) -> bool:
        """Whether every value of `module` already has a locality (IR text may carry them)."""
        return all(v.type.locality is not None for v in values(module))
