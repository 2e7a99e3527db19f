"""The one per-op axis table both axis analyses read (`mask-padding`: padded rows;
`propagate-sharding`: logical-device shardings): which operand axes are the same axis as which
result (or other operand) axes, which operand axes the op combines, and which it rearranges
beyond following.

`rule(op)` gives an `AxisRule`, or None for an op the table does not know (the analyses then
follow nothing through it). Rules come first from what JAX declares about the primitive (its
batching rule: `broadcast_batcher` is elementwise, `vectorized_batcher` maps each operand axis to
the result axis at the same position, `reducer_batcher` reduces its `axes`), then from the
entries below. Axis identities hold in both directions, so a row axis found on any value of a
chain of row-wise ops (the forward pass or the backward pass jax.grad made of it) is found on
all of them. `UNSUPPORTED` lists the primitives no rule describes, each with its reason
(tests/test_axis_census.py checks every primitive JAX registers is handled or listed).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable
from math import prod

from jax._src.interpreters import batching

from ..dialects import find_primitive
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

# value-preserving primitives: result i is operand i (placement, layout and sharding hints)
IDENTITIES = ("device_put", "sharding_constraint", "reshard", "layout_constraint",
              "with_memory_space_constraint", "pvary", "pin", "unpin", "relayout")
# batched over leading axes, with two (matrix) or one (vector) core axes per operand
MATRIX_BATCHED = ("cholesky", "cholesky_update", "eig", "eigh", "geqp3", "geqrf", "hessenberg",
                  "householder_product", "lu", "ormqr", "qr", "schur", "svd", "symmetric_product",
                  "triangular_solve", "tridiagonal")
VECTOR_BATCHED = ("lu_pivots_to_permutation", "tridiagonal_solve")

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


SCATTER_FILLS = {"jax.scatter-add": "zero", "jax.scatter_add": "zero", "jax.scatter-sub": "zero",
                 "jax.scatter-mul": "one",
                 "jax.scatter_mul": "one", "jax.scatter-min": "max", "jax.scatter_min": "max",
                 "jax.scatter-max": "min", "jax.scatter_max": "min"}


def batching_kind(prim) -> str | None:
    """What JAX's batching rule says primitive `prim` is: "broadcast" (elementwise over operands
    of one shape), "vectorized" (each operand axis is the result axis at its position), "reducer"
    (reduces its `axes`), or None."""
    batcher = batching.fancy_primitive_batchers.get(prim) if prim is not None else None
    func = batcher.func if isinstance(batcher, functools.partial) else batcher
    return {getattr(batching, "broadcast_batcher", None): "broadcast",
            getattr(batching, "vectorized_batcher", None): "vectorized",
            getattr(batching, "reducer_batcher", None): "reducer"}.get(func)


def _derived(op: Operation) -> AxisRule | None:
    """The rule JAX's own declaration of the primitive implies, if it implies one."""
    kind = batching_kind(find_primitive(op.name[4:])) if op.name.startswith("jax.") else None
    if kind == "broadcast":
        return _elementwise(op)
    if kind == "vectorized" and len(op.operands) == 1 and len(op.results) == 1:
        x, res = op.operands[0], op.result
        if _shape(res)[:len(_shape(x))] == _shape(x):
            return AxisRule(same=[((x, i), (res, i)) for i in range(len(_shape(x)))])
        return None
    if kind == "reducer" and op.name in REDUCTIONS:
        r = _kept(op, op.operands[0], set(op.attrs["axes"]), op.result)
        r.combines = [(0, i, REDUCTIONS[op.name]) for i in op.attrs["axes"]]
        return r
    return None


def rule(op: Operation, *, rows: bool = False) -> AxisRule | None:
    """How `op` moves axes (`rows`: for the rows analysis, which also reads ROWS_ENTRIES); None
    when the table does not know the op, or when the axes its rule names are not axes of its
    values. The rules read attributes the verifier has checked (a generic op's by JAX's own
    abstract evaluation, an sx op's by its declaration), so an error inside one is a bug and
    is raised, not taken for an op the table does not know."""
    rows_entry = ROWS_ENTRIES.get(op.name) if rows else None
    r = rows_entry(op) if rows_entry is not None else _derived(op) or _rule(op)
    if r is None:
        return None
    axes = [ax for pair in r.same for ax in pair] + r.opaque
    axes += [(op.operands[k], i) if isinstance(k, int) and 0 <= k < len(op.operands) else (None, -1)
             for k, i, _ in r.combines]
    if not all(v is not None and isinstance(i, int) and 0 <= i < len(_shape(v)) for v, i in axes):
        return None
    return r


def _identity(op: Operation) -> AxisRule:
    """Result i is operand i, axis for axis (a mark, a barrier)."""
    return AxisRule(same=[((x, i), (y, i)) for x, y in zip(op.operands, op.results)
                          for i in range(len(_shape(x)))])


def _reduction(op: Operation) -> AxisRule:
    r = _kept(op, op.operands[0], set(op.attrs["axes"]), op.result)
    r.combines = [(0, i, REDUCTIONS[op.name]) for i in op.attrs["axes"]]
    return r


def _cumulative(op: Operation) -> AxisRule:
    r = _full(op.operands[0], op.result, lambda i: True)
    r.combines = [(0, op.attrs["axis"], CUMULATIVE[op.name])]
    return r


def _sort(op: Operation) -> AxisRule:
    r = AxisRule(same=[((y, i), (res, i)) for y in op.operands for res in op.results
                       for i in range(len(_shape(res)))])
    r.combines = [(k, op.attrs["dimension"], "max") for k in range(op.attrs["num_keys"])]
    return r


def _top_k(op: Operation) -> AxisRule:
    x = op.operands[0]
    last = len(_shape(x)) - 1
    r = AxisRule(same=[((x, i), (res, i)) for res in op.results for i in range(last)])
    r.combines = [(0, last, "min")]
    return r


def _concatenate(op: Operation) -> AxisRule:
    r = AxisRule()
    for y in op.operands:
        for i in range(len(_shape(y))):
            (r.same.append(((y, i), (op.result, i))) if i != op.attrs["dimension"] else r.opaque.append((y, i)))
    return r


def _slice(op: Operation) -> AxisRule:
    a, x = op.attrs, op.operands[0]
    strides = a.get("strides") or (1,) * len(_shape(x))
    return _full(x, op.result, lambda i: (a["start_indices"][i], a["limit_indices"][i], strides[i])
                 == (0, _shape(x)[i], 1))


def _dynamic_update_slice(op: Operation) -> AxisRule:
    x, upd = op.operands[:2]
    r = _full(x, op.result, lambda i: True)
    for i in range(len(_shape(upd))):
        (r.same.append(((upd, i), (x, i))) if _shape(upd)[i] == _shape(x)[i] else r.opaque.append((upd, i)))
    return r


def _split(op: Operation) -> AxisRule:
    x, axis = op.operands[0], op.attrs["axis"]
    return AxisRule(opaque=[(x, axis)], same=[((x, i), (res, i)) for res in op.results
                                              for i in range(len(_shape(x))) if i != axis])


def _select_and_scatter_add(op: Operation) -> AxisRule:
    """Operands: the pooled cotangent, the pooled input."""
    x, a = op.operands[0], op.attrs
    r = _full(op.operands[1], op.result, lambda i: _window(a, i))
    r.same += [((x, i), (op.result, i)) for i in range(len(_shape(x))) if _window(a, i)]
    return r


def _batched(trailing: Callable[[Operation], int]) -> Callable[[Operation], AxisRule]:
    """A primitive batched over its operands' leading axes (linear algebra, FFTs): those axes are
    one axis across every operand and result; the `trailing(op)` core axes of each operand are
    combined beyond following (a decomposition of a matrix of rows mixes them)."""
    def make(op: Operation) -> AxisRule:
        nb = len(_shape(op.operands[0])) - trailing(op)
        r = AxisRule()
        for v in [*op.operands[1:], *op.results]:
            if len(_shape(v)) >= nb and _shape(v)[:nb] == _shape(op.operands[0])[:nb]:
                r.same += [((op.operands[0], i), (v, i)) for i in range(nb)]
        r.opaque = [(x, i) for x in op.operands for i in range(nb, len(_shape(x)))]
        return r
    return make


def _approx_top_k(op: Operation) -> AxisRule:
    x = op.operands[0]
    dim = op.attrs["reduction_dimension"] % len(_shape(x))
    r = AxisRule(same=[((x, i), (res, i)) for res in op.results for i in range(len(_shape(x))) if i != dim])
    r.combines = [(0, dim, "min" if op.attrs["is_max_k"] else "max")]
    return r


def _nothing(op: Operation) -> AxisRule:
    """No axis of the result is an operand's (a constant, an iota; an all_gather: each replica's
    rows become rows of one mirrored value, not followed)."""
    return AxisRule()


def _gathered(op: Operation) -> AxisRule:
    """The axes an all_gather does not gather are its operand's."""
    x, axis, res = op.operands[0], op.attrs["axis"], op.results[0]
    return AxisRule(same=[((x, i), (res, i)) for i in range(len(_shape(x))) if i != axis])


# Rules the rows analysis (mask-padding) reads and sharding propagation does not: no sharding is
# followed through a collective, but an axis an all_gather does not gather stays a padded axis.
ROWS_ENTRIES: dict[str, Callable[[Operation], AxisRule]] = {
    "sx.all_gather": _gathered, "sx.all_gather_real": _gathered}


def _unary(make) -> Callable[[Operation], AxisRule]:
    return lambda op: make(op.operands[0], op.result, op.attrs)


ENTRIES: dict[str, Callable[[Operation], "AxisRule | None"]] = {
    **{name: _elementwise for name in ELEMENTWISE},
    **{name: _reduction for name in REDUCTIONS},
    **{name: _cumulative for name in CUMULATIVE},
    **{name: lambda op: _scatter(op, SCATTER_FILLS.get(op.name)) for name in (*SCATTER_FILLS, "jax.scatter")},
    **{name: _unary(lambda x, r, a: _full(x, r, lambda i: _window(a, i)))
       for name in ("jax.reduce_window", "jax.reduce_window_sum", "jax.reduce_window_max",
                    "jax.reduce_window_min", "jax.select_and_gather_add")},
    "sx.rows": _identity, "sx.mask_rows": _identity,
    "sx.row_ones": lambda op: AxisRule(same=[((op.operands[0], op.attrs.get("axis", 0)), (op.result, 0))]),
    "jax.optimization_barrier": _identity,
    "sx.constant": _nothing, "jax.iota": _nothing, "sx.all_gather": _nothing, "sx.all_gather_real": _nothing,
    # a sharded value is the flattened value cut in pieces: every axis is rearranged
    **{name: lambda op: AxisRule(opaque=[(op.operands[0], i) for i in range(len(_shape(op.operands[0])))])
       for name in ("sx.shard", "sx.reduce_scatter")},
    "jax.broadcast_in_dim": _unary(lambda x, r, a: AxisRule(same=[
        ((x, i), (r, j)) for i, j in enumerate(a["broadcast_dimensions"]) if _shape(x)[i] == _shape(r)[j]])),
    "jax.reshape": lambda op: _reshape(op.operands[0], op.result) if op.attrs.get("dimensions") is None else None,
    "jax.transpose": _unary(lambda x, r, a: AxisRule(same=[((x, p), (r, j)) for j, p in enumerate(a["permutation"])])),
    "jax.squeeze": lambda op: _kept(op, op.operands[0], set(op.attrs["dimensions"]), op.result),
    "jax.dot_general": lambda op: _dot_general(op),
    "jax.sort": _sort,
    "jax.top_k": _top_k,
    "jax.concatenate": _concatenate,
    "jax.pad": _unary(lambda x, r, a: _full(x, r, lambda i: tuple(a["padding_config"][i]) == (0, 0, 0))),
    "jax.slice": _slice,
    "jax.dynamic_slice": _unary(lambda x, r, a: _full(x, r, lambda i: a["slice_sizes"][i] == _shape(x)[i])),
    "jax.dynamic_update_slice": _dynamic_update_slice,
    "jax.rev": _unary(lambda x, r, a: _full(x, r, lambda i: i not in a["dimensions"])),
    "jax.split": _split,
    "jax.gather": lambda op: _gather(op),
    "jax.select_and_scatter_add": _select_and_scatter_add,
    "jax.conv_general_dilated": lambda op: _conv(op),
    "jax.approx_top_k": _approx_top_k,
    **{f"jax.{name}": _identity for name in IDENTITIES},
    **{f"jax.{name}": _batched(lambda op: 2) for name in MATRIX_BATCHED},
    **{f"jax.{name}": _batched(lambda op: 1) for name in VECTOR_BATCHED},
    "jax.fft": _batched(lambda op: len(op.attrs["fft_lengths"])),
}

# The primitives no rule describes, by reason (docs/troubleshooting.md lists them). A row axis
# reaching one is an analysis gap (partial batches raise), a sharding stops there.
UNSUPPORTED: dict[str, tuple[str, ...]] = {
    "a collective over a named mesh axis, which exists only inside shard_map/pmap; strategax's own "
    "collectives (ReplicaContext.all_reduce, ...) are sx.* ops": (
        "all_gather", "all_gather_done", "all_gather_invariant", "all_gather_reduced",
        "all_gather_reduced_start", "all_gather_start", "all_to_all", "all_to_all_done",
        "all_to_all_start", "axis_index", "pbroadcast", "pbroadcast_done", "pmax", "pmin", "ppermute",
        "ppermute_done", "ppermute_start", "precv", "preduced", "psend", "psum", "psum_done",
        "psum_invariant", "psum_invariant_start", "psum_start", "ragged_all_to_all", "reduce_scatter",
        "reduce_scatter_done", "reduce_scatter_start", "reduced_vary_cast_p", "unreduced_psum",
        "unreduced_psum_start", "unreduced_pmax", "unreduced_pmin", "unreduced_reduce_scatter",
        "unreduced_reduce_scatter_start",
        "vary_unreduced_cast_p", "shard_map"),
    "mutable references and boxes (JAX's state primitives): the IR holds values, and strategax "
    "variables are its state": (
        "accum_grad_in_ref", "addupdate", "box_get", "box_set", "empty_ref", "free_ref", "freeze",
        "get", "new_box", "new_ref", "run_state", "swap", "new_log", "log_read", "log_extend",
        "create_linear"),
    "host callbacks and foreign functions: what they do with each row is not known": (
        "debug_callback", "debug_print", "ffi_call", "io_callback", "pure_callback"),
    "a call of a sub-program the importer does not inline (its rows are not followed into it)": (
        "call", "call_exported", "call_hi_primitive", "call_hi_primitive_linearized", "composite",
        "core_map", "custom_lin", "custom_linear_solve", "custom_partitioning", "custom_vmap_call",
        "eval_jaxpr", "linear_call", "remat_opt", "program_order"),
    "a reduction or window op whose combining function is a program (its identity is not known)": (
        "reduce", "select_and_scatter"),
    "GPU-only fused kernels (cuDNN attention, scaled matmuls), ragged and scaled contractions: no "
    "rule yet": (
        "dot_product_attention_bwd_wrapper", "dot_product_attention_fp8_bwd_wrapper",
        "dot_product_attention_fp8_fwd_wrapper", "dot_product_attention_fwd_wrapper",
        "ragged_dot_general", "scaled_dot", "scaled_matmul", "scaled_matmul_wrapper"),
    "random-number state and typed keys (strategax programs hold key data, as uint32 arrays)": (
        "random_gamma", "random_wrap", "rng_bit_generator", "rng_uniform", "iota_2x32_shape"),
    "tokens, effects and shape assertions: they carry no data axes": (
        "after_all", "create_token", "dce_sink", "check", "shape_assertion", "unreachable",
        "platform_index", "dim_as_value", "dimension_size", "inspect_sharding", "empty", "empty2"),
    "array-building primitives without a rule yet (jnp.tile, jnp.stack and friends lower to "
    "broadcasts and concatenations instead)": ("broadcast_to", "stack", "unstack", "tile"),
}


def _rule(op: Operation) -> AxisRule | None:
    entry = ENTRIES.get(op.name)
    if entry is not None:
        return entry(op)
    return AxisRule() if not op.operands else None  # an op of no operands moves no axis


def reduced_size(op: Operation) -> int:
    """The number of elements a reduction adds up per result element."""
    return prod(_shape(op.operands[0])[i] for i in op.attrs["axes"])
