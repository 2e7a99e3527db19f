"""canonicalize: fold ops that do nothing, so later passes see one form of each computation.

`RULES` maps an op name to the value its result equals when it is an identity (None: keep the
op); one line each, its algebra in the comment. Neutral constants are splat `sx.constant`s of
the result's type. A reshape of a reshape reads the original value (`_reshape`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar

import numpy as np

from ..ir import Module, Operation, Splat, Value
from .rewrite import BlockRewriter, rewrite_blocks

Constants = dict[Value, "np.ndarray | Splat"]
Rule = Callable[[Operation, Constants], "Value | None"]


def _all_equal(c: np.ndarray | Splat, x) -> bool:
    """Whether the constant `c` has elements and all equal `x` (a splat is read, not built)."""
    if isinstance(c, Splat):
        return c.size > 0 and bool(c.value == x)
    if c.size == 1:  # a scalar (the common case) compared without building an array
        return bool(c.item() == x)
    return c.size > 0 and bool((c == x).all())


def _operand(op: Operation, _: Constants) -> Value | None:
    """The single operand, whatever its type (a copy or a barrier of one value)."""
    return op.operands[0] if len(op.operands) == 1 else None


def _same_type_if(test: Callable[[Operation], bool]) -> Rule:
    """The single operand when the result has its type and `test(op)` holds."""
    def rule(op: Operation, _: Constants) -> Value | None:
        if len(op.operands) == 1 and op.operands[0].type.same_tensor(op.result.type) and test(op):
            return op.operands[0]
        return None
    return rule


def _neutral(neutral: int, positions: tuple[int, ...]) -> Rule:
    """The other operand when the operand at one of `positions` is the constant `neutral`."""
    def rule(op: Operation, constants: Constants) -> Value | None:
        if len(op.operands) != 2:
            return None
        for k in positions:
            c, other = constants.get(op.operands[k]), op.operands[1 - k]
            if c is not None and other.type.same_tensor(op.result.type) and _all_equal(c, neutral):
                return other
        return None
    return rule


def _identity_dims(key: str) -> Callable[[Operation], bool]:
    return lambda op: tuple(op.attrs.get(key, ())) == tuple(range(len(op.result.type.shape)))


RULES: dict[str, Rule] = {
    "jax.copy": _operand,                                                     # copy(x) = x
    "jax.copy_p": _operand,                                                   # copy_p(x) = x
    "jax.optimization_barrier": _operand,                                     # barrier(x) = x
    "jax.convert_element_type": _same_type_if(lambda op: True),               # convert(x: T, T) = x
    "jax.reshape": _same_type_if(lambda op: op.attrs.get("dimensions") is None),  # reshape(x, shape(x)) = x
    "jax.transpose": _same_type_if(_identity_dims("permutation")),            # transpose(x, (0..n)) = x
    "jax.broadcast_in_dim": _same_type_if(_identity_dims("broadcast_dimensions")),  # broadcast(x, shape(x)) = x
    "jax.squeeze": _same_type_if(lambda op: tuple(op.attrs.get("dimensions", ())) == ()),  # squeeze(x, ()) = x
    "jax.add": _neutral(0, (0, 1)),                                           # x + 0 = 0 + x = x
    "jax.sub": _neutral(0, (1,)),                                             # x - 0 = x
    "jax.mul": _neutral(1, (0, 1)),                                           # x * 1 = 1 * x = x
    "jax.div": _neutral(1, (1,)),                                             # x / 1 = x
}


def _reshape(op: Operation, rw: BlockRewriter) -> None:
    """reshape(reshape(x)) = reshape(x): the outer reshape reads `x`."""
    inner = rw.producer(op.operands[0])
    if inner is not None and inner.name == "jax.reshape" and inner.attrs.get("dimensions") is None:
        rw.set_operands(op, [inner.operands[0]])


def _is_sum(op: Operation | None) -> bool:
    return op is not None and op.name == "jax.reduce_sum"


def canonicalize_block(rw: BlockRewriter) -> None:
    """Fold the identities of `rw`'s block."""
    constants: Constants = {}
    for op in rw.ops():
        if op.name == "sx.constant":
            constants[op.result] = op.attrs["value"]
        rule = RULES.get(op.name)
        if op.name == "jax.div" and _is_sum(rw.producer(op.operands[0])):
            continue  # sum / 1 is a mean of one element: mask-padding may make the 1 a real count of 0
        same = rule(op, constants) if rule is not None and len(op.results) == 1 and not op.regions else None
        if same is not None:
            rw.replace(op, [same])
        elif op.name == "jax.reshape" and op.attrs.get("dimensions") is None:
            _reshape(op, rw)


@dataclass(frozen=True)
class Canonicalize:
    """Fold identity ops and neutral arithmetic."""

    name: ClassVar[str] = "canonicalize"
    requires: ClassVar[tuple[str, ...]] = ()

    def apply(self, module: Module) -> bool:
        return rewrite_blocks(module, canonicalize_block)
