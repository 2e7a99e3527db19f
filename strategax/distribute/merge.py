"""`ReplicaContext.merge_call`: pause the replicas, run `merge_fn` once in cross-replica context.

While tracing, "once" means once in the program every replica runs: `merge_fn` receives a
`PerReplica` view of each traced argument (its local value), so `strategy.reduce`,
`extended.reduce_to`/`batch_reduce_to` and `experimental_local_results` inside it become IR
collectives, and variable updates inside it are cross-replica updates. Its results go back to
every replica; a `PerReplica` result gives replica i its component i.
"""
from __future__ import annotations

from typing import Any, Callable

import jax
from jax._src import core as jax_core

from .. import _context
from .._markers import is_default_strategy, is_variable
from ..errors import DistributionRuntimeError, check_callable, check_mapping, check_sequence
from ..trace.distributed_values import DistributedValues, Form, PerReplica, is_distributed


def _to_per_replica(x: Any) -> Any:
    if is_distributed(x) or is_variable(x):
        return x
    if isinstance(x, (jax.Array, jax_core.Tracer)) or hasattr(x, "shape") and hasattr(x, "dtype"):
        return PerReplica.from_tracer(x)
    return x  # a Python value: the same object on every replica


def _to_local(x: Any) -> Any:
    if isinstance(x, DistributedValues) and not is_variable(x):
        if x.form is not Form.TRACED:
            raise DistributionRuntimeError(
                "merge_fn returned a distributed value that was not computed in this program",
                "return values computed from merge_fn's arguments")
        return x.tracer
    return x


def merge_call(replica_context, merge_fn: Callable, args=(), kwargs=None, top_level_trace=None) -> Any:
    """Run `merge_fn(strategy, *args, **kwargs)` in cross-replica context; see the module doc.
    With `top_level_trace`, a call from inside another JAX trace (a loop, branch or jax.jit in
    the replica function) raises, as TensorFlow's merge_call does inside control flow."""
    strategy = replica_context.strategy
    check_callable(merge_fn, "merge_call's merge_fn", "pass a function merge_fn(strategy, *args)")
    check_sequence(args, "merge_call's args", "wrap a single argument as args=(x,)")
    check_mapping(kwargs, "merge_call's kwargs", "pass keyword arguments as kwargs={'name': value}")
    kwargs = kwargs or {}
    entry = _context.current()
    if entry is not None and entry.in_merge:
        raise DistributionRuntimeError(
            "merge_call was called inside merge_fn (a nested merge_call)",
            "merge_fn already runs in cross-replica context: call what you need directly there")
    if entry is None and is_default_strategy(strategy):  # the default replica context
        with _context.push(strategy, None, in_merge=True):
            return merge_fn(strategy, *args, **kwargs)
    if entry is None or entry.replica_context is None:
        raise DistributionRuntimeError("merge_call was called outside a replica function",
                                       "call it inside the function given to strategy.run")
    if not _context.is_tracing():  # the default strategy: one replica, nothing to merge
        with _context.push(strategy, None, in_merge=True):
            return merge_fn(strategy, *args, **kwargs)
    if top_level_trace is not None and jax_core.trace_ctx.trace is not top_level_trace:
        raise DistributionRuntimeError(
            "merge_call was called inside control flow or a JAX transformation (lax.while_loop, "
            "cond, scan, jax.jit, ...) in the replica function; TensorFlow raises RuntimeError "
            "there too", "call merge_call at the top level of the replica function (move the loop "
            "or cond into merge_fn, or around strategy.run); optimizer.apply_gradients and "
            "variable updates work inside loops")
    leaf = lambda x: is_distributed(x) or is_variable(x)  # noqa: E731  a one-line predicate
    wrapped_args, wrapped_kwargs = jax.tree_util.tree_map(_to_per_replica, (tuple(args), kwargs), is_leaf=leaf)
    with _context.push(strategy, None, in_merge=True):
        result = merge_fn(strategy, *wrapped_args, **wrapped_kwargs)
    return jax.tree_util.tree_map(_to_local, result, is_leaf=leaf)
