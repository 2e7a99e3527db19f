"""Random replica programs for differential fuzzing (issue 35): a hypothesis strategy draws a
`Program` (replicas, inputs, an optional distributed variable, collective options, a list of
steps); `run_strategax` builds it through the public API as one `strategy.function` and runs
it; `run_reference` computes the same program in NumPy, looping over the replicas by hand
(each local step written again in NumPy, `jax.grad` as its derivative), from TensorFlow's
rules. Each step reads earlier values by index and appends one. The reference answers numbers
per replica, or NAMED: TensorFlow raises here too, and strategax must raise a named error.

A test (or tools/fuzz.py) calls `check(program)`: the same numbers, or both raise a named
error; strategax may also refuse a program the reference computes with a named error (a
documented limit, e.g. a padding gap: counted as "refused", never a wrong answer). Anything
else — different numbers, a non-strategax exception — is a bug."""
from __future__ import annotations

import contextlib
import logging
import warnings
from dataclasses import dataclass, field
from typing import Any, cast

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from hypothesis import HealthCheck, strategies as st
from jax import lax

import strategax as sx

D = 3  # the feature width of every input


def weight(k: int) -> np.ndarray:
    """The `dot` step's k x k matrix."""
    return ((np.arange(k * k, dtype=np.float32).reshape(k, k) - 4.0) / 8.0 % 1.5 - 0.75).astype(np.float32)


# fuzzing is slow by design (iterating HealthCheck leaves out the deprecated checks)
ALL_HEALTH_CHECKS = cast("list[HealthCheck]", list(HealthCheck))
NAMED = "named error"  # the reference's answer where TensorFlow raises
SYNCS = ("on_write", "on_read")
AGGS = ("none", "sum", "mean", "only_first_replica")


class Refused(Exception):
    """The reference cannot compute the program (TensorFlow raises there too)."""


# --- the program -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Program:
    n: int  # replicas
    inputs: str  # "per_replica", "mirrored", "ragged" (rows differ), "wide" (columns differ), "dataset"
    rows: tuple[int, ...]  # rows ("ragged") or columns ("wide") per replica; the dataset's length ("dataset")
    steps: tuple[tuple, ...]
    var: tuple[str, str, str] | None = None  # (sync, aggregation, update: assign/assign_add/assign_sub)
    bytes_per_pack: int = 0
    compression: str | None = None
    seed: int = 0
    post: str | None = None  # a cross-replica call on run's result: one of POST

    def __repr__(self) -> str:
        return (f"Program(n={self.n}, inputs={self.inputs!r}, rows={self.rows}, steps={self.steps}, var={self.var}, "
                f"bytes_per_pack={self.bytes_per_pack}, compression={self.compression!r}, seed={self.seed}, "
                f"post={self.post!r})")


UNARY = ("sin", "tanh", "neg", "square")
BINARY = ("add", "mul", "sub", "max")
SHAPE = ("sum0", "sum_last", "mean_all", "dot", "flatten", "slice", "reverse", "take")
# transposes (all axes reversed; the first axis moved last; a new last axis to give 3-D values)
# and collectives of them: simplify-collectives sinks all_reduce(transpose(...)) below chains
TRANSPOSE = ("transpose", "moveaxis", "stack_last")
CONTROL = ("cond", "scan", "while", "grad", "grad_all_reduce")
COLLECTIVE = ("all_reduce_sum", "all_reduce_mean", "all_gather", "replica_scale", "merge_reduce_sum",
              "merge_reduce_mean", "batch_reduce_sum", "batch_reduce_mean", "var_update")
# all_reduce of: a transpose; two composed (the first axis moved last, then all reversed); the
# same of a dot (sunk below the all_reduce: a matrix product XLA runs as one); two that cancel;
# a weight gradient (jax.grad's transpose(dot_general))
TRANSPOSE_COLLECTIVE = ("all_reduce_transpose", "all_reduce_moved", "all_reduce_dot_moved", "all_reduce_twice",
                        "grad_dot_all_reduce")
_MEAN_OF_TRANSPOSES = ("all_reduce_moved", "all_reduce_dot_moved")
KINDS = UNARY + BINARY + SHAPE + CONTROL + COLLECTIVE
# programs biased to transposes and their collectives (tests/fuzz/test_fuzz.py, a small budget)
TRANSPOSE_KINDS = (TRANSPOSE * 2 + TRANSPOSE_COLLECTIVE * 2 + ("all_reduce_sum", "all_reduce_mean", "all_gather",
                                                              "sum0", "add", "dot", "grad_all_reduce", "var_update"))
# strategy.reduce (without axis, or over axis 0) and strategy.gather along axis 0, in the
# compiled function after `run` (cross-replica context)
POST = ("reduce_sum", "reduce_mean", "reduce_sum0", "reduce_mean0", "gather0")

# an operand: half the time one of the two latest values (chains: a gather then its sum, two
# reductions then their sum), else any earlier one (indices wrap around the values so far)
_index = st.one_of(st.integers(-2, -1), st.integers(0, 15))


@st.composite
def programs(draw, max_steps: int = 6, kinds: tuple[str, ...] = KINDS) -> Program:
    n = draw(st.integers(1, 8))
    inputs = draw(st.sampled_from(["per_replica", "per_replica", "mirrored", "ragged", "wide", "dataset"]))
    rows: tuple[int, ...] = ()
    if inputs in ("ragged", "wide"):
        rows = tuple(draw(st.lists(st.integers(1, 3), min_size=n, max_size=n)))
    elif inputs == "dataset":  # a global batch of 2 rows per replica, the last one partial
        rows = (draw(st.integers(2 * n + 1, 4 * n - 1)) if n > 1 else 3,)
    steps = tuple(draw(st.lists(st.tuples(st.sampled_from(kinds), _index, _index), min_size=1, max_size=max_steps)))
    if inputs == "wide":  # steps whose indices depend on the width (take's and slice's, a reversal)
        # see the padded width here and each replica's own in TensorFlow: not comparable programs, so
        # they become sums over the width. `dot` stays: its matrix has the traced (padded) width, a
        # fixed size, and TensorFlow raises where a replica's width differs (strategax must too)
        steps = tuple(("sum_last",) + s[1:] if s[0] in ("take", "slice", "reverse") else s for s in steps)
    var = None
    if any(s[0] == "var_update" for s in steps):
        var = (draw(st.sampled_from(SYNCS)), draw(st.sampled_from(AGGS)),
               draw(st.sampled_from(["assign", "assign_add", "assign_sub"])))
    bytes_per_pack = draw(st.sampled_from([0, 0, 4, 16, 1 << 20]))
    compression = draw(st.sampled_from([None, None, None, "bf16"]))
    post = draw(st.sampled_from((None, None) + POST))
    return Program(n, inputs, rows, steps, var, bytes_per_pack, compression, draw(st.integers(0, 3)), post)


# --- inputs ------------------------------------------------------------------------------------
_STRATEGIES: dict[int, Any] = {}


def strategy_for(n: int):
    if n not in _STRATEGIES:
        _STRATEGIES[n] = sx.MirroredStrategy([f"CPU:{i}" for i in range(n)])
    return _STRATEGIES[n]


def _component(p: Program, r: int, rows: int, cols: int = D) -> np.ndarray:
    base = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    return ((base + 1.0) * (0.25 + 0.5 * r) * (1 + p.seed) / (rows * cols) - 0.5 * (p.seed % 2)).astype(np.float32)


def make_inputs(p: Program, strategy) -> tuple[Any, list[np.ndarray]]:
    """(the function's argument, each replica's value of it for the reference)."""
    if p.inputs == "mirrored":
        x = _component(p, 0, 2)
        return x, [x] * p.n
    if p.inputs in ("per_replica", "ragged", "wide"):
        comps = [_component(p, r, p.rows[r] if p.inputs == "ragged" else 2, p.rows[r] if p.inputs == "wide" else D)
                 for r in range(p.n)]
        value = strategy.experimental_distribute_values_from_function(lambda c: comps[c.replica_id_in_sync_group])
        return value, comps
    data = _component(p, 0, p.rows[0])
    dataset = sx.data.Dataset.from_tensor_slices(data).batch(2 * p.n)
    *_, last = iter(strategy.experimental_distribute_dataset(dataset))  # the partial batch
    return last, [np.asarray(c) for c in strategy.experimental_local_results(last)]


# --- strategax -----------------------------------------------------------------------------------
def _options(p: Program):
    if not p.bytes_per_pack and p.compression is None:
        return None
    return sx.CommunicationOptions(bytes_per_pack=p.bytes_per_pack, compression=p.compression)


def _same_shape(vals: list, a, k: int):
    """The value at index k (mod len) if it has a's shape, else a (binary ops need one shape)."""
    b = vals[k % len(vals)]
    return b if jnp.shape(b) == jnp.shape(a) else a


LOCAL = UNARY + BINARY + SHAPE + TRANSPOSE + ("cond", "scan", "while", "grad")


def _local(kind: str, a, b):
    """A step that computes on this replica alone, as strategax traces it (the reference's is
    `_local_np`)."""
    if kind in UNARY:
        return {"sin": jnp.sin, "tanh": jnp.tanh, "neg": jnp.negative, "square": jnp.square}[kind](a)
    if kind in BINARY:
        return {"add": jnp.add, "mul": jnp.multiply, "sub": jnp.subtract, "max": jnp.maximum}[kind](a, b)
    if kind == "sum0":
        return jnp.sum(a, axis=0) if a.ndim else a
    if kind == "sum_last":
        return jnp.sum(a, axis=-1) if a.ndim else a
    if kind == "mean_all":
        return jnp.mean(a)
    if kind == "dot":
        return a @ jnp.asarray(weight(a.shape[-1])) if a.ndim else a * 2.0
    if kind == "flatten":
        return a.reshape(-1)
    if kind == "slice":
        return a[..., :max(1, a.shape[-1] - 1)] if a.ndim else a
    if kind == "reverse":
        return a[..., ::-1] if a.ndim else a
    if kind == "transpose":
        return jnp.transpose(a)
    if kind == "moveaxis":
        return jnp.moveaxis(a, 0, -1) if a.ndim else a
    if kind == "stack_last":
        return jnp.stack([a, a * 2.0], axis=-1)
    if kind == "take":
        return jnp.take(a, jnp.asarray([0, a.shape[-1] - 1, 0]), axis=-1) if a.ndim else a
    if kind == "cond":
        return lax.cond(jnp.sum(a) > 0, jnp.sin, jnp.cos, a)
    if kind == "scan":
        if not a.ndim:
            return a
        return lax.scan(lambda c, row: (c + row, c + row), jnp.zeros(a.shape[1:], a.dtype), a)[1]
    if kind == "while":
        return lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * 0.5 + 1.0), (0, a))[1]
    assert kind == "grad", kind
    return jax.grad(lambda v: jnp.sum(jnp.sin(v) * v))(a)


def _sx_step(step, vals, ctx, p: Program, strategy, var):
    kind, i, k = step
    a = vals[i % len(vals)]
    opts = _options(p)
    if kind in LOCAL:
        return _local(kind, a, _same_shape(vals, a, k))
    if kind == "grad_all_reduce":
        return jax.grad(lambda v: jnp.sum(ctx.all_reduce("SUM", v * v, options=opts)))(a)
    if kind == "all_reduce_sum":
        return ctx.all_reduce("SUM", a, options=opts)
    if kind in TRANSPOSE_COLLECTIVE and kind != "grad_dot_all_reduce":
        return ctx.all_reduce("MEAN" if kind in _MEAN_OF_TRANSPOSES else "SUM", _transposed(kind, a), options=opts)
    if kind == "grad_dot_all_reduce":  # a weight gradient: jax.grad makes it transpose(dot_general(...)); a
        # polynomial loss, not sin: sin of values in the thousands turns float32 rounding into noise
        if a.ndim != 2:
            return ctx.all_reduce("SUM", a, options=opts)
        w = jnp.asarray(weight(a.shape[-1]))
        return ctx.all_reduce("SUM", jax.grad(lambda m: jnp.sum((a @ m) ** 2) / 2)(w), options=opts)
    if kind == "all_reduce_mean":
        return ctx.all_reduce("MEAN", a, options=opts)
    if kind == "all_gather":
        return ctx.all_gather(a, axis=0) if a.ndim else ctx.all_gather(a[None], axis=0)
    if kind == "replica_scale":
        return a * (ctx.replica_id_in_sync_group.astype(jnp.float32) + 1.0)
    if kind in ("merge_reduce_sum", "merge_reduce_mean"):
        op = "SUM" if kind.endswith("sum") else "MEAN"
        return ctx.merge_call(lambda s, v: s.reduce(op, v, axis=None), args=(a,))
    if kind in ("batch_reduce_sum", "batch_reduce_mean"):
        op = "SUM" if kind.endswith("sum") else "MEAN"
        b = _same_shape(vals, a, k)
        out = ctx.merge_call(lambda s, u, v: s.extended.batch_reduce_to(op, [(u, u), (v, v)], options=opts),
                             args=(a, b))
        return out[0] + out[1]
    assert kind == "var_update" and var is not None and p.var is not None
    getattr(var, p.var[2])(_var_delta(a))
    return var.read_value()


def _transposed(kind: str, a):
    """What a TRANSPOSE_COLLECTIVE step (but the gradient) all-reduces, as strategax traces it."""
    if kind == "all_reduce_transpose":
        return jnp.transpose(a)
    if kind == "all_reduce_twice":
        return jnp.transpose(jnp.transpose(a))
    if kind == "all_reduce_dot_moved":
        a = _local("dot", a, a)
    return jnp.transpose(_local("moveaxis", a, a))


def _var_delta(a):
    """The update a step gives the variable (shape (D,)): a's sum broadcast to D entries."""
    return jnp.broadcast_to(jnp.sum(a), (D,)) * jnp.asarray([1.0, 0.5, -1.0], jnp.float32)


def _make_var(p: Program, strategy):
    if p.var is None:
        return None
    sync, agg, _ = p.var
    init = np.zeros(D, np.float32) if sync == "on_read" else np.asarray([1.0, -2.0, 0.5], np.float32)
    with strategy.scope():
        return sx.Variable(init, synchronization=getattr(sx.VariableSynchronization, sync.upper()),
                           aggregation=getattr(sx.VariableAggregation, agg.upper()))


def run_strategax_function(p: Program, strategy):
    """The program as one `strategy.function` of the input (its variable made now): it returns
    each replica's last value and the variable read in cross-replica context after the run."""
    var = _make_var(p, strategy)

    def replica_fn(x):
        ctx = sx.get_replica_context()
        vals = [x, x * 0.5 + 1.0]
        for s in p.steps:
            vals.append(_sx_step(s, vals, ctx, p, strategy, var))
        return vals[-1]

    def step(x):
        out = strategy.run(replica_fn, args=(x,))
        return out, (var.read_value() if var is not None else None), _post(p, strategy, out)
    return strategy.function(step)


def _post(p: Program, strategy, out):
    if p.post is None:
        return None
    if p.post == "gather0":
        return strategy.gather(out, axis=0)
    return strategy.reduce("SUM" if "sum" in p.post else "MEAN", out, axis=0 if p.post.endswith("0") else None)


@contextlib.contextmanager
def quiet():
    """Every program is a new function: strategax's retracing warning would fire for the fuzzer's
    own loop."""
    log = logging.getLogger("strategax")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def run_strategax(p: Program) -> tuple[list[np.ndarray], np.ndarray | None, np.ndarray | None]:
    """Each replica's last value, the variable read in cross-replica context after the run, and
    the post call's result."""
    strategy = strategy_for(p.n)
    x, _ = make_inputs(p, strategy)
    with quiet():
        out, read, post = run_strategax_function(p, strategy)(x)
    got = [np.asarray(v) for v in strategy.experimental_local_results(out)]
    return got, None if read is None else np.asarray(read), None if post is None else np.asarray(post)


# --- the reference: NumPy, replica by replica ------------------------------------------------------
def _rows_of(vals: list) -> bool:
    return len({np.shape(v) for v in vals}) == 1


def _reduce(a: list, op: str) -> list:
    total = np.sum(np.stack(a), axis=0, dtype=np.float64)
    return [np.asarray(total / len(a) if op == "mean" else total, np.float32)] * len(a)


@dataclass
class _RefVar:
    sync: str
    agg: str
    copies: list | _Poison = field(default_factory=list)  # each replica's copy, or why TF cannot read it


class _Poison:
    """A value TensorFlow could not compute (reading it, the program raises there)."""

    def __init__(self, why: str):
        self.why = why


def _padded(shapes: list) -> tuple:
    """The shape strategax traces a value as: the largest extent of each axis over the replicas."""
    return tuple(max(d) for d in zip(*shapes)) if shapes and shapes[0] else ()


def _local_np(kind: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`_local`'s step in NumPy (float32), written from each jnp function's documented meaning:
    the reference shares no code with what strategax traces (and costs no XLA compile)."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the mean of no entries is NaN, as in JAX
        return np.asarray(_local_np_raw(kind, np.asarray(a, np.float32), np.asarray(b, np.float32)), np.float32)


def _local_np_raw(kind: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if kind in UNARY:
        return {"sin": np.sin, "tanh": np.tanh, "neg": np.negative, "square": np.square}[kind](a)
    if kind in BINARY:
        return {"add": np.add, "mul": np.multiply, "sub": np.subtract, "max": np.maximum}[kind](a, b)
    if kind in ("sum0", "sum_last"):
        return np.sum(a, axis=0 if kind == "sum0" else -1) if a.ndim else a
    if kind == "mean_all":
        return np.asarray(np.mean(a))
    if kind == "dot":
        return a @ weight(a.shape[-1]) if a.ndim else a * np.float32(2.0)
    if kind == "flatten":
        return a.reshape(-1)
    if kind == "slice":
        return a[..., :max(1, a.shape[-1] - 1)] if a.ndim else a
    if kind == "reverse":
        return a[..., ::-1] if a.ndim else a
    if kind == "transpose":  # every axis reversed
        return np.transpose(a)
    if kind == "moveaxis":  # the first axis moved last
        return np.transpose(a, tuple(range(1, a.ndim)) + (0,)) if a.ndim else a
    if kind == "stack_last":
        return np.stack([a, a * np.float32(2.0)], axis=-1)
    if kind == "take":  # jnp.take fills an index out of bounds (any index of an empty axis) with NaN
        if not a.ndim:
            return a
        if a.shape[-1] == 0:
            return np.full(a.shape[:-1] + (3,), np.nan, np.float32)
        return np.take(a, [0, a.shape[-1] - 1, 0], axis=-1)
    if kind == "cond":
        return np.sin(a) if np.sum(a) > 0 else np.cos(a)
    if kind == "scan":  # each output row is the running sum of the rows so far
        return np.cumsum(a, axis=0, dtype=np.float32) if a.ndim else a
    if kind == "while":  # three turns of c * 0.5 + 1
        for _ in range(3):
            a = a * np.float32(0.5) + np.float32(1.0)
        return a
    assert kind == "grad", kind  # d/dv sum(sin(v) * v) = cos(v) * v + sin(v)
    return np.cos(a) * a + np.sin(a)


def _traced_shape(kind: str, shape_a: tuple, shape_b: tuple, n: int) -> tuple:
    """The shape strategax traces step `kind`'s result as, from its operands' traced shapes."""
    if kind in LOCAL:
        return _local_np(kind, np.zeros(shape_a, np.float32), np.zeros(shape_b, np.float32)).shape
    if kind == "all_gather":
        shape = shape_a if shape_a else (1,)
        return (n * shape[0],) + tuple(shape[1:])
    if kind == "var_update":
        return (D,)
    if kind == "grad_dot_all_reduce":
        return (shape_a[1], shape_a[1]) if len(shape_a) == 2 else shape_a
    if kind in TRANSPOSE_COLLECTIVE:
        return _transposed_np(kind, np.zeros(shape_a, np.float32)).shape
    return shape_a


def _transposed_np(kind: str, a: np.ndarray) -> np.ndarray:
    """`_transposed` in NumPy."""
    if kind == "all_reduce_transpose":
        return _local_np("transpose", a, a)
    if kind == "all_reduce_twice":
        return _local_np("transpose", _local_np("transpose", a, a), a)
    if kind == "all_reduce_dot_moved":
        a = _local_np("dot", a, a)
    return _local_np("transpose", _local_np("moveaxis", a, a), a)


def _bf16(values: list) -> list:
    """Each replica's value rounded to bfloat16 and back (what a compressed reduction sends)."""
    return [np.asarray(np.asarray(v, np.float32).astype(ml_dtypes.bfloat16), np.float32) for v in values]


def _ref_step(step, vals, shapes, p: Program, var: _RefVar | None, rounded: bool = False):
    """(each replica's value, its traced shape) of one step; `shapes` are the earlier values'."""
    kind, i, k = step
    a, shape_a = vals[i % len(vals)], shapes[i % len(shapes)]
    b, shape_b = vals[k % len(vals)], shapes[k % len(shapes)]
    n = p.n
    if kind in BINARY or kind in ("batch_reduce_sum", "batch_reduce_mean"):
        b, shape_b = (b, shape_b) if shape_b == shape_a else (a, shape_a)  # as strategax picks (traced shapes)
    else:
        b, shape_b = a, shape_a  # not read
    if isinstance(a, _Poison) or isinstance(b, _Poison):  # its traced shape still decides later steps' operands
        return (a if isinstance(a, _Poison) else b), _traced_shape(kind, shape_a, shape_b, n)
    if kind == "dot" and shape_a and any(np.shape(u)[-1] != shape_a[-1] for u in a):
        # the matrix is a constant of the traced width: TensorFlow's matmul raises on a replica
        # whose own width differs (tests/data/tf/trust.json, dot_along_padded_axis)
        return _Poison("a matmul of a value whose width differs from the matrix's on some replica"), shape_a
    if kind in BINARY and any(np.shape(u) != np.shape(v) for u, v in zip(a, b)):
        try:  # operands of one traced shape whose own shapes differ on a replica: TF broadcasts or raises
            [np.broadcast_shapes(np.shape(u), np.shape(v)) for u, v in zip(a, b)]
        except ValueError:
            return _Poison(f"{kind} of values whose shapes differ on a replica"), shape_a
    if kind in LOCAL:  # NumPy, replica by replica; the traced shape from the padded shapes
        return [_local_np(kind, u, v) for u, v in zip(a, b)], _traced_shape(kind, shape_a, shape_b, n)
    squeeze = _bf16 if rounded and p.compression is not None else list  # `rounded`: as compressed
    if kind == "grad_all_reduce":  # d/dv sum(all_reduce(SUM, v*v)): all_reduce(SUM) of the cotangent
        if not _rows_of(a):
            return _Poison("an all_reduce of values that differ in shape"), shape_a
        return squeeze([np.asarray(2.0 * n * v, np.float32) for v in a]), shape_a
    if kind in ("merge_reduce_sum", "merge_reduce_mean"):  # strategy.reduce: not compressed
        if not _rows_of(a):
            return _Poison("an all_reduce of values that differ in shape"), shape_a
        return _reduce(a, "sum" if kind.endswith("sum") else "mean"), shape_a
    if kind in TRANSPOSE_COLLECTIVE:  # the transposed (or differentiated) values, then their all_reduce
        shape = _traced_shape(kind, shape_a, shape_b, n)
        dot = kind == "all_reduce_dot_moved" or (kind == "grad_dot_all_reduce" and len(shape_a) == 2)
        if dot and shape_a and any(np.shape(u)[-1] != shape_a[-1] for u in a):  # as `dot`: TensorFlow's matmul raises
            return _Poison("a matmul of a value whose width differs from the matrix's on some replica"), shape
        if kind == "grad_dot_all_reduce":
            if len(shape_a) == 2:
                a = [np.asarray(u.T @ (u @ weight(u.shape[-1])), np.float32) for u in a]  # d/dm sum((u m)^2) / 2
        else:
            a = [_transposed_np(kind, u) for u in a]
        if not _rows_of(a):
            return _Poison("an all_reduce of values that differ in shape"), shape
        return squeeze(_reduce(squeeze(a), "mean" if kind in _MEAN_OF_TRANSPOSES else "sum")), shape
    if kind in ("all_reduce_sum", "all_reduce_mean"):
        if not _rows_of(a):
            return _Poison("an all_reduce of values that differ in shape"), shape_a
        return squeeze(_reduce(squeeze(a), "sum" if kind.endswith("sum") else "mean")), shape_a
    if kind in ("batch_reduce_sum", "batch_reduce_mean"):
        if not (_rows_of(a) and _rows_of(b)):
            return _Poison("a batch_reduce_to of values that differ in shape"), shape_a
        op = "sum" if kind.endswith("sum") else "mean"
        return [x + y for x, y in zip(squeeze(_reduce(squeeze(a), op)), squeeze(_reduce(squeeze(b), op)))], shape_a
    if kind == "all_gather":
        pieces = [v if v.ndim else v[None] for v in a]
        if len({v.shape[1:] for v in pieces}) > 1:
            return _Poison("an all_gather of pieces that do not line up"), _traced_shape(kind, shape_a, shape_b, n)
        shape = shape_a if shape_a else (1,)
        return [np.concatenate(pieces, axis=0)] * n, (n * shape[0],) + tuple(shape[1:])
    if kind == "replica_scale":
        return [np.asarray(v * (r + 1.0), np.float32) for r, v in enumerate(a)], shape_a
    assert kind == "var_update" and var is not None and p.var is not None
    if isinstance(a, _Poison) or isinstance(var.copies, _Poison):
        var.copies = a if isinstance(a, _Poison) else var.copies
        return var.copies, (D,)
    deltas = [np.broadcast_to(np.sum(v, dtype=np.float32), (D,)) * np.asarray([1.0, 0.5, -1.0], np.float32)
              for v in a]
    how = p.var[2]
    if var.sync == "on_write":
        if var.agg == "none":
            if any(not np.array_equal(d, deltas[0]) for d in deltas):  # TF lets the copies drift apart:
                var.copies = _Poison("an update of a mirrored variable without aggregation")  # strategax refuses
                return var.copies, (D,)
        elif var.agg == "only_first_replica":
            deltas = [deltas[0]] * n
        else:
            deltas = _reduce(deltas, var.agg)
    var.copies = [_apply(how, c, d) for c, d in zip(var.copies, deltas)]
    return [np.asarray(c, np.float32) for c in var.copies], (D,)


def _apply(how: str, copy: np.ndarray, delta: np.ndarray) -> np.ndarray:
    return {"assign": delta, "assign_add": copy + delta, "assign_sub": copy - delta}[how]


def _cross_replica_read(var: _RefVar) -> np.ndarray:
    if isinstance(var.copies, _Poison):
        raise Refused(var.copies.why)
    if var.sync == "on_write" or var.agg == "only_first_replica":
        return var.copies[0]
    if var.agg == "none":
        raise Refused("a cross-replica read of a sync-on-read variable without aggregation")
    return _reduce(var.copies, var.agg)[0]


def padded_input_shape(p: Program) -> tuple:
    """The shape strategax traces the input as (padded to the largest replica, or the batch)."""
    if p.inputs == "ragged":
        return (max(p.rows), D)
    if p.inputs == "wide":
        return (2, max(p.rows))
    if p.inputs == "dataset" and p.n == 1:  # one replica: its partial batch as it is, nothing padded
        return (p.rows[0] % 2 or 2, D)
    return (2, D)


def _ref_post(p: Program, out: list) -> np.ndarray | None:
    """TensorFlow's strategy.reduce / gather of each replica's `out` (Refused where it raises)."""
    if p.post is None:
        return None
    if p.post in ("reduce_sum", "reduce_mean"):
        if not _rows_of(out):
            raise Refused("strategy.reduce without axis of values whose shapes differ")
        return _reduce(out, p.post[len("reduce_"):])[0]
    if any(np.ndim(v) == 0 for v in out) or len({np.shape(v)[1:] for v in out}) > 1:
        raise Refused("strategy.reduce / gather along axis 0 of scalars, or of pieces that do not line up")
    whole = np.concatenate(out, axis=0)
    if p.post == "gather0":
        return whole
    total = np.sum(whole, axis=0, dtype=np.float64)
    return np.asarray(total / whole.shape[0] if p.post == "reduce_mean0" else total, np.float32)


def run_reference(p: Program, comps: list[np.ndarray], rounded: bool = False) -> tuple:
    """What TensorFlow computes for `p` from each replica's input; raises Refused where it raises.
    `rounded`: each compressed reduction's operands and result rounded to bfloat16 (how far
    compression alone can move the answer)."""
    var = None
    if p.var is not None:
        init = np.zeros(D, np.float32) if p.var[0] == "on_read" else np.asarray([1.0, -2.0, 0.5], np.float32)
        var = _RefVar(p.var[0], p.var[1], [init] * p.n)
    vals = [list(comps), [np.asarray(c * 0.5 + 1.0, np.float32) for c in comps]]
    shapes = [padded_input_shape(p)] * 2
    for s in p.steps:
        value, shape = _ref_step(s, vals, shapes, p, var, rounded)
        vals.append(value)
        shapes.append(shape)
    if isinstance(vals[-1], _Poison):
        raise Refused(vals[-1].why)
    global _LARGEST  # the largest magnitude of any value: bf16 rounding's absolute error scales with it
    _LARGEST = max(float(np.max(np.abs(np.asarray(v, np.float64)), initial=0.0)) for vs in vals
                   if not isinstance(vs, _Poison) for v in vs)
    return vals[-1], None if var is None else _cross_replica_read(var), _ref_post(p, vals[-1])


# --- the check ---------------------------------------------------------------------------------------
_LARGEST = 0.0  # set by run_reference


def tolerance(p: Program) -> dict:
    """bf16 compression rounds each compressed reduction to 8 bits of mantissa: an absolute error
    of a few 2**-8 of the largest value the program computes, which later steps carry along
    (a difference of two large sums keeps it), so compressed programs are held to that."""
    compressed = p.compression is not None and any(
        s[0] in ("all_reduce_sum", "all_reduce_mean", "grad_all_reduce", "batch_reduce_sum", "batch_reduce_mean",
                 *TRANSPOSE_COLLECTIVE) for s in p.steps)
    if compressed:
        return dict(rtol=3e-2, atol=3e-2 * (1.0 + _LARGEST), scaled=False)
    return dict(rtol=2e-4, atol=2e-4, scaled=True)


def check(p: Program) -> str:
    """Run `p` both ways; "ok", "refused: <message>" (strategax raised a named error), or raise
    AssertionError describing the difference. Non-strategax exceptions propagate."""
    strategy = strategy_for(p.n)
    _, comps = make_inputs(p, strategy)
    try:
        want = run_reference(p, comps)
    except Refused as why:
        want = why
    try:
        got = run_strategax(p)
    except sx.StrategaxError as e:
        if isinstance(e, sx.InternalError):
            raise
        assert isinstance(e, (ValueError, TypeError, RuntimeError)) and "fix:" in str(e), repr(e)
        if isinstance(want, Refused):
            return "both raise"
        return f"refused: {str(e).splitlines()[0].split(': ', 1)[-1][:160]}"
    assert not isinstance(want, Refused), f"TensorFlow raises ({want}); strategax computed {got}"
    tol = tolerance(p)
    if tol["scaled"] is False:  # compressed: does rounding to bf16 alone move the answer past it?
        largest = _LARGEST
        try:
            rounded = run_reference(p, comps, rounded=True)
            shaky = _compare(rounded, want, tol) is not None
        finally:
            globals()["_LARGEST"] = largest
        if shaky:  # ill-conditioned under compression (sin of a large rounded sum): shapes only
            assert _compare(got, want, tol, shapes_only=True) is None, _compare(got, want, tol, shapes_only=True)
            return "ok (bf16: shapes only)"
    problem = _compare(got, want, tol)
    assert problem is None, problem
    return "ok"


def _compare(got: tuple, want: tuple, tol: dict, shapes_only: bool = False) -> str | None:
    """None when `got` (values per replica, variable read, post call) matches `want`, else why."""
    (gv, gr, gp), (wv, wr, wp) = got, want
    if len(gv) != len(wv):
        return f"{len(gv)} replicas' values, {len(wv)} expected"
    pairs = [(f"replica {r}", g, w) for r, (g, w) in enumerate(zip(gv, wv))]
    pairs += [(what, g, w) for what, g, w in (("the variable read after the run", gr, wr), ("the post call", gp, wp))
              if w is not None]
    for what, g, w in pairs:
        if g is None:
            return f"{what}: strategax returned nothing"
        if np.shape(g) != np.shape(w):
            return f"{what}: shape {np.shape(g)} != {np.shape(w)}"
        if shapes_only:
            continue
        scale = 1.0 + float(np.max(np.abs(np.nan_to_num(w)), initial=0.0)) if tol["scaled"] else 1.0
        try:
            np.testing.assert_allclose(g, w, rtol=tol["rtol"], atol=tol["atol"] * scale, err_msg=what)
        except AssertionError as e:
            return str(e)
    return None
