"""What a divisor is (step 4 of mask-padding): its value when it is computed from constants
alone, or whether a runtime value (an argument, a variable, the data) reaches it.

A library's mean traces its divisor from constants (Keras' `divide_no_nan(total, prod(shape))`).
Inside a loop body or a branch those constants arrive as region arguments: the divisor is
followed through `control_flow.invariant_flows` (the loop's constant operands and the
branches' operands, cut by `operand_groups`) to the enclosing block's value. A loop carry the
body changes is never folded: it is not one value."""
from __future__ import annotations

import numpy as np

from ...dialects.control_flow import invariant_flows, region_flows
from ...ir import Block, Splat, Value

MAX_DEPTH = 64  # ops between a divisor and its constants: a divisor, not a program
MAX_WALK = 4096  # values visited to find a runtime source; beyond it the divisor counts as runtime
CONSTANT_LEAVES = ("sx.constant", "jax.iota")

_FOLD_BINARY = {"jax.sub": np.subtract, "jax.add": np.add, "jax.mul": np.multiply, "jax.max": np.maximum,
                "jax.min": np.minimum, "jax.eq": np.equal, "jax.ne": np.not_equal, "jax.pow": np.power,
                "jax.lt": np.less, "jax.le": np.less_equal, "jax.gt": np.greater, "jax.ge": np.greater_equal}
_FOLD_UNARY = {"jax.neg": np.negative, "jax.abs": np.abs, "jax.sqrt": np.sqrt, "jax.exp": np.exp,
               "jax.log": np.log, "jax.floor": np.floor, "jax.ceil": np.ceil, "jax.sign": np.sign,
               "jax.square": np.square, "jax.rsqrt": lambda a: 1 / np.sqrt(a)}


class _TooDeep(Exception):
    """A divisor further than MAX_DEPTH ops from its constants: not folded."""


class Divisors:
    """Folds values of the module's blocks from constants, through region arguments."""

    def __init__(self, every: list[Block]):
        self.producer = {r: op for b in every for op in b.ops for r in op.results}
        self.outer: dict[Value, Value] = {}  # region argument (or result) -> the outer value it holds
        self.inflow: dict[Value, list[Value]] = {}  # region argument (or result) -> every value flowing in
        self.memo: dict[Value, np.ndarray | None] = {}
        for b in every:
            for op in b.ops:
                if op.regions:
                    self.outer.update((inner, x) for x, inner, _ in invariant_flows(op))
                    for src, dst, _ in region_flows(op):
                        self.inflow.setdefault(dst, []).append(src)

    def scalar(self, v: Value) -> float | None:
        """The one value every element of `v` has, when `v` is computed from constants alone."""
        value = self.value(v)
        if value is None:
            return None
        values = np.unique(value)
        return float(values[0]) if values.size == 1 else None

    def value(self, v: Value) -> np.ndarray | None:
        """`v`'s value when it is computed from constants alone by a few elementwise ops and
        reductions, else None."""
        try:
            return self._value(v, 0)
        except _TooDeep:
            return None

    def _value(self, v: Value, depth: int) -> np.ndarray | None:
        while v in self.outer:
            v = self.outer[v]
        if v in self.memo:
            return self.memo[v]
        if depth > MAX_DEPTH:
            raise _TooDeep
        op = self.producer.get(v)
        out = None
        if op is None or op.regions:
            pass
        elif op.name == "sx.constant":
            c = op.attrs["value"]
            out = np.broadcast_to(c.value, c.shape) if isinstance(c, Splat) else np.asarray(c)
        elif op.name == "jax.iota":
            shape, axis = tuple(v.type.shape), op.attrs["dimension"]
            ramp = np.arange(shape[axis], dtype=v.type.dtype)
            out = np.broadcast_to(ramp.reshape([-1 if i == axis else 1 for i in range(len(shape))]), shape)
        else:
            maybe = [self._value(x, depth + 1) for x in op.operands]
            args = [a for a in maybe if a is not None]
            if len(args) == len(maybe):
                try:
                    with np.errstate(all="ignore"):
                        out = _fold(op, args, v)
                except (KeyError, TypeError, ValueError, IndexError):  # attributes this fold does not know
                    out = None
        self.memo[v] = out
        return out

    def from_runtime(self, v: Value) -> bool:
        """Whether a value known only when the program runs reaches `v`: an argument of the
        entry function, a variable, a collective's or a random draw's result, a loop carry or
        a scanned slice fed by one. False: `v` is computed from constants alone."""
        todo, seen = [v], {v}
        while todo:
            if len(seen) > MAX_WALK:
                return True
            x = todo.pop()
            if x in self.outer:
                nxt = [self.outer[x]]
            elif x in self.inflow:
                nxt = self.inflow[x]
            else:
                op = self.producer.get(x)
                if op is None:  # an argument of the entry function
                    return True
                if not op.operands and op.name not in CONSTANT_LEAVES:
                    return True  # a variable read, a replica id, ...
                nxt = list(op.operands)
            for y in nxt:
                if y not in seen:
                    seen.add(y)
                    todo.append(y)
        return False


def _fold(op, args: list[np.ndarray], v: Value) -> np.ndarray | None:
    name = op.name
    shape = tuple(v.type.shape)
    if name == "jax.convert_element_type":
        return args[0].astype(v.type.dtype)
    if name == "jax.broadcast_in_dim":
        a, dims = args[0], tuple(op.attrs["broadcast_dimensions"])
        return np.broadcast_to(a.reshape([a.shape[dims.index(i)] if i in dims else 1 for i in range(len(shape))]),
                               shape)
    if name == "jax.squeeze" or (name == "jax.reshape" and op.attrs.get("dimensions") is None):
        return np.reshape(args[0], shape)
    if name in _FOLD_BINARY and len(args) == 2:
        return _FOLD_BINARY[name](args[0], args[1])
    if name in _FOLD_UNARY and len(args) == 1:
        return _FOLD_UNARY[name](args[0])
    if name == "jax.integer_pow" and len(args) == 1:
        return np.power(args[0], op.attrs["y"])
    if name == "jax.div" and len(args) == 2:
        return None if np.any(args[1] == 0) else np.divide(args[0], args[1])
    if name == "jax.select_n" and len(args) >= 2:
        return np.choose(np.asarray(args[0], int), args[1:])
    if name in ("jax.reduce_prod", "jax.reduce_sum", "jax.reduce_max", "jax.reduce_min") and len(args) == 1:
        fold = {"jax.reduce_prod": np.prod, "jax.reduce_sum": np.sum, "jax.reduce_max": np.max,
                "jax.reduce_min": np.min}[name]
        return np.asarray(fold(args[0], axis=tuple(op.attrs["axes"])))
    return None
