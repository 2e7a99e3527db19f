"""propagate-sharding: give values a sharding over the replica's logical devices.

Seeds are the logical-device annotations; shardings then flow forward and backward through
shape-preserving ops (elementwise, collectives), `dot_general`, reductions, broadcasts,
transposes and exact reshapes until nothing changes. The first sharding a value gets wins;
a value nothing reaches is left open (prints no sharding). A no-op for modules without
`logical_axes`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from ..ir import Block, Module, Operation, Sharding, Value
from .rewrite import all_values as values
from ..dialects.logical import ANNOTATIONS, annotation_sharding

Dims = tuple[tuple[str, ...], ...]
_REDUCTIONS = {"jax.reduce_sum", "jax.reduce_max", "jax.reduce_min", "jax.reduce_prod",
               "jax.reduce_and", "jax.reduce_or", "jax.argmax", "jax.argmin"}
_RESHAPES = {"jax.reshape", "jax.squeeze", "jax.expand_dims"}


def _dims(v: Value) -> Dims | None:
    """A value's per-dimension axes (all empty when replicated), or None (open / on one device)."""
    s = v.type.sharding
    if s is None or s.kind == "device":
        return None
    return s.axes if s.kind == "split" else _unsplit(v)


def _unsplit(v: Value) -> Dims:
    """No axes on any dimension of `v` (replicated)."""
    return ((),) * len(v.type.shape)


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
        elif op.name == "jax.dot_general":
            self.dot(op)
        elif op.name in _REDUCTIONS:
            self.reduction(op)
        elif op.name == "jax.broadcast_in_dim":
            self.broadcast(op)
        elif op.name == "jax.transpose":
            perm = op.attrs["permutation"]
            self.map_dims(op.operands[0], op.result, perm)
        elif op.name in _RESHAPES and len(op.operands) == 1:
            self.reshape(op.operands[0], op.result)
        else:
            self.same_shape(op)

    def same_shape(self, op: Operation) -> None:
        shaped = [v for v in op.operands if v.type.shape] + list(op.results)
        if not shaped or any(v.type.shape != op.results[0].type.shape for v in shaped):
            return
        known = next((v.type.sharding for v in shaped if v.type.sharding is not None), None)
        for v in shaped:
            self.set(v, known)

    def map_dims(self, src: Value, dst: Value, perm) -> None:
        """dst dimension i is src dimension perm[i] (and back)."""
        d = _dims(src)
        if d is not None:
            self.set_dims(dst, tuple(d[p] for p in perm))
        d = _dims(dst)
        if d is not None:
            back: list[tuple[str, ...]] = [()] * len(src.type.shape)
            for i, p in enumerate(perm):
                back[p] = d[i]
            self.set_dims(src, tuple(back))

    def dot(self, op: Operation) -> None:
        (lc, rc), (lb, rb) = op.attrs["dimension_numbers"]
        lhs, rhs = op.operands
        lfree = [i for i in range(len(lhs.type.shape)) if i not in lc and i not in lb]
        rfree = [i for i in range(len(rhs.type.shape)) if i not in rc and i not in rb]
        ld, rd, od = _dims(lhs), _dims(rhs), _dims(op.result)
        if ld is not None or rd is not None:
            ld2 = ld or _unsplit(lhs)
            rd2 = rd or _unsplit(rhs)
            out = [ld2[a] or rd2[b] for a, b in zip(lb, rb)] + [ld2[i] for i in lfree] + [rd2[i] for i in rfree]
            self.set_dims(op.result, tuple(out))
            od = _dims(op.result)
        if od is None:
            return
        nb = len(lb)
        for v, batch, contract, free, other, ocontract, offset in (
                (lhs, lb, lc, lfree, rd, rc, nb), (rhs, rb, rc, rfree, ld, lc, nb + len(lfree))):
            dims: list[tuple[str, ...]] = [()] * len(v.type.shape)
            for k, i in enumerate(batch):
                dims[i] = od[k]
            for k, i in enumerate(free):
                dims[i] = od[offset + k]
            for i, j in zip(contract, ocontract):
                dims[i] = other[j] if other is not None else ()
            self.set_dims(v, tuple(dims))

    def reduction(self, op: Operation) -> None:
        src, dst = op.operands[0], op.result
        axes = op.attrs.get("axes", ())
        if not isinstance(axes, tuple):
            axes = (axes,)
        kept = [i for i in range(len(src.type.shape)) if i not in axes]
        d = _dims(src)
        if d is not None and len(dst.type.shape) == len(kept):
            self.set_dims(dst, tuple(d[i] for i in kept))
        d = _dims(dst)
        if d is not None and len(d) == len(kept):
            back: list[tuple[str, ...]] = [()] * len(src.type.shape)
            for k, i in enumerate(kept):
                back[i] = d[k]
            self.set_dims(src, tuple(back))

    def broadcast(self, op: Operation) -> None:
        src, dst = op.operands[0], op.result
        bdims = op.attrs["broadcast_dimensions"]
        d = _dims(src)
        if d is not None:
            out: list[tuple[str, ...]] = [()] * len(dst.type.shape)
            for i, j in enumerate(bdims):
                if src.type.shape[i] == dst.type.shape[j]:
                    out[j] = d[i]
            self.set_dims(dst, tuple(out))
        d = _dims(dst)
        if d is not None:
            self.set_dims(src, tuple(d[j] if src.type.shape[i] == dst.type.shape[j] else ()
                                     for i, j in enumerate(bdims)))

    def reshape(self, src: Value, dst: Value) -> None:
        """Exact only: a split dimension must survive whole, with the same elements before it."""
        for a, b in ((src, dst), (dst, src)):
            d = _dims(a)
            if d is None:
                continue
            out: list[tuple[str, ...]] = [()] * len(b.type.shape)
            for i, axes in enumerate(d):
                if not axes:
                    continue
                before = math.prod(a.type.shape[:i])
                match = [j for j in range(len(b.type.shape)) if b.type.shape[j] == a.type.shape[i]
                         and math.prod(b.type.shape[:j]) == before]
                if not match:
                    break
                out[match[0]] = axes
            else:
                self.set_dims(b, tuple(out))

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
