"""NumPy rules for the reference interpreter's most common JAX primitives (elementwise
arithmetic, comparisons, reductions, dot_general, shape changes). Eager JAX compiles every
distinct (primitive, parameters, shapes) once, about 50 ms of XLA each, which made the
interpreter the slowest part of a test's IR check; NumPy computes the same ops without
compiling, and is a reference even further from the XLA code under test.

A rule takes the op's JAX parameters, one replica's operands as NumPy arrays and the op's
result types, and returns the results, or None where the rule does not cover the case (an
integer division, a bfloat16 reduction, a float-to-int conversion: semantics NumPy does not
share with XLA); the interpreter then binds the primitive in eager JAX as before. Half-float
elementwise ops compute in float32 and round once, as XLA's CPU backend does per op.
tests/test_reference_numpy.py checks every rule against eager JAX."""
from __future__ import annotations

from typing import Callable, Sequence

import ml_dtypes
import numpy as np

from ..dialects import bind_params
from ..errors import REPORT, InternalError
from ..ir import Operation

HALF = frozenset({np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)})
WIDE_FLOATS = frozenset({np.dtype(np.float32), np.dtype(np.float64)})


def _wide(x: np.ndarray) -> np.ndarray:
    """`x` in a type NumPy computes in natively (half floats as float32)."""
    return x.astype(np.float32) if x.dtype in HALF else x


def _is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or dtype in HALF  # NumPy's kind for bfloat16 is "V"


def _floats(args: Sequence[np.ndarray]) -> bool:
    return all(_is_float(a.dtype) for a in args)


def _unary(fn: Callable, floats_only: bool = True) -> Callable:
    def rule(params, args, types):
        if floats_only and not _floats(args):
            return None
        with np.errstate(all="ignore"):
            return [fn(_wide(args[0]))]
    return rule


def _binary(fn: Callable, floats_only: bool = False) -> Callable:
    def rule(params, args, types):
        if floats_only and not _floats(args):
            return None
        with np.errstate(all="ignore"):
            return [fn(_wide(args[0]), _wide(args[1]))]
    return rule


def _integer_pow(params, args, types):
    x = args[0]
    if not _is_float(x.dtype):
        return None
    with np.errstate(all="ignore"):
        return [np.power(_wide(x), np.asarray(params["y"], np.float32 if x.dtype in HALF else x.dtype))]


def _convert(params, args, types):
    x, new = args[0], np.dtype(params["new_dtype"])
    if x.dtype.kind == "c" or new.kind == "c" or (_is_float(x.dtype) and new.kind in "iu"):
        return None  # complex, and float to int (XLA saturates, NaN to 0): eager JAX
    if new.kind == "b":
        return [x != 0]
    return [x.astype(new)]


def _select_n(params, args, types):
    which, cases = args[0], args[1:]
    if which.dtype.kind == "b":
        return [np.where(which, cases[1], cases[0]) if len(cases) == 2 else cases[0]]
    return [np.choose(which.astype(np.intp), cases)]


def _reduce(fn: Callable, needs_elements: bool) -> Callable:
    def rule(params, args, types):
        x, axes = args[0], tuple(params["axes"])
        if x.dtype in HALF or x.dtype.kind in "cb" or (needs_elements and any(x.shape[a] == 0 for a in axes)):
            return None  # half floats accumulate in their own type in XLA; an empty max is -inf there
        return [fn(x, axis=axes)]
    return rule


def _dot_general(params, args, types):
    lhs, rhs = args
    (lc, rc), (lb, rb) = params["dimension_numbers"]
    if not (lhs.dtype in WIDE_FLOATS and rhs.dtype in WIDE_FLOATS):
        return None
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    lsub = [next(letters) for _ in range(lhs.ndim)]
    rsub = [next(letters) for _ in range(rhs.ndim)]
    for a, b in zip(list(lc) + list(lb), list(rc) + list(rb)):
        rsub[b] = lsub[a]
    batch = [lsub[a] for a in lb]
    free_l = [lsub[i] for i in range(lhs.ndim) if i not in lc and i not in lb]
    free_r = [rsub[i] for i in range(rhs.ndim) if i not in rc and i not in rb]
    spec = f"{''.join(lsub)},{''.join(rsub)}->{''.join(batch + free_l + free_r)}"
    return [np.einsum(spec, lhs, rhs, optimize=True)]


def _broadcast_in_dim(params, args, types):
    x, shape = args[0], tuple(params["shape"])
    expanded = [1] * len(shape)
    for i, d in enumerate(params["broadcast_dimensions"]):
        expanded[d] = x.shape[i]
    return [np.broadcast_to(x.reshape(expanded), shape)]


def _reshape(params, args, types):
    return None if params.get("dimensions") is not None else [args[0].reshape(params["new_sizes"])]


def _iota(params, args, types):
    shape, dim = tuple(params["shape"]), params["dimension"]
    line = np.arange(shape[dim], dtype=np.dtype(params["dtype"]))
    return [np.broadcast_to(line.reshape([-1 if i == dim else 1 for i in range(len(shape))]), shape)]


def _slice(params, args, types):
    strides = params["strides"] or (1,) * args[0].ndim
    return [args[0][tuple(slice(s, e, k) for s, e, k in zip(params["start_indices"], params["limit_indices"],
                                                               strides))]]


def _starts(x_shape, sizes, indices) -> list[int]:
    """Dynamic start indices clamped into the operand, as XLA does."""
    return [min(max(int(i), 0), d - s) for i, d, s in zip(indices, x_shape, sizes)]


def _dynamic_slice(params, args, types):
    x, sizes = args[0], params["slice_sizes"]
    starts = _starts(x.shape, sizes, args[1:])
    return [x[tuple(slice(s, s + n) for s, n in zip(starts, sizes))]]


def _dynamic_update_slice(params, args, types):
    x, update = args[0], args[1]
    starts = _starts(x.shape, update.shape, args[2:])
    out = np.array(x, copy=True)
    out[tuple(slice(s, s + n) for s, n in zip(starts, update.shape))] = update
    return [out]


NUMPY_RULES: dict[str, Callable] = {
    "add": _binary(np.add), "add_any": _binary(np.add), "sub": _binary(np.subtract),
    "mul": _binary(np.multiply), "div": _binary(np.divide, floats_only=True),
    "max": _binary(np.maximum), "min": _binary(np.minimum), "pow": _binary(np.power, floats_only=True),
    "eq": _binary(np.equal), "ne": _binary(np.not_equal), "lt": _binary(np.less),
    "le": _binary(np.less_equal), "gt": _binary(np.greater), "ge": _binary(np.greater_equal),
    "and": _binary(np.bitwise_and), "or": _binary(np.bitwise_or), "xor": _binary(np.bitwise_xor),
    "not": _unary(np.invert, floats_only=False),
    "neg": _unary(np.negative, floats_only=False), "abs": _unary(np.abs, floats_only=False),
    "sign": _unary(np.sign), "exp": _unary(np.exp), "log": _unary(np.log), "tanh": _unary(np.tanh),
    "sqrt": _unary(np.sqrt), "rsqrt": _unary(lambda x: 1 / np.sqrt(x)), "log1p": _unary(np.log1p),
    "expm1": _unary(np.expm1), "exp2": _unary(np.exp2), "square": _unary(np.square),
    "logistic": _unary(lambda x: 1 / (1 + np.exp(-x))), "is_finite": _unary(np.isfinite),
    "floor": _unary(np.floor), "ceil": _unary(np.ceil), "sin": _unary(np.sin), "cos": _unary(np.cos),
    "integer_pow": _integer_pow, "convert_element_type": _convert, "select_n": _select_n,
    "reduce_sum": _reduce(np.sum, False), "reduce_max": _reduce(np.max, True),
    "reduce_min": _reduce(np.min, True), "dot_general": _dot_general,
    "broadcast_in_dim": _broadcast_in_dim, "reshape": _reshape, "iota": _iota,
    "transpose": lambda params, args, types: [np.transpose(args[0], params["permutation"])],
    "squeeze": lambda params, args, types: [np.squeeze(args[0], tuple(params["dimensions"]))],
    "stack": lambda params, args, types: [np.stack(args, params["axis"])],
    "concatenate": lambda params, args, types: [np.concatenate(args, params["dimension"])],
    "slice": _slice, "dynamic_slice": _dynamic_slice, "dynamic_update_slice": _dynamic_update_slice,
}


def numpy_reference(op: Operation, args: list[list], num_replicas: int) -> list[list] | None:
    """Each replica's results of the generic op `op` computed by its NumPy rule, or None when it
    has none for this case."""
    if not op.name.startswith("jax.") or op.regions or op.name[4:] not in NUMPY_RULES:
        return None
    params = bind_params(op, [])
    types = [r.type for r in op.results]
    per_replica = []
    for r in range(num_replicas):
        outs = apply_rule(op.name[4:], params, [x[r] for x in args], types)
        if outs is None:
            return None
        per_replica.append(outs)
    return [[per_replica[r][k] for r in range(num_replicas)] for k in range(len(types))]


def apply_rule(primitive: str, params: dict, args: Sequence, types: Sequence) -> list[np.ndarray] | None:
    """The NumPy rule for `primitive` on one replica's operands, each result checked to have its
    type's shape and given its dtype (`types`: objects with `shape` and `dtype`); None where the
    rule does not cover the case."""
    outs = NUMPY_RULES[primitive](params, [np.asarray(a) for a in args], types)
    if outs is None:
        return None
    results = []
    for out, t in zip(outs, types):
        out = np.asarray(out)
        if tuple(out.shape) != tuple(t.shape):
            raise InternalError(f"internal error in the reference interpreter: the NumPy rule for `{primitive}` "
                                f"gave shape {out.shape}, the op's result has shape {tuple(t.shape)}", REPORT)
        results.append(out.astype(t.dtype, copy=False))
    return results
