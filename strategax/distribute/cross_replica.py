"""The cross-replica calls after their argument checks (`strategy.py` checks, this module
computes): `reduce`, `gather` and `local_results`, each eager and traced, and `eager_function`,
the one cache of the compiled functions every eager API call runs (run, reduce, gather,
batch_reduce_to, extended.update).

Eagerly a call runs a compiled function of its traced body, made once per key (the API, the
user's function by code, defaults and captures, the options) and then once per input
signature; the program's outputs come back cut to their real rows (mask-padding's
`padded_results`). Traced, the body is the collective itself; `strategy.reduce(..., axis=k)`
counts real entries with `sx.row_ones`, whose sum the mask-padding pass masks, and a gather
along a padded axis concatenates only the real entries (mask-padding's `sx.all_gather_real`).

A PerReplica whose components differ in shape ("ragged", as TensorFlow allows: arrays of
different lengths, or a dataset whose replicas get 2 and 3 rows) is combined on the host by
an eager `gather` or `reduce(op, v, axis=k)`, and by one in a compiled function that captured
it (not passed as an argument: its components are constants of the program, as TensorFlow
captures by value); `run` takes one that differs only along the
batch axis as a padded batch (`ragged_as_batches`), and one that differs on other axes padded
to one shape (`trace.extents`). Where the result has no meaning (a reduction without axis,
pieces that do not line up) it raises, as TensorFlow does.
"""
from __future__ import annotations

from typing import Any, Callable, TypeGuard

import jax
import jax.numpy as jnp
import numpy as np

from .. import _context
from .._markers import is_variable
from ..dialects import collectives
from ..dialects.rows import row_ones
from ..errors import DistributionValueError
from ..input import padding
from ..input.place import place_pieces
from ..trace import StrategyFunction
from ..trace.batches import LocalResult
from ..trace.distributed_values import (DistributedValues, Form, Mirrored, PerReplica, PerReplicaBatch,
                                        check_components, is_distributed, local_value)
from ..trace.fn_key import named_parts
from ..trace.retracing import Detector
from ..variables import MirroredVariable
from .reduce_op import ReduceOp


def eager_function(strategy, key: tuple, make_body: Callable[[], Callable], name: str,
                   origin: Callable | None = None) -> StrategyFunction:
    """The compiled function of an eager API call, made once per `key` (the API's name first;
    a user function in it by `fn_key.function_key`) and kept in the strategy's LRU (at most
    STRATEGAX_CACHE_SIZE); it keeps its programs per input signature. With `origin` (the
    user's function `strategy.run` runs) the retracing warning counts that function's traces
    and names its captured values; other calls count their own."""
    def make() -> StrategyFunction:
        if origin is None:
            return StrategyFunction(strategy, make_body(), name=name, detector=Detector())
        return StrategyFunction(strategy, make_body(), name=name, origin=origin, parts=named_parts(origin))
    return strategy._eager_functions.get_or_make(key, make)


def _map(fn: Callable, tree: Any) -> Any:
    return jax.tree_util.tree_map(fn, tree, is_leaf=is_distributed)


def _leaves(tree: Any) -> list:
    return jax.tree_util.tree_leaves(tree, is_leaf=is_distributed)


def _is_mirrored_variable(x) -> TypeGuard[MirroredVariable]:
    return isinstance(x, MirroredVariable)


# --- ragged values ------------------------------------------------------------------------------
def is_ragged(x: Any) -> bool:
    """A PerReplica built from array components of one rank and dtype but different shapes."""
    if not isinstance(x, PerReplica) or x.form is Form.TRACED or not x.form.has_components:
        return False
    comps = x.held_components()
    if not all(hasattr(c, "shape") and hasattr(c, "dtype") for c in comps) or len({tuple(c.shape) for c in comps}) <= 1:
        return False
    if len({c.ndim for c in comps}) > 1 or len({np.dtype(c.dtype) for c in comps}) > 1:
        raise DistributionValueError(
            f"the components of this PerReplica differ in rank or dtype: "
            f"{[(tuple(c.shape), np.dtype(c.dtype).name) for c in comps]}",
            "give every replica an array of the same rank and dtype (lengths may differ)")
    return True


def _host_components(x) -> list[np.ndarray]:
    """The components of `x`, on the host."""
    return [np.asarray(jax.device_get(c)) for c in x.values]


def ragged_as_batches(strategy, tree: Any) -> Any:
    """`tree` with each ragged PerReplica as a padded per-replica batch, for `run`."""
    return _map(lambda x: _ragged_as_batch(strategy, x) if is_ragged(x) else x, tree)


def _ragged_as_batch(strategy, x):
    """`x` differing only along axis 0 as a padded per-replica batch; differing on other axes,
    `x` itself (a compiled function pads it to one shape, `trace.extents`)."""
    comps = _host_components(x)
    if comps[0].ndim == 0 or len({c.shape[1:] for c in comps}) > 1:
        return x
    if strategy._num_local_replicas != strategy.num_replicas_in_sync:
        raise DistributionValueError(
            "strategy.run of a PerReplica built by hand whose components differ in length, in a "
            "multi-worker job", "distribute the data with distribute_datasets_from_function")
    counts = [c.shape[0] for c in comps]
    return place_pieces(strategy._mesh, [comps], jax.tree_util.tree_structure(0), counts, max(counts))


# --- reduce -----------------------------------------------------------------------------------
def reduce(strategy, op: ReduceOp, value: Any, axis: int | None) -> Any:
    """`strategy.reduce(op, value, axis)` of checked arguments."""
    leaves = _leaves(value)
    if not any(is_distributed(x) for x in leaves):
        return _reduce_plain(strategy, op, value, axis)
    tracing = _context.is_tracing()
    if any(is_ragged(x) for x in leaves):  # eager, or captured by a compiled function: host values
        return _map(lambda x: _reduce_ragged(op, x, axis) if is_ragged(x) else reduce(strategy, op, x, axis), value)
    for x in leaves:
        if is_distributed(x) and x.form is not Form.TRACED:
            check_components(x, strategy.num_replicas_in_sync, strategy._num_local_replicas)
    if tracing:
        return _map(lambda x: _reduce_traced(op, x, axis), value)
    fn = eager_function(strategy, ("reduce", op, axis), lambda: lambda value: _map(
        lambda x: _reduce_traced(op, x, axis), value), "reduce")
    _check_even(value, axis)
    return fn(value)


def _reduce_plain(strategy, op: ReduceOp, value: Any, axis: int | None) -> Any:
    """TensorFlow 2.21 treats a plain value as the same on every replica: MEAN returns it
    (its mean over `axis`), SUM over `axis` is N times its sum, SUM without axis raises."""
    n = strategy.num_replicas_in_sync
    if op is ReduceOp.SUM and axis is None and n > 1:
        raise DistributionValueError(
            f"strategy.reduce(SUM, ...) got a value that is not distributed, on {n} replicas "
            "(TensorFlow raises here too: the sum is ambiguous)",
            "pass the PerReplica value that strategy.run returned, give an axis, or use MEAN")
    if axis is None:  # a variable gives its value, as TensorFlow's reduce of one
        return jax.tree_util.tree_map(lambda x: x.read_value() if is_variable(x) else x, value)

    def one(x):
        x = jnp.asarray(x)
        k = collectives.check_axis(axis, x.ndim, "strategy.reduce")
        return jnp.mean(x, axis=k) if op is ReduceOp.MEAN else n * jnp.sum(x, axis=k)
    return jax.tree_util.tree_map(one, value)


def _reduce_traced(op: ReduceOp, x, axis: int | None):
    """The traced reduction of one leaf (its padded rows: mask-padding's, in and out)."""
    local = local_value(x) if is_distributed(x) else jnp.asarray(x)
    if axis is not None:
        axis = collectives.check_axis(axis, local.ndim, "strategy.reduce")
    if axis is None:  # padded rows of replicas with different real counts: a gap of mask-padding
        return collectives.all_reduce(local, op.ir_name, "Strategy.reduce")
    return _reduce_rows(op, local, axis)


def _reduce_rows(op: ReduceOp, local, axis: int):
    """Reduce over `axis`: the sum (the mask-padding pass masks padded entries exactly when
    `axis` of `local` is padded: a partial batch's rows, or the axis along which the replicas'
    values differ in size) and, for MEAN, a division by the entries summed over all replicas,
    counted the same way: the sum of `sx.row_ones` (the real global count along a padded axis,
    its size x replicas along any other)."""
    total = collectives.all_reduce(jnp.sum(local, axis=axis), "sum", "Strategy.reduce")
    if op is ReduceOp.SUM or total.size == 0:  # nothing to divide: an empty mean is empty
        return total
    ones = row_ones(local, axis).astype(total.dtype if jnp.issubdtype(total.dtype, jnp.floating) else jnp.float32)
    n = collectives.all_reduce(jnp.sum(ones), "sum", "Strategy.reduce")
    return total / n  # no rows anywhere: NaN, as TensorFlow's mean of nothing


def _reduce_ragged(op: ReduceOp, x, axis: int | None):
    """SUM (or MEAN: the sum divided by the total length) of every component over `axis`."""
    comps = _host_components(x)
    if axis is None:
        raise DistributionValueError(
            f"strategy.reduce without axis of a PerReplica whose components differ in shape "
            f"({[c.shape for c in comps]}): there is no element-wise combination (TensorFlow raises too)",
            "reduce over an axis along which the components differ (e.g. axis=0)")
    axis = collectives.check_axis(axis, comps[0].ndim, "strategy.reduce")
    _check_other_dims(comps, axis, "strategy.reduce")
    total = sum(np.sum(c, axis=axis) for c in comps)
    if op is ReduceOp.MEAN:
        total = total / sum(c.shape[axis] for c in comps)
    return jnp.asarray(np.asarray(total, comps[0].dtype))


def _check_even(value: Any, axis: int | None = None, gather: bool = False) -> None:
    """`reduce(op, v)` without axis (or over another axis than the batch's) combines row by row,
    and `gather` along another axis needs equal rows: the replicas' real row counts must agree."""
    for v in _leaves(value):
        if not isinstance(v, PerReplicaBatch) or len(set(v.real_counts)) <= 1:
            continue
        ndim = max(v.component_ndim, 1)
        if axis is not None and axis % ndim == 0:
            continue
        if gather:
            raise DistributionValueError(
                f"strategy.gather(axis={axis}) of a partial batch whose replicas hold different numbers "
                f"of real rows ({list(v.real_counts)}): the pieces do not line up (TensorFlow raises too)",
                "gather along the batch axis (axis=0)")
        raise DistributionValueError(
            f"strategy.reduce {'without axis' if axis is None else f'over axis {axis}'} combines the "
            f"replicas' values row by row, but their real row counts differ ({list(v.real_counts)}) in this "
            "partial batch (TensorFlow raises too)",
            "reduce over the batch axis (axis=0), or reduce per-replica scalars such as losses")


# --- gather -----------------------------------------------------------------------------------
def gather(strategy, value: Any, axis: int) -> Any:
    """`strategy.gather(value, axis)` of checked arguments."""
    value = jax.tree_util.tree_map(_gather_variable(strategy, axis), value, is_leaf=_is_mirrored_variable)
    leaves = _leaves(value)
    if any(is_ragged(x) for x in leaves):  # eager, or captured by a compiled function (TensorFlow
        # captures by value): the components are on the host, their concatenation a constant
        return _map(lambda x: _gather_ragged(x, axis) if is_ragged(x) else gather(strategy, x, axis), value)
    if _context.is_tracing():
        return _gather_tree(strategy, value, axis)
    if not any(is_distributed(x) for x in leaves):
        return value
    _check_even(value, axis, gather=True)
    fn = eager_function(strategy, ("gather", axis), lambda: lambda value: _gather_tree(strategy, value, axis), "gather")
    return fn(value)


def _gather_tree(strategy, value: Any, axis: int) -> Any:
    """The traced gather of every leaf (mask-padding keeps only real entries along a padded axis)."""
    n = strategy.num_replicas_in_sync
    return _map(lambda x: collectives.all_gather(local_value(x), axis, n, "Strategy.gather")
                if is_distributed(x) else x, value)


def _gather_variable(strategy, axis: int) -> Callable:
    """A mirrored variable of this strategy gathers as its copies concatenated (TensorFlow)."""
    def one(x):
        if not _is_mirrored_variable(x) or x._strategy is not strategy:
            return x
        return jnp.concatenate([jnp.asarray(x.read_value())] * strategy.num_replicas_in_sync, axis=axis)
    return one


def _gather_ragged(x, axis: int):
    """Every replica's component concatenated along `axis`."""
    comps = _host_components(x)
    axis = collectives.check_axis(axis, comps[0].ndim, "strategy.gather")
    _check_other_dims(comps, axis, "strategy.gather")
    return jnp.asarray(np.concatenate(comps, axis=axis))


def _check_other_dims(comps: list[np.ndarray], axis: int, api: str) -> None:
    rest = {c.shape[:axis] + c.shape[axis + 1:] for c in comps}
    if len(rest) > 1:
        raise DistributionValueError(
            f"{api}(axis={axis}) of a PerReplica whose components differ in shape off that axis "
            f"({[c.shape for c in comps]}): the pieces do not line up (TensorFlow raises too)",
            "give the components the same shape except along the axis you gather or reduce over")


# --- local results ------------------------------------------------------------------------------
def local_results(strategy, value: Any) -> tuple:
    """`strategy.experimental_local_results(value)`: one value per local replica (a 1-tuple
    for a plain value)."""
    if is_variable(value) and isinstance(value, DistributedValues):
        if not _context.is_tracing():
            return tuple(value.values)  # the copies, as TensorFlow
        if _is_mirrored_variable(value):
            return (value.read_value(),) * strategy.num_replicas_in_sync
    if is_distributed(value):
        if value.form is Form.TRACED:
            return _local_results_traced(strategy, value)
        return tuple(value.values)
    leaves, treedef = jax.tree_util.tree_flatten(value, is_leaf=is_distributed)
    if not any(is_distributed(x) for x in leaves):
        return (value,)
    results = {i: local_results(strategy, x) for i, x in enumerate(leaves) if is_distributed(x)}
    count = len(next(iter(results.values())))  # this worker's replicas (all of them while tracing)
    per_leaf = [results.get(i, (x,) * count) for i, x in enumerate(leaves)]
    return tuple(jax.tree_util.tree_unflatten(treedef, [p[i] for p in per_leaf]) for i in range(count))


def _local_results_traced(strategy, value: DistributedValues) -> tuple:
    n = strategy.num_replicas_in_sync
    if isinstance(value, Mirrored):
        return (value.tracer,) * n
    if padding.is_per_example(value.tracer) or _context.has_extents():  # no static shape: cut from
        return tuple(LocalResult(value, i) for i in range(n))  # the output after the run
    gathered = collectives.all_gather(value.tracer[None], 0, n, "experimental_local_results")
    return tuple(gathered[i] for i in range(n))
