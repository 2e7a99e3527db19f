"""canonicalize: fold ops that do nothing, so later passes see one form of each computation.

Identity conversions, reshapes, transposes, broadcasts and squeezes become their operand;
`x + 0`, `x - 0`, `x * 1`, `x / 1` (a splat constant of the result's type) become `x`; a
reshape of a reshape reads the original value.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import Block, Module, Operation, Splat, Value
from .rewrite import all_blocks, replace_uses

# op -> (splat constant that makes it an identity, which operand positions it may sit in)
_NEUTRAL = {"jax.add": (0, (0, 1)), "jax.sub": (0, (1,)), "jax.mul": (1, (0, 1)), "jax.div": (1, (1,))}
_IDENTITIES = {"jax.copy", "jax.copy_p", "jax.optimization_barrier", "jax.convert_element_type",
               "jax.reshape", "jax.transpose", "jax.broadcast_in_dim", "jax.squeeze"}
_CANDIDATES = _IDENTITIES | set(_NEUTRAL)


def _all_equal(c: np.ndarray | Splat, x) -> bool:
    """Whether the constant `c` has elements and all equal `x` (a splat is read, not built)."""
    if isinstance(c, Splat):
        return c.size > 0 and bool(c.value == x)
    return c.size > 0 and bool((c == x).all())


def _identity_of(op: Operation, constants: dict[int, np.ndarray | Splat]) -> Value | None:
    """The value `op`'s result equals, when op is an identity; else None."""
    if len(op.results) != 1 or op.regions:
        return None
    out = op.result.type
    a = op.attrs
    if op.name in ("jax.copy", "jax.copy_p", "jax.optimization_barrier"):
        return op.operands[0] if len(op.operands) == 1 else None
    if op.name in _NEUTRAL and len(op.operands) == 2:
        neutral, positions = _NEUTRAL[op.name]
        for k in positions:
            c = constants.get(id(op.operands[k]))
            other = op.operands[1 - k]
            if c is not None and other.type.same_tensor(out) and _all_equal(c, neutral):
                return other
        return None
    if len(op.operands) != 1 or not op.operands[0].type.same_tensor(out):
        return None
    x = op.operands[0]
    ident = tuple(range(len(out.shape)))
    if op.name == "jax.convert_element_type":
        return x
    if op.name == "jax.reshape" and a.get("dimensions") is None:
        return x
    if op.name == "jax.transpose" and tuple(a.get("permutation", ())) == ident:
        return x
    if op.name == "jax.broadcast_in_dim" and tuple(a.get("broadcast_dimensions", ())) == ident:
        return x
    if op.name == "jax.squeeze" and tuple(a.get("dimensions", ())) == ():
        return x
    return None


def canonicalize_block(block: Block) -> None:
    constants: dict[int, np.ndarray | Splat] = {}
    producer: dict[int, Operation] = {}
    mapping: dict[int, Value] = {}
    kept = []
    for op in block.ops:
        if any(id(v) in mapping for v in op.operands):
            op.operands = [mapping.get(id(v), v) for v in op.operands]
        if op.name == "sx.constant":
            constants[id(op.result)] = op.attrs["value"]
        same = _identity_of(op, constants) if op.name in _CANDIDATES else None
        if same is not None:
            mapping[id(op.result)] = same
            continue
        if op.name == "jax.reshape" and op.attrs.get("dimensions") is None:
            inner = producer.get(id(op.operands[0]))
            if inner is not None and inner.name == "jax.reshape" and inner.attrs.get("dimensions") is None:
                op.operands = [inner.operands[0]]
        if op.name == "jax.reshape":
            producer[id(op.result)] = op
        kept.append(op)
    block.ops[:] = kept
    replace_uses(block, mapping)


@dataclass(frozen=True)
class Canonicalize:
    """Fold identity ops and neutral arithmetic."""

    name: str = "canonicalize"

    def apply(self, module: Module) -> Module:
        for block in all_blocks(module):
            canonicalize_block(block)
        return module
