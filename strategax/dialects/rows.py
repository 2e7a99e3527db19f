"""Padded rows: `sx.rows` marks a padded input batch (or a padded axis of per-replica values
whose shapes differ), `sx.mask_rows` hides its padded rows, `sx.row_ones` counts rows.

A partial batch is padded to one static row count; each replica's real row count is a program
input. Tracing marks every leaf of a padded batch with `sx.rows %x, %count` (the identity on
values: axis 0 of `x` is the row axis, its first `count` rows are real). The `mask-padding`
pass follows the row axis from these marks, replaces the padded rows of every operand of an op
that combines rows by the op's identity with `sx.mask_rows` (a select: inf/NaN on a padded
row cannot leak, as they would through a multiply), then drops the marks. `sx.row_ones %x` is
a 1 per row of `x` whose axis is `x`'s row axis, so the sum of it (a mean's divisor) counts
only real rows once mask-padding masks that sum; an op of its own, no fold can cut it from `x`.

Per-replica values whose shapes differ on other axes (TensorFlow's different-shape values) are
padded to the largest extent along each differing axis and marked once per axis:
`sx.rows %x, %extent {axis = k, extent}` (`extent`: the count is that value's real extent, an
input of its own, not a batch's row count). The same analysis follows every marked axis.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import core as jax_core
from jax import lax
from jax.interpreters import ad

from ..ir import Enum, Flag, Int, OpDef, Operation, Str, declare
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
    if not isinstance(axis, int) or not 0 <= axis < len(x.type.shape):
        return f"axis {axis} is out of range for {x.type}"
    return None


declare(OpDef("sx.rows", "Axis `axis` (default 0) of `x` is padded: its first `count` entries are "
              "real (the identity on values); `extent`: a different-shape value's extent, not a batch's "
              "row count.", num_operands=2, num_results=1,
              attrs={"axis": Int(minimum=0, required=False), "extent": Flag()}, verify=_verify))
declare(OpDef("sx.mask_rows", "Replace the padded rows (index >= count along `axis`) by `fill`, "
              "the identity of the op that combines them.", num_operands=2, num_results=1,
              attrs={"axis": Int(minimum=0), "fill": Enum(*FILLS), "reason": Str()}, verify=_verify))



def _verify_row_ones(op: Operation) -> str | None:
    x, out = op.operands[0].type, op.result.type
    axis = op.attrs.get("axis", 0)
    if len(x.shape) == 0:
        return f"sx.row_ones takes a value with rows (rank >= 1), not {x}"
    if not isinstance(axis, int) or not 0 <= axis < len(x.shape):
        return f"axis {axis} is out of range for {x}"
    if tuple(out.shape) != (x.shape[axis],) or out.dtype != x.dtype:
        return f"result type {out} is not one {x.dtype} per entry of axis {axis} of {x}"
    return None


def _operand_locality(op: Operation, localities) -> list:
    """Per-replica rows count per replica (the count differs where the real rows do)."""
    return [localities[0]]


declare(OpDef("sx.row_ones", "A 1 per row (along `axis`, default 0) of the operand: its rows are the "
              "operand's, so a sum of it counts them (real rows only, once mask-padding masks the sum).",
              num_operands=1, num_results=1, attrs={"axis": Int(minimum=0, required=False)},
              locality=_operand_locality, verify=_verify_row_ones))

rows_p = primitive("sx.rows")
rows_p.def_abstract_eval(lambda x, count, **params: x)
# the mark is on the primal only: tangents and cotangents pass through unmarked
ad.primitive_jvps[rows_p] = lambda primals, tangents: (rows_p.bind(*primals), tangents[0])


def mark_rows(x, count, axis: int = 0, extent: bool = False):
    """Mark traced `x` as a padded batch whose first `count` rows are real (along `axis`;
    `extent`: the real extent of a value whose shape differs across replicas)."""
    params = {**({"axis": axis} if axis else {}), **({"extent": True} if extent else {})}
    return rows_p.bind(x, count, **params)


row_ones_p = primitive("sx.row_ones")
row_ones_p.def_abstract_eval(lambda x, axis=0: jax_core.ShapedArray((x.shape[axis],), x.dtype))
# a constant 1 per row: its derivative is zero (JAX calls this only for a float operand)
ad.primitive_jvps[row_ones_p] = lambda primals, tangents, axis=0: (
    row_ones_p.bind(*primals, **({"axis": axis} if axis else {})),
    jnp.zeros((primals[0].shape[axis],), primals[0].dtype))


def row_ones(x, axis: int = 0):
    """A 1 (of `x`'s dtype) per row (entry of `axis`) of traced `x`, following `x`'s rows (see
    the module doc)."""
    return row_ones_p.bind(x, **({"axis": axis} if axis else {}))


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
    if type(count) is np.ndarray and count.size == 1 and int(count) >= x.shape[axis]:
        return [x]  # a known count of every row (a full batch of a loop's program for full calls)
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
LOWERINGS["sx.row_ones"] = lambda op, args, ctx: [
    jnp.ones((args[0].shape[op.attrs.get("axis", 0)],), args[0].dtype)]
REFERENCE["sx.row_ones"] = lambda op, args, ctx: [
    [np.ones((np.shape(x)[op.attrs.get("axis", 0)],), np.asarray(x).dtype) for x in args[0]]]
LOWERINGS["sx.mask_rows"] = _lower_mask
REFERENCE["sx.mask_rows"] = _reference_mask
