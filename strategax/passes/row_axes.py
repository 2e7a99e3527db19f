"""How each op moves axes, for `mask-padding`: which operand axes are the same axis as which
result (or other operand) axes, which operand axes the op combines, and which it rearranges
in a way the padded rows cannot be followed through.

`rule(op)` gives an `AxisRule`, or None for an op the analysis does not know (an error if a
row axis reaches it). Axis identities hold in both directions, so a row axis found on any
value of a chain of row-wise ops (the forward pass or the backward pass jax.grad made of it)
is found on all of them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

from ..ir import Operation, Value

Axis = tuple[Value, int]

ELEMENTWISE = frozenset(f"jax.{n}" for n in (
    "add", "sub", "mul", "div", "rem", "pow", "max", "min", "atan2", "nextafter", "and", "or",
    "xor", "not", "eq", "ne", "lt", "le", "gt", "ge", "neg", "sign", "floor", "ceil", "round",
    "is_finite", "exp", "exp2", "log", "log1p", "expm1", "tanh", "logistic", "sin", "cos", "tan",
    "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "sqrt", "rsqrt", "cbrt",
    "square", "abs", "integer_pow", "erf", "erfc", "erf_inv", "lgamma", "digamma", "igamma",
    "igammac", "bessel_i0e", "bessel_i1e", "real", "imag", "conj", "complex",
    "convert_element_type", "bitcast_convert_type", "reduce_precision", "stop_gradient",
    "select_n", "clamp", "add_any", "copy", "copy_p", "population_count", "clz", "shift_left",
    "shift_right_logical", "shift_right_arithmetic", "polygamma", "zeta",
    "regularized_incomplete_beta", "random_gamma_grad")) | {
    "sx.all_reduce", "sx.split_to_logical_devices", "sx.assign_to_logical_device",
    "sx.replicate_to_logical_devices"}

# reduction -> the identity that fills padded rows (sx.mask_rows `fill`)
REDUCTIONS = {"jax.reduce_sum": "zero", "jax.reduce_prod": "one", "jax.reduce_max": "min",
              "jax.reduce_min": "max", "jax.reduce_and": "one", "jax.reduce_or": "zero",
              "jax.reduce_xor": "zero", "jax.argmax": "min", "jax.argmin": "max"}
CUMULATIVE = {"jax.cumsum": "zero", "jax.cumprod": "one", "jax.cummax": "min", "jax.cummin": "max",
              "jax.cumlogsumexp": "min"}


@dataclass
class AxisRule:
    same: list[tuple[Axis, Axis]] = field(default_factory=list)  # axes that are one axis
    combines: list[tuple[int, int, str]] = field(default_factory=list)  # (operand, axis, fill)
    opaque: list[Axis] = field(default_factory=list)  # axes rearranged beyond following


def _shape(v: Value) -> tuple[int, ...]:
    return tuple(v.type.shape)


def _elementwise(op: Operation) -> AxisRule:
    r = AxisRule()
    for res in op.results:
        for x in op.operands:
            if len(_shape(x)) == len(_shape(res)):
                r.same += [((x, i), (res, i)) for i, (a, b) in enumerate(zip(_shape(x), _shape(res)))
                           if a == b]
    return r


def _kept(op: Operation, x: Value, dims, res: Value) -> AxisRule:
    """Operand axes not in `dims` are the result's axes, in order."""
    kept = [i for i in range(len(_shape(x))) if i not in dims]
    return AxisRule(same=[((x, i), (res, j)) for j, i in enumerate(kept)])


def _full(x: Value, res: Value, keep) -> AxisRule:
    """Axis i of x is axis i of res where `keep(i)`; the others cannot be followed."""
    r = AxisRule()
    for i in range(len(_shape(x))):
        (r.same.append(((x, i), (res, i))) if keep(i) else r.opaque.append((x, i)))
    return r


def _reshape(x: Value, res: Value) -> AxisRule:
    """An axis survives a reshape when it keeps its size and the product of the axes before it."""
    before, pa = {}, 1
    for i, d in enumerate(_shape(x)):
        before[(pa, d)] = i
        pa *= d
    r, pb, matched = AxisRule(), 1, set()
    for j, d in enumerate(_shape(res)):
        i = before.get((pb, d))
        if i is not None and i not in matched:
            r.same.append(((x, i), (res, j)))
            matched.add(i)
        pb *= d
    r.opaque = [(x, i) for i in range(len(_shape(x))) if i not in matched and _shape(x)[i] != 1]
    return r


def _dot_general(op: Operation) -> AxisRule:
    lhs, rhs = op.operands[:2]
    (lc, rc), (lb, rb) = op.attrs["dimension_numbers"]
    res = op.result
    r = AxisRule()
    r.same += [((lhs, a), (rhs, b)) for a, b in zip(lc, rc)]
    r.same += [((lhs, a), (res, k)) for k, a in enumerate(lb)]
    r.same += [((rhs, b), (res, k)) for k, b in enumerate(rb)]
    out = len(lb)
    for x, used in ((lhs, set(lc) | set(lb)), (rhs, set(rc) | set(rb))):
        for i in range(len(_shape(x))):
            if i not in used:
                r.same.append(((x, i), (res, out)))
                out += 1
    r.combines = [(0, a, "zero") for a in lc] + [(1, b, "zero") for b in rc]
    return r


def _gather(op: Operation) -> AxisRule:
    x, idx = op.operands
    d, res = op.attrs["dimension_numbers"], op.result
    r = AxisRule()
    batch_out = [j for j in range(len(_shape(res))) if j not in d.offset_dims]
    idx_dims = list(range(len(_shape(idx)) - 1))  # the last axis holds the index vectors
    r.same += [((idx, i), (res, j)) for i, j in zip(idx_dims, batch_out)]
    r.same += [((x, a), (idx, b)) for a, b in zip(d.operand_batching_dims, d.start_indices_batching_dims)]
    windows = [i for i in range(len(_shape(x))) if i not in d.collapsed_slice_dims
               and i not in d.operand_batching_dims]
    for i, j in zip(windows, d.offset_dims):
        if op.attrs["slice_sizes"][i] == _shape(x)[i] and i not in d.start_index_map:
            r.same.append(((x, i), (res, j)))
        else:
            r.opaque.append((x, i))
    r.opaque += [(x, i) for i in d.collapsed_slice_dims]
    return r


def _scatter(op: Operation, fill: str | None) -> AxisRule:
    x, idx, upd = op.operands[:3]
    d, res = op.attrs["dimension_numbers"], op.result
    r = _full(x, res, lambda i: True)
    scatter_dims = [j for j in range(len(_shape(upd))) if j not in d.update_window_dims]
    idx_dims = list(range(len(_shape(idx)) - 1))
    r.same += [((idx, i), (upd, j)) for i, j in zip(idx_dims, scatter_dims)]
    r.same += [((x, a), (idx, b)) for a, b in zip(d.operand_batching_dims, d.scatter_indices_batching_dims)]
    windows = [i for i in range(len(_shape(x))) if i not in d.inserted_window_dims
               and i not in d.operand_batching_dims]
    for i, j in zip(windows, d.update_window_dims):
        if _shape(upd)[j] == _shape(x)[i] and i not in d.scatter_dims_to_operand_dims:
            r.same.append(((x, i), (upd, j)))
    # update rows scattered to positions that are not rows: combined (masked), or opaque
    batched = {scatter_dims[i] for i in d.scatter_indices_batching_dims if i < len(scatter_dims)}
    for j in scatter_dims:
        if j not in batched:
            (r.combines.append((2, j, fill)) if fill else r.opaque.append((upd, j)))
    return r


def _window(a: dict, i: int) -> bool:
    """Whether a pooling window leaves axis i alone (size 1, stride 1, no padding or dilation)."""
    dil = [a.get(k) or (1,) * len(a["window_dimensions"]) for k in ("base_dilation", "window_dilation")]
    return (a["window_dimensions"][i], a["window_strides"][i], tuple(a["padding"][i]), dil[0][i], dil[1][i]) \
        == (1, 1, (0, 0), 1, 1)


def _conv(op: Operation) -> AxisRule:
    """A convolution is row-wise in the lhs batch axis; its input-feature axes (paired on lhs
    and rhs) are contracted, which is where jax.grad puts the rows for a kernel gradient."""
    lhs, rhs = op.operands[:2]
    a, res = op.attrs, op.result
    ls, rs, os_ = a["dimension_numbers"]
    grouped = a.get("feature_group_count", 1) != 1 or a.get("batch_group_count", 1) != 1
    r = AxisRule(opaque=[(lhs, d) for d in ls[2:]] + [(rhs, d) for d in rs[2:]])
    if grouped:
        r.opaque += [(lhs, ls[0]), (lhs, ls[1]), (rhs, rs[0]), (rhs, rs[1])]
        return r
    r.same = [((lhs, ls[0]), (res, os_[0])), ((rhs, rs[0]), (res, os_[1])), ((lhs, ls[1]), (rhs, rs[1]))]
    r.combines = [(0, ls[1], "zero"), (1, rs[1], "zero")]
    return r


SCATTER_FILLS = {"jax.scatter-add": "zero", "jax.scatter_add": "zero", "jax.scatter-mul": "one",
                 "jax.scatter_mul": "one", "jax.scatter-min": "max", "jax.scatter_min": "max",
                 "jax.scatter-max": "min", "jax.scatter_max": "min"}


def rule(op: Operation) -> AxisRule | None:
    """How `op` moves axes; None when the analysis does not know the op (or its attributes
    are not what the op takes: hostile IR text is not followed, it is refused)."""
    try:
        r = _rule(op)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError):
        return None
    if r is None:
        return None
    axes = [ax for pair in r.same for ax in pair] + r.opaque
    axes += [(op.operands[k], i) if isinstance(k, int) and 0 <= k < len(op.operands) else (None, -1)
             for k, i, _ in r.combines]
    if not all(v is not None and isinstance(i, int) and 0 <= i < len(_shape(v)) for v, i in axes):
        return None
    return r


def _rule(op: Operation) -> AxisRule | None:
    name, a = op.name, op.attrs
    if name in ELEMENTWISE or name in ("sx.rows", "sx.mask_rows"):
        return _elementwise(op) if name not in ("sx.rows", "sx.mask_rows") else AxisRule(
            same=[((op.operands[0], i), (op.result, i)) for i in range(len(_shape(op.result)))])
    if name == "jax.optimization_barrier":
        return AxisRule(same=[((x, i), (y, i)) for x, y in zip(op.operands, op.results)
                              for i in range(len(_shape(x)))])
    if name in ("sx.constant", "jax.iota", "sx.all_gather") or not op.operands:
        return AxisRule()  # all_gather: each replica's rows become mirrored rows (not followed)
    x = op.operands[0]
    if name == "jax.broadcast_in_dim":
        return AxisRule(same=[((x, i), (op.result, j)) for i, j in enumerate(a["broadcast_dimensions"])
                              if _shape(x)[i] == _shape(op.result)[j]])
    if name == "jax.reshape" and a.get("dimensions") is None:
        return _reshape(x, op.result)
    if name == "jax.transpose":
        return AxisRule(same=[((x, p), (op.result, j)) for j, p in enumerate(a["permutation"])])
    if name == "jax.squeeze":
        return _kept(op, x, set(a["dimensions"]), op.result)
    if name in REDUCTIONS:
        r = _kept(op, x, set(a["axes"]), op.result)
        r.combines = [(0, i, REDUCTIONS[name]) for i in a["axes"]]
        return r
    if name in CUMULATIVE:
        r = _full(x, op.result, lambda i: True)
        r.combines = [(0, a["axis"], CUMULATIVE[name])]
        return r
    if name == "jax.dot_general":
        return _dot_general(op)
    if name == "jax.sort":
        r = AxisRule(same=[((y, i), (res, i)) for y in op.operands for res in op.results
                           for i in range(len(_shape(res)))])
        r.combines = [(k, a["dimension"], "max") for k in range(a["num_keys"])]
        return r
    if name == "jax.top_k":
        last = len(_shape(x)) - 1
        r = AxisRule(same=[((x, i), (res, i)) for res in op.results for i in range(last)])
        r.combines = [(0, last, "min")]
        return r
    if name == "jax.concatenate":
        r = AxisRule()
        for y in op.operands:
            for i in range(len(_shape(y))):
                (r.same.append(((y, i), (op.result, i))) if i != a["dimension"] else r.opaque.append((y, i)))
        return r
    if name == "jax.pad":
        return _full(x, op.result, lambda i: tuple(a["padding_config"][i]) == (0, 0, 0))
    if name == "jax.slice":
        strides = a.get("strides") or (1,) * len(_shape(x))
        return _full(x, op.result, lambda i: (a["start_indices"][i], a["limit_indices"][i], strides[i])
                     == (0, _shape(x)[i], 1))
    if name == "jax.dynamic_slice":
        return _full(x, op.result, lambda i: a["slice_sizes"][i] == _shape(x)[i])
    if name == "jax.dynamic_update_slice":
        r = _full(x, op.result, lambda i: True)
        upd = op.operands[1]
        for i in range(len(_shape(upd))):
            (r.same.append(((upd, i), (x, i))) if _shape(upd)[i] == _shape(x)[i] else r.opaque.append((upd, i)))
        return r
    if name == "jax.rev":
        return _full(x, op.result, lambda i: i not in a["dimensions"])
    if name == "jax.split":
        r = AxisRule(opaque=[(x, a["axis"])])
        r.same += [((x, i), (res, i)) for res in op.results for i in range(len(_shape(x))) if i != a["axis"]]
        return r
    if name == "jax.gather":
        return _gather(op)
    if name in SCATTER_FILLS or name == "jax.scatter":
        return _scatter(op, SCATTER_FILLS.get(name))
    if name.startswith("jax.reduce_window") or name == "jax.select_and_gather_add":
        return _full(x, op.result, lambda i: _window(a, i))
    if name == "jax.select_and_scatter_add":  # operands: the pooled cotangent, the pooled input
        r = _full(op.operands[1], op.result, lambda i: _window(a, i))
        r.same += [((x, i), (op.result, i)) for i in range(len(_shape(x))) if _window(a, i)]
        return r
    if name == "jax.conv_general_dilated":
        return _conv(op)
    return None


def reduced_size(op: Operation) -> int:
    """The number of elements a reduction adds up per result element."""
    return prod(_shape(op.operands[0])[i] for i in op.attrs["axes"])
