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


def _set(v: Value, loc: Locality) -> bool:
    if v.type.locality is loc:
        return False
    v.type = v.type.with_locality(loc)
    return True


def _infer_op(op: Operation) -> None:
    if op.regions:
        _infer_regions(op)
    outs = declaration(op).locality(op, [v.type.locality or Locality.MIRRORED for v in op.operands])
    for r, loc in zip(op.results, outs):
        _set(r, loc)


def _join(locs) -> Locality:
    out = Locality.MIRRORED
    for x in locs:
        out = out.join(x or Locality.MIRRORED)
    return out


def _infer_regions(op: Operation) -> None:
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
            changed |= _set(a, _join(v.type.locality for v in sources[a]))
        for region in op.regions:
            infer_block(region)
        if not changed:
            break


def infer_block(block: Block) -> None:
    for op in block.ops:
        _infer_op(op)


@dataclass(frozen=True)
class InferLocality:
    """Give every value a locality (per_replica or mirrored)."""

    name: ClassVar[str] = "infer-locality"
    requires: ClassVar[tuple[str, ...]] = ()

    def apply(self, module: Module) -> bool:
        before = _localities(module)
        for f in module.funcs:
            for a in f.body.args:
                if a.type.locality is None:
                    _set(a, Locality.PER_REPLICA)
            infer_block(f.body)
        return _localities(module) != before

    @staticmethod
    def satisfied(module: Module) -> bool:
        """Whether every value of `module` already has a locality (IR text may carry them)."""
        return None not in _localities(module)


def _localities(module: Module) -> list[Locality | None]:
    return [v.type.locality for v in values(module)]
