"""infer-locality: mark every value per_replica or mirrored.

An op's results follow its declaration's locality rule (by default: per_replica if any
operand is); region arguments take their operands' locality, and loop carries are iterated
until they stop changing. Function arguments keep the locality they were declared with.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..ir import Block, Locality, Module, Operation, Value, declaration
from .rewrite import all_values as values


def _set(v: Value, loc: Locality) -> bool:
    if v.type.locality is loc:
        return False
    v.type = v.type.with_locality(loc)
    return True


def _region_inputs(op: Operation, region_index: int) -> list[Locality]:
    """The localities flowing into a region's arguments, before loop carries are considered."""
    locs = [v.type.locality or Locality.MIRRORED for v in op.operands]
    if op.name == "jax.cond":
        return locs[1:]
    if op.name == "jax.while":
        cn, bn = op.attrs["cond_nconsts"], op.attrs["body_nconsts"]
        consts = locs[:cn] if region_index == 0 else locs[cn:cn + bn]
        return consts + locs[cn + bn:]
    return locs


def _infer_op(op: Operation) -> None:
    outs = declaration(op).locality(op, [v.type.locality or Locality.MIRRORED for v in op.operands])
    if op.regions:
        _infer_regions(op)
        # Result i is what the producing regions yield at position i (a while's body; every
        # branch of a cond; a scan's body); a per-replica predicate makes all results differ.
        producing = op.regions[1:] if op.name == "jax.while" else op.regions
        outs = [_join([loc] + [r.results[i].type.locality for r in producing])
                for i, loc in enumerate(outs)]
        predicate = (op.operands[0] if op.name == "jax.cond" else
                     op.regions[0].results[0] if op.name == "jax.while" else None)
        if predicate is not None and predicate.type.locality is Locality.PER_REPLICA:
            outs = [Locality.PER_REPLICA] * len(outs)
    for r, loc in zip(op.results, outs):
        _set(r, loc)


def _join(locs) -> Locality:
    out = Locality.MIRRORED
    for x in locs:
        out = out.join(x)
    return out


def _infer_regions(op: Operation) -> None:
    carries = None  # loop-carried localities, grown until a fixed point
    for _ in range(len(op.operands) + 2):
        for i, region in enumerate(op.regions):
            inputs = _region_inputs(op, i)
            if carries is not None:
                inputs = _carry_join(op, i, inputs, carries)
            for a, loc in zip(region.args, inputs):
                _set(a, loc)
            infer_block(region)
        new = _loop_carries(op)
        if new is None or new == carries:
            return
        carries = new


def _loop_carries(op: Operation) -> list[Locality | None] | None:
    if op.name == "jax.while":
        return [v.type.locality for v in op.regions[1].results]
    if op.name == "jax.scan":
        return [v.type.locality for v in op.regions[0].results[:op.attrs["num_carry"]]]
    return None


def _carry_join(op: Operation, region_index: int, inputs, carries) -> list[Locality]:
    if op.name == "jax.while":
        nconsts = op.attrs["cond_nconsts"] if region_index == 0 else op.attrs["body_nconsts"]
    else:
        nconsts = op.attrs["num_consts"]
    out = list(inputs)
    for k, c in enumerate(carries):
        out[nconsts + k] = out[nconsts + k].join(c)
    return out


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
