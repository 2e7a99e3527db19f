"""Padded rows: `sx.rows` marks a padded input batch, `sx.mask_rows` hides its padded rows.

A partial batch is padded to one static row count; each replica's real row count is a program
input. Tracing marks every leaf of a padded batch with `sx.rows %x, %count` (the identity on
values: axis 0 of `x` is the row axis, its first `count` rows are real). The `mask-padding`
pass follows the row axis from these marks, replaces the padded rows of every operand of an op
that combines rows by the op's identity with `sx.mask_rows` (a select: inf/NaN on a padded
row cannot leak, as they would through a multiply), then drops the marks.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import ad

from ..ir import Enum, Int, OpDef, Operation, Str, declare
from .collectives import primitive
from .registry import LOWERINGS, REFERENCE

FILLS = ("zero", "one", "max", "min")  # the identity that replaces padded rows: sum, prod, min, max


def _verify(op: Operation) -> str | None:
    x, count = op.operands
    if count.type.shape != () or not np.issubdtype(count.type.dtype, np.integer):
        return f"the row count must be an integer scalar, not {count.type}"
    if not x.type.same_tensor(op.result.type):
        return f"result type {op.result.type} differs from operand type {x.type}"
    axis = op.attrs.get("axis", 0)
    if not 0 <= axis < len(x.type.shape):
        return f"axis {axis} is out of range for {x.type}"
    return None


declare(OpDef("sx.rows", "Axis 0 of a padded input batch is its row axis; the first `count` "
              "rows are real (the identity on values).", num_operands=2, num_results=1, attrs={},
              verify=_verify))
declare(OpDef("sx.mask_rows", "Replace the padded rows (index >= count along `axis`) by `fill`, "
              "the identity of the op that combines them.", num_operands=2, num_results=1,
              attrs={"axis": Int(minimum=0), "fill": Enum(*FILLS), "reason": Str()}, verify=_verify))

rows_p = primitive("sx.rows")
rows_p.def_abstract_eval(lambda x, count: x)
# the mark is on the primal only: tangents and cotangents pass through unmarked
ad.primitive_jvps[rows_p] = lambda primals, tangents: (rows_p.bind(*primals), tangents[0])


def mark_rows(x, count):
    """Mark traced `x` as a padded batch whose first `count` rows are real."""
    return rows_p.bind(x, count)


def fill_value(fill: str, dtype) -> np.generic:
    """The value `fill` names for `dtype` (max/min: +-inf for floats, the extremes for ints)."""
    dtype = np.dtype(dtype)
    if fill in ("zero", "one"):
        return dtype.type(fill == "one")
    if dtype == np.bool_:
        return np.bool_(fill == "max")
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return dtype.type(info.max if fill == "max" else info.min)
    return dtype.type(np.inf if fill == "max" else -np.inf)


def _lower_mask(op, args, ctx):
    x, count = args
    axis = op.attrs["axis"]
    keep = lax.broadcasted_iota(jnp.int32, x.shape, axis) < count.astype(jnp.int32)
    return [lax.select(keep, x, jnp.full(x.shape, np.asarray(fill_value(op.attrs["fill"], x.dtype)), x.dtype))]


def _reference_mask(op, args, ctx):
    out = []
    for x, count in zip(*args):
        x = np.asarray(x)
        shape = [1] * x.ndim
        shape[op.attrs["axis"]] = x.shape[op.attrs["axis"]]
        keep = (np.arange(x.shape[op.attrs["axis"]]) < int(count)).reshape(shape)
        out.append(np.where(keep, x, fill_value(op.attrs["fill"], x.dtype)).astype(x.dtype))
    return [out]


LOWERINGS["sx.rows"] = lambda op, args, ctx: [args[0]]
REFERENCE["sx.rows"] = lambda op, args, ctx: [list(args[0])]
LOWERINGS["sx.mask_rows"] = _lower_mask
REFERENCE["sx.mask_rows"] = _reference_mask
