"""`strategy.extended`: the StrategyExtended API (reductions to destinations, updates of
variables in cross-replica context, colocation, device attributes, the seed's
`experimental_run_steps_on_iterator`)."""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp

from .. import _context
from .._markers import is_variable
from ..dialects import collectives
from ..errors import (DistributionTypeError, DistributionValueError, check_callable, check_int, check_mapping,
                      check_sequence, check_type)
from ..trace import StrategyFunction
from ..trace import range as steps_range
from ..trace.cache import LRU
from ..trace.fn_key import function_key
from ..trace.retracing import Detector
from ..trace.distributed_values import DistributedValues, Mirrored, PerReplica, is_distributed, local_value
from . import context
from .cross_replica import eager_function
from .options import check_options
from .reduce_op import ReduceOp
from .replica_context import ReplicaContext


def _is_device_string(destinations) -> bool:
    return isinstance(destinations, str)


class MultiStepContext:
    """What `experimental_run_steps_on_iterator` hands `fn` and returns (TensorFlow's
    `MultiStepContext`): `last_step_outputs` (values of the last step, reduced when given a
    reduce op) and `non_tensor_outputs` (Python values, set when the steps are traced)."""

    def __init__(self):
        self._last_step_outputs: dict = {}
        self._non_tensor_outputs: dict = {}
        self.run_op = None  # TensorFlow 1's op; the steps have run when the call returns

    @property
    def last_step_outputs(self) -> dict:
        return self._last_step_outputs

    @property
    def non_tensor_outputs(self) -> dict:
        return self._non_tensor_outputs

    def set_last_step_output(self, name: str, output, reduce_op=None) -> None:
        """Return `output` of the last step as `last_step_outputs[name]`, reduced across the
        replicas with `reduce_op` (required in replica context)."""
        if context.in_cross_replica_context():
            self._last_step_outputs[name] = (output if reduce_op is None else
                                             context.get_strategy().reduce(reduce_op, output, axis=None))
            return
        if reduce_op is None:
            raise DistributionValueError("set_last_step_output in replica context needs a reduce_op",
                                         "pass reduce_op=sx.ReduceOp.SUM or MEAN")

        def merge_fn(strategy, value):
            self._last_step_outputs[name] = strategy.reduce(reduce_op, value, axis=None)
        context.get_replica_context().merge_call(merge_fn, args=(output,))

    def set_non_tensor_output(self, name: str, output) -> None:
        """Hand `output` (any Python value) back as `non_tensor_outputs[name]`."""
        if context.in_cross_replica_context():
            self._non_tensor_outputs[name] = output
            return

        def merge_fn(strategy, value):
            self._non_tensor_outputs[name] = strategy.experimental_local_results(value)
        context.get_replica_context().merge_call(merge_fn, args=(output,))


class StrategyExtended:
    """Additional APIs for algorithms that need to be distribution-aware."""

    def __init__(self, strategy):
        self._strategy = strategy
        self._run_steps = LRU()  # (function key, iterations) -> (StrategyFunction, MultiStepContext)

    @property
    def worker_devices(self) -> tuple:
        return tuple(self._strategy._devices)

    @property
    def parameter_devices(self) -> tuple:
        return tuple(self._strategy._devices)

    experimental_require_static_shapes = False
    experimental_between_graph = False
    should_checkpoint = True
    should_save_summary = True
    experimental_should_init = True

    def call_for_each_replica(self, fn, args=(), kwargs=None):
        """Same as `strategy.run`."""
        return self._strategy.run(fn, args, kwargs)

    def experimental_run_steps_on_iterator(self, fn: Callable, iterator, iterations: int = 1,
                                           initial_loop_values=None) -> MultiStepContext:
        """Run `fn(ctx, next(iterator))` `iterations` times in one program (one on-device loop,
        `sx.range`); returns the MultiStepContext. When the iterator runs out, the steps that
        have batches run. `initial_loop_values` is accepted for TensorFlow 1 code and not
        needed: the outputs' structure comes from `fn`."""
        check_callable(fn, "experimental_run_steps_on_iterator's fn", "pass a function fn(ctx, inputs)")
        check_int(iterations, "iterations", minimum=1)

        def make():
            traced = MultiStepContext()  # keeps the non-tensor outputs set while tracing

            def run_steps(iterator):
                ctx = MultiStepContext()
                for _ in steps_range(int(iterations)):
                    fn(ctx, next(iterator))
                traced._non_tensor_outputs = ctx.non_tensor_outputs
                return ctx.last_step_outputs

            return (StrategyFunction(self._strategy, run_steps, "run_steps_on_iterator", detector=Detector()), traced)
        function, traced = self._run_steps.get_or_make((function_key(fn), int(iterations)), make)
        result = MultiStepContext()
        result._last_step_outputs = function(iterator)
        result._non_tensor_outputs = dict(traced.non_tensor_outputs)
        return result

    # --- reductions ------------------------------------------------------------------------
    def reduce_to(self, reduce_op, value: Any, destinations: Any, options=None):
        """Reduce a distributed value across replicas to `destinations` (a Mirrored result)."""
        return self.batch_reduce_to(reduce_op, [(value, destinations)], options)[0]

    def batch_reduce_to(self, reduce_op, value_destination_pairs: Sequence, options=None) -> list:
        """`reduce_to` of many values; with `options.bytes_per_pack` the reductions are bucketed."""
        context.require_cross_replica("extended.batch_reduce_to")
        check_options(options, "extended.batch_reduce_to")
        op = ReduceOp.parse(reduce_op)
        if not isinstance(value_destination_pairs, (list, tuple)) or not all(
                isinstance(p, (list, tuple)) and len(p) == 2 for p in value_destination_pairs):
            raise DistributionTypeError(
                f"batch_reduce_to takes a list of (value, destinations) pairs, not {value_destination_pairs!r:.80}",
                "pass [(value, destinations), ...], e.g. [(grad, var) for grad, var in grads_and_vars]")
        pairs = list(value_destination_pairs)
        for value, _ in pairs:
            for x in jax.tree_util.tree_leaves(value, is_leaf=is_distributed):
                if not (is_distributed(x) or is_variable(x) or hasattr(x, "dtype")
                        or isinstance(x, (int, float, complex, bool))):
                    raise DistributionTypeError(f"extended.reduce_to got a {type(x).__name__} ({x!r:.40}) where it "
                                                "takes arrays or distributed values",
                                                "pass the PerReplica value that strategy.run returned")
        for value, _ in pairs:
            if not is_distributed(value) and op is ReduceOp.SUM and self._strategy.num_replicas_in_sync > 1:
                raise DistributionValueError(
                    "extended.reduce_to(SUM, ...) of a value that is not distributed (TensorFlow "
                    "raises here too: every replica would add the same value)",
                    "pass the PerReplica value from strategy.run, or use MEAN")
        if not _context.is_tracing():
            values = [v for v, _ in pairs]
            if not any(is_distributed(v) for v in values):
                return values
            reduced = eager_function(
                self._strategy, ("batch_reduce_to", op, options),
                lambda: lambda values: self.batch_reduce_to(op, [(v, None) for v in values], options),
                "batch_reduce_to")(values)
            return [r if not _is_device_string(d) or not is_distributed(r) else r.values[0]
                    for r, (_, d) in zip(reduced, pairs)]
        bytes_per_pack = None if options is None else options.bytes_per_pack
        compression = self._strategy._communication_options.merge(options).compress_to  # the strategy's default
        out = []
        for value, _ in pairs:
            if not is_distributed(value):
                out.append(value)
                continue
            out.append(Mirrored.from_tracer(collectives.all_reduce(
                local_value(value), op.ir_name, "StrategyExtended.batch_reduce_to", bytes_per_pack=bytes_per_pack,
                compression=compression, carries="gradient")))
        return out

    def broadcast_to(self, tensor: Any, destinations: Any):
        """`tensor` (the same everywhere in cross-replica code) as a Mirrored value."""
        if not hasattr(tensor, "dtype") and not isinstance(tensor, (int, float, bool, list, tuple)):
            raise DistributionTypeError(f"broadcast_to takes a tensor, not {type(tensor).__name__} {tensor!r:.40}",
                                        "pass an array (the same value for every replica)")
        if _context.is_tracing():
            return Mirrored.from_tracer(jnp.asarray(tensor))
        return Mirrored(tuple(jax.device_put(jnp.asarray(tensor), d) for d in self._strategy._devices))

    # --- updates ---------------------------------------------------------------------------
    def _update_args(self, args: Any, per_replica_ok: bool = False) -> Any:
        def unwrap(x):
            if isinstance(x, PerReplica) and not per_replica_ok:
                raise DistributionValueError(
                    "a PerReplica value was passed to extended.update: every copy of a mirrored "
                    "variable must receive the same value",
                    "reduce it first (extended.reduce_to / batch_reduce_to)")
            if is_distributed(x):
                return local_value(x) if _context.is_tracing() else x.values[0]
            return x
        return jax.tree_util.tree_map(unwrap, args, is_leaf=is_distributed)

    def update(self, var, fn: Callable, args=(), kwargs=None, group: bool = True):
        """Run `fn(var, *args, **kwargs)` in update context and return one result per replica (a
        Mirrored for `group=True`, a tuple otherwise), as TensorFlow. A PerReplica argument
        gives copy i of a sync-on-read variable component i; for a mirrored variable it must be
        provably the same on every replica (inside a compiled function) or be reduced first."""
        context.require_cross_replica("extended.update")
        if not is_variable(var):
            raise DistributionTypeError(f"extended.update's var must be a variable, not {type(var).__name__}",
                                        "pass the sx.Variable to update: extended.update(v, fn, args=(x,))")
        check_callable(fn, "extended.update's fn", "pass a function fn(var, *args) that updates the variable")
        check_sequence(args, "extended.update's args", "wrap a single argument as args=(x,)")
        check_mapping(kwargs, "extended.update's kwargs", "pass keyword arguments as kwargs={'name': value}")
        check_type(group, bool, "extended.update's group", "pass group=True or False")
        kwargs = kwargs or {}
        per_replica = any(isinstance(x, PerReplica) for x in
                          jax.tree_util.tree_leaves((args, kwargs), is_leaf=is_distributed))
        if per_replica and not _context.is_tracing():  # one compiled program gives each copy its part
            # cached like an eager run: the same variable, function (by code, defaults and
            # captures) and grouping reuse one program (the entry keeps `var` alive, so its id holds)
            return eager_function(
                self._strategy, ("update", id(var), function_key(fn), group),
                lambda: lambda a, k: self.update(var, fn, a, k, group), "update")(tuple(args), kwargs)
        local = per_replica and getattr(var, "_per_replica", False)  # a sync-on-read variable
        args, kwargs = self._update_args((tuple(args), kwargs), per_replica_ok=_context.is_tracing())
        if local:  # each replica writes its own copy, as TensorFlow's per-device update
            with _context.push(self._strategy, ReplicaContext(self._strategy)):
                result = fn(var, *args, **kwargs)
            return self._group(result, group, PerReplica)
        with _context.push(self._strategy):
            result = fn(var, *args, **kwargs)
        return self._group(result, group)

    def update_non_slot(self, colocate_with, fn: Callable, args=(), kwargs=None, group: bool = True):
        """Run `fn(*args, **kwargs)` once in cross-replica context (e.g. to bump a step counter)."""
        context.require_cross_replica("extended.update_non_slot")
        check_callable(fn, "extended.update_non_slot's fn", "pass a function fn(*args)")
        check_sequence(args, "extended.update_non_slot's args", "wrap a single argument as args=(x,)")
        args, kwargs = self._update_args((tuple(args), kwargs or {}))
        with _context.push(self._strategy):
            result = fn(*args, **kwargs)
        return self._group(result, group)

    def _group(self, result, group: bool, cls: type[DistributedValues] = Mirrored):
        """One result per replica, as TensorFlow: `cls` values for group=True (a plain value
        with one replica), else a tuple with one result per replica."""
        n = self._strategy.num_replicas_in_sync
        if result is None:
            return None

        def one(x):
            if is_distributed(x) or is_variable(x) or not hasattr(x, "dtype"):
                return x
            if _context.is_tracing():
                return cls.from_tracer(x)
            return cls(tuple(x for _ in range(n)))
        if not group:
            per = jax.tree_util.tree_map(one, result, is_leaf=is_distributed) if cls is PerReplica else result
            return tuple(per for _ in range(n))
        if n == 1 and cls is Mirrored:
            return result
        return jax.tree_util.tree_map(one, result, is_leaf=is_distributed)

    # --- variables -------------------------------------------------------------------------
    @contextlib.contextmanager
    def colocate_vars_with(self, variable):
        """Variables created here live where `variable` lives (every replica's device)."""
        yield

    def non_slot_devices(self, var_list) -> tuple:
        return tuple(self._strategy._devices)

    def read_var(self, v):
        """The cross-replica value of `v` (aggregated for a sync-on-read variable)."""
        if not is_variable(v):
            raise DistributionTypeError(f"read_var takes a variable, not {type(v).__name__} {v!r:.40}",
                                        "pass an sx.Variable created in the strategy's scope")
        return v.read_value()

    def value_container(self, value):
        """The distributed variable a component belongs to (`value` itself otherwise)."""
        return getattr(value, "_container", value)

    def variable_created_in_scope(self, v) -> bool:
        return getattr(v, "_strategy", None) is self._strategy
