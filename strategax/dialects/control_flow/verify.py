"""The verifier's checks of the region ops: each region's arguments and results against the
op's operands and results (shapes and dtypes), and `writes` against the variables updated."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ...ir import Operation, TensorType
from .operands import cond_operands, scan_operands, while_operands, region_writes


def check_writes(verify: Callable[[Operation], str | None]) -> Callable[[Operation], str | None]:
    """`verify`, then: `writes` names exactly the variables the regions update."""
    def check(op: Operation) -> str | None:
        problem = verify(op)
        if problem:
            return problem
        declared, actual = tuple(op.attrs.get("writes", ())), region_writes(op.regions)
        if len(set(declared)) != len(declared) or set(declared) != set(actual):
            names = ", ".join(f"@{r.name}" for r in actual) or "none"
            return f"its regions update {names}; `writes` must list exactly those variables"
        return None
    return check


def _mismatch(what: str, got: Sequence, want: Sequence) -> str | None:
    """Why tensor types `got` (of `what`) are not `want` (shapes and dtypes), or None."""
    if len(got) != len(want):
        return f"{what}: {len(got)} values, expected {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"{what}: value {k} is {g}, expected {w.with_locality(None).with_sharding(None)}"
    return None


def _types(values) -> list:
    return [v.type for v in values]


def verify_cond(op: Operation) -> str | None:
    """Why a `jax.cond` is malformed (its branch index; each branch's arguments and yield
    against the operands and results), or None."""
    if not op.regions or not op.operands:
        return "needs a branch index operand and at least one branch"
    index = op.operands[0].type
    if index.shape != () or index.dtype.kind not in "iu":
        return f"the branch index is {index}; it must be an integer scalar"
    operands = _types(cond_operands(op).operands)
    for i, b in enumerate(op.regions):
        problem = (_mismatch(f"branch {i}'s arguments", _types(b.args), operands)
                   or _mismatch(f"branch {i}'s yield", _types(b.results), _types(op.results)))
        if problem:
            return problem
    return None


def verify_while(op: Operation) -> str | None:
    """Why a `jax.while` is malformed (the cond and body regions' arguments and yields against
    the constants and the carry), or None."""
    if len(op.regions) != 2:
        return "needs a cond and a body region"
    if op.attrs["cond_nconsts"] + op.attrs["body_nconsts"] > len(op.operands):
        return f"has {len(op.operands)} operands, fewer than cond_nconsts + body_nconsts"
    g = while_operands(op)
    carry = _types(g.carry)
    cond, body = op.regions
    problem = (_mismatch("the cond region's arguments", _types(cond.args), _types(g.cond_consts) + carry)
               or _mismatch("the body region's arguments", _types(body.args), _types(g.body_consts) + carry)
               or _mismatch("the body region's yield", _types(body.results), carry)
               or _mismatch("the results", _types(op.results), carry))
    if problem:
        return problem
    if len(cond.results) != 1 or cond.results[0].type.shape != () or cond.results[0].type.dtype != np.bool_:
        return "the cond region must yield one bool[]"
    return None


def verify_scan(op: Operation) -> str | None:
    """Why a `jax.scan` is malformed (the body's arguments and yields against the constants, the
    carry and one slice of xs), or None."""
    if len(op.regions) != 1:
        return "needs one body region"
    ncarry, length = op.attrs["num_carry"], op.attrs["length"]
    if op.attrs["num_consts"] + ncarry > len(op.operands) or ncarry > len(op.results):
        return "num_consts and num_carry count more values than the operands or results hold"
    body, g = op.regions[0], scan_operands(op)
    consts, carry, xs = _types(g.consts), _types(g.carry), _types(g.xs)
    for k, x in enumerate(xs):
        if not x.shape or x.shape[0] != length:
            return f"scanned operand {k} is {x}; its leading dimension must be the length, {length}"
    slices = [TensorType(x.shape[1:], x.dtype) for x in xs]
    problem = (_mismatch("the body's arguments", _types(body.args), consts + carry + slices)
               or _mismatch("the body's yielded carry", _types(body.results[:ncarry]), carry)
               or _mismatch("the carried results", _types(op.results[:ncarry]), carry))
    if problem:
        return problem
    stacked = [TensorType((length, *y.type.shape), y.type.dtype) for y in body.results[ncarry:]]
    return _mismatch("the stacked results", _types(op.results[ncarry:]), stacked)


