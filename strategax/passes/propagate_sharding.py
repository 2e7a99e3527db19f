"""propagate-sharding: give values a sharding over the replica's logical devices.

Seeds are the logical-device annotations; shardings then flow forward and backward along the
axis identities of the one per-op axis table (`axis_rules.rule`, which mask-padding reads too:
elementwise ops, collectives, `dot_general`, reductions, broadcasts, transposes, exact
reshapes, gathers, convolutions...) until nothing changes: a value takes, axis by axis, the
mesh axes of the first sharded value an axis identity links it to. An axis the op combines
or rearranges (a reversed, sorted, sliced or cumulated axis) is linked to nothing and stays
unsplit (so is a result axis of an axis the op combines, a cumsum's or a sort's); an op the
table does not know passes nothing on. The first sharding a value gets
wins; a value nothing reaches is left open (prints no sharding). A no-op for modules without
`logical_axes`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from ..ir import Block, Module, Operation, Sharding, Value
from ..dialects.logical import ANNOTATIONS, annotation_sharding
from .axis_rules import rule
from .rewrite import all_values as values

Dims = tuple[tuple[str, ...], ...]


def _dims(v: Value) -> Dims | None:
    """A value's per-dimension axes (all empty when replicated), or None (open / on one device)."""
    s = v.type.sharding
    if s is None or s.kind == "device":
        return None
    return s.axes if s.kind == "split" else ((),) * len(v.type.shape)


class _Propagator:
    def __init__(self, axes: dict[str, int]):
        self.sizes = axes
        self.changed = False

    def set(self, v: Value, s: Sharding | None, force: bool = False) -> None:
        if s is None or (v.type.sharding is not None and not force) or v.type.sharding == s:
            return
        v.type = v.type.with_sharding(s)
        self.changed = True

    def set_dims(self, v: Value, dims: Dims | None) -> None:
        if dims is None or len(dims) != len(v.type.shape):
            return
        seen, clean = set(), []
        for size, d in zip(v.type.shape, dims):  # drop repeated axes and splits that do not divide
            d = tuple(a for a in d if a in self.sizes and a not in seen)
            if d and size % math.prod(self.sizes[a] for a in d):
                d = ()
            seen.update(d)
            clean.append(d)
        self.set(v, Sharding.split(clean))

    # --- one op, both directions ---------------------------------------------------------
    def op(self, op: Operation) -> None:
        if op.regions or not op.results:
            return
        if op.name in ANNOTATIONS:
            self.set(op.result, annotation_sharding(op), force=True)
            self.set(op.operands[0], op.result.type.sharding)
            return
        r = rule(op)
        if r is None:
            return  # an op the axis table does not know passes no sharding on (XLA decides)
        linked: dict[Value, dict[int, list[tuple[Value, int]]]] = {}
        combined = {(op.operands[k], axis) for k, axis, _ in r.combines}
        results = set(op.results)
        for (a, i), (b, j) in r.same:
            if ((a, i) in combined and b in results) or ((b, j) in combined and a in results):
                continue  # a cumulated or sorted axis: its result axis is not split like it
            linked.setdefault(a, {}).setdefault(i, []).append((b, j))
            linked.setdefault(b, {}).setdefault(j, []).append((a, i))
        known = any(_dims(v) is not None for v in op.operands if v.type.shape)
        for v in [*op.operands, *op.results]:
            if v.type.sharding is not None or not v.type.shape and v not in op.results:
                continue
            dims, found = [], False
            for k in range(len(v.type.shape)):
                axes = ()
                for x, i in linked.get(v, {}).get(k, ()):
                    d = _dims(x)
                    if d is not None:
                        found, axes = True, axes or d[i]
                dims.append(axes)
            if found or (known and v in op.results and not v.type.shape):
                self.set_dims(v, tuple(dims))

    def block(self, block: Block) -> None:
        for _ in range(8):
            self.changed = False
            for op in block.ops:
                self.op(op)
            for op in reversed(block.ops):
                self.op(op)
            if not self.changed:
                break
        for op in block.ops:
            for region in op.regions:
                self.block(region)


@dataclass(frozen=True)
class PropagateSharding:
    """Give values shardings over the logical devices, from the annotations."""

    name: ClassVar[str] = "propagate-sharding"
    requires: ClassVar[tuple[str, ...]] = ()

    def apply(self, module: Module) -> bool:
        axes = module.attrs.get("logical_axes")
        if not axes:
            return False
        before = [v.type.sharding for v in values(module)]
        prop = _Propagator({name: int(size) for name, size in axes})
        for f in module.funcs:
            prop.block(f.body)
        return [v.type.sharding for v in values(module)] != before

    @staticmethod
    def satisfied(module: Module) -> bool:
        """Whether `module` needs no propagation: no logical devices, or every annotation's
        value already carries its sharding."""
        return not module.attrs.get("logical_axes") or all(
            op.result.type.sharding is not None for op in module.walk() if op.name in ANNOTATIONS)
