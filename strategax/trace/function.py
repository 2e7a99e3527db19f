"""`strategy.function`: trace a Python step into one IR module, run the passes, lower it to
one XLA executable, and cache that by input signature (at most `cache.cache_size()` programs,
least recently used evicted; frequent retracing logs a warning, `retracing`)."""
from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp

from .. import _context, ir
from .._markers import is_variable
from ..backends import Executable, gc_pause
from ..dialects.rows import mark_rows
from ..errors import (DistributionRuntimeError, DistributionTypeError, DistributionValueError, _is_internal,
                      internal_stage)
from ..ir import Module, TensorType
from ..ir.analysis import collective_stats
from ..passes import default_pipeline
from . import dump, retracing
from .batches import per_example
from .cache import cache_size
from .dump import check_platforms
from .distributed_values import DistributedValues, Form, Mirrored, PerReplica, PerReplicaBatch, is_distributed
from .fast_call import MAX_BUILDS, MISS, FastCall
from .importer import import_jaxpr
from .inspection import MemoryStats, StepStats, build_report, memory_stats, render_report
from .keys import is_key
from .batches import TraceInputs, reroll
from .kinds import KeyOutput, LocalOutput, Output, OutputEntry, StaticOutput
from .signature import (ARRAY, MIRRORED, PER_REPLICA, SCALAR, STATIC, STATIC_TYPES, Signature,
                        check_arguments, int32_error, leaf_type, out_of_int32, result_array, signature)
from .var_session import VarSession
from .compiled import Traced, _Compiled, host_streams, loop_constants

log = logging.getLogger("strategax")


def _innermost_user_frame(err: Exception) -> tuple[str, int] | None:
    """(file, line) of the innermost frame of the user's code in `err`'s traceback."""
    frame, location = err.__traceback__, None
    while frame is not None:
        if not _is_internal(frame.tb_frame.f_code.co_filename):
            location = (frame.tb_frame.f_code.co_filename, frame.tb_lineno)
        frame = frame.tb_next
    return location


def loop_branch_error(err: Exception) -> DistributionTypeError:
    """A Python `if`/`while`/`break` on a traced value inside a `for x in dataset` loop."""
    return DistributionTypeError(
        "a Python `if`, `while` or `break` on a value computed in the loop over the data: the loop's "
        "body is traced once, as one on-device step, so Python cannot branch on a step's values "
        "(TensorFlow's AutoGraph converts such a branch or `break`; strategax does not)",
        "compute both branches with jnp.where or lax.cond; to stop early, carry a JAX flag (`done = done | "
        "cond`) and make the later steps do nothing (e.g. scale their updates by `1 - done`), or run a "
        "fixed number of steps with `for _ in sx.range(n): step(next(iterator))`",
        location=_innermost_user_frame(err))


def _miss(args) -> object:
    """No shortcut: every call takes the full path."""
    return MISS


def _traced_scalar_error(fn: Callable, sig: Signature, err: Exception) -> DistributionTypeError:
    """reduce_retracing traced a Python number that the function uses as a Python value."""
    names = retracing.leaf_names(fn, sig.treedef, len(sig.kinds))
    traced = ", ".join(f"`{names[i]}`" for i, k in enumerate(sig.kinds) if k == SCALAR)
    location = _innermost_user_frame(err)
    return DistributionTypeError(
        f"with reduce_retracing=True the Python number(s) {traced} are traced as values, and this line "
        f"needs a concrete Python value (for an `if`, a shape, a range or an index): "
        f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}",
        "use the number through jnp (jnp.where, lax.cond, lax.dynamic_slice), or leave reduce_retracing "
        "off for this function so each number is a constant of its own program", location=location)


def _module_name(fn: Callable) -> str:
    name = getattr(fn, "__name__", "fn")
    return re.sub(r"[^A-Za-z0-9_.]", "_", name) or "fn"


def _argument_leaves(sig: Signature, dynamic: list[int], values: Sequence) -> list:
    """The call's leaves with each dynamic one replaced by its traced value: a typed key rebuilt
    from its key data, a padded batch's or padded value's axes marked for mask-padding, a
    distributed value around its tracer."""
    leaves = list(sig.leaves)
    extents: dict[int, list] = {e.leaf: [] for e in sig.extents}  # leaf -> [(axis, its traced real extent)]
    for e in sig.extents:
        extents[e.leaf].append((e.axis, values[dynamic.index(e.count)]))
    for i, v in zip(dynamic, values):
        kind = sig.kinds[i]
        if kind is ARRAY and is_key(sig.leaves[i]):  # key data in, a typed key to the user
            v = jax.random.wrap_key_data(v, impl=jax.random.key_impl(sig.leaves[i]))
        if isinstance(sig.leaves[i], PerReplicaBatch) and i < len(sig.leaves) - 1:
            v = mark_rows(v, values[-1])  # a padded batch: mask-padding follows its rows
        for axis, count in extents.get(i, ()):  # padded to one shape: likewise each padded axis
            v = mark_rows(v, count, axis, extent=True)
        leaves[i] = (PerReplica.from_tracer(v) if kind is PER_REPLICA else
                     Mirrored.from_tracer(v) if kind is MIRRORED else v)
    return leaves


class _Outputs:
    """The traced function's result as program outputs: its pytree structure and output plan
    (trace/kinds.py), set when the trace returns (`read`)."""

    def __init__(self, what: str):
        self.what = what  # who returned the result, for errors
        self.treedef: Any = None
        self.plan: list[OutputEntry] = []

    def read(self, result) -> list:
        """The arrays the program returns for `result`; records how each leaf comes back."""
        leaves, self.treedef = jax.tree_util.tree_flatten(result, is_leaf=is_distributed)
        arrays: list = []
        self.plan = [self._entry(leaf, arrays) for leaf in leaves]
        return arrays

    def _entry(self, leaf, arrays: list) -> OutputEntry:
        """How `leaf` comes back; the program outputs it needs are appended to `arrays`."""
        def add(x) -> int:
            arrays.append(x)
            return len(arrays) - 1
        if is_variable(leaf):
            return Output(ARRAY, add(jnp.asarray(leaf.read_value())))
        if isinstance(leaf, per_example.LocalResult):  # cut from its value's output after the run
            local = leaf.value.tracer
            at = next((k for k, a in enumerate(arrays) if a is local), None)
            return LocalOutput(add(local) if at is None else at, leaf.replica)
        if isinstance(leaf, DistributedValues):
            if leaf.form is not Form.TRACED:
                raise DistributionTypeError("the function returned a distributed value it did not compute",
                                            "return values computed from the function's arguments")
            return Output(PER_REPLICA if isinstance(leaf, PerReplica) else MIRRORED, add(leaf.tracer))
        if isinstance(leaf, STATIC_TYPES) and not isinstance(leaf, (bool, int, float, complex)):
            return StaticOutput(leaf)
        if is_key(leaf):  # a typed PRNG key out: its data, wrapped again after the call
            return KeyOutput(add(jax.random.key_data(leaf)), jax.random.key_impl(leaf))
        return Output(ARRAY, add(result_array(leaf, self.what)))


class StrategyFunction:
    """A Python function compiled whole for a strategy (`@strategy.function`); with
    `reduce_retracing=True` Python ints, floats and complexes are traced inputs, not constants."""

    def __init__(self, strategy, fn: Callable, name: str | None = None, *, reduce_retracing: bool = False,
                 origin: Callable | None = None, parts: Sequence = (), detector: retracing.Detector | None = None,
                 input_signature=None):
        self._strategy, self._fn = strategy, fn
        self._input_signature = None if input_signature is None else tuple(input_signature)
        self._name = _module_name(fn) if name is None else re.sub(r"[^A-Za-z0-9_.]", "_", name)
        self._cache: dict[tuple, _Compiled] = {}
        self._whole: dict[tuple, tuple] = {}  # signature key -> its program's `_Compiled.whole`
        self._fast: FastCall | None = None  # the last call's shortcut (trace/fast_call.py)
        self._fast_call = _miss  # its generated call
        self._cache_size = cache_size()
        self._reduce_retracing = bool(reduce_retracing)
        # the retracing warning: counted per Python function (`origin`: the user's function a
        # strategax wrapper runs); `parts` names its captured values
        self._origin, self._parts = origin or fn, list(parts)
        self._detector = detector or retracing.detector_for(self._origin)
        self.__wrapped__ = fn
        self.__doc__ = getattr(fn, "__doc__", None)

    def __reduce__(self):
        """Pickled as what it compiles, not its programs (a parameter-server worker that
        unpickles a step compiles it again, for its own devices)."""
        return StrategyFunction, (self._strategy, self._fn, self._name), {
            "_reduce_retracing": self._reduce_retracing, "_input_signature": self._input_signature}

    def __call__(self, *args, **kwargs) -> Any:
        if _context.is_tracing():
            return self._fn(*args, **kwargs)
        if self._input_signature is not None:
            args, kwargs = check_arguments(self._input_signature, args, kwargs), {}
        if not kwargs:
            out = self._fast_call(args)  # the last program's shortcut (trace/fast_call.py), or MISS
            if out is not MISS:
                return out
        sig = self._signature(args, kwargs)
        compiled = self._cache.get(self._key(sig))
        if compiled is None:
            compiled = self._compile(sig)
        else:
            detector = self._detector
            detector.calls += 1
            compiled.last_call = detector.calls
        if compiled.inputs is None:
            out = compiled(sig)
        else:
            compiled.take_inputs(sig)  # next(iterator) inside: take the batches now
            try:
                out = compiled(sig)
            except BaseException:  # a failed call consumes no batch
                compiled.inputs.put_back(sig)
                raise
            compiled.inputs.done(sig)
        if not kwargs and compiled.fast_builds < MAX_BUILDS and not compiled.whole:  # global arrays known now
            compiled.fast_builds += 1
            self._fast = FastCall.build(compiled, sig, args, self._detector)
            self._fast_call = _miss if self._fast is None else self._fast.call
        return out

    # --- tracing and compiling ------------------------------------------------------------
    def _trace(self, sig: Signature, snapshots: dict | None = None, timings: dict | None = None) -> Traced:
        """Trace the function for `sig`, import the jaxpr as IR and run the pass pipeline."""
        dynamic = [i for i, k in enumerate(sig.kinds) if k is not STATIC]
        session = VarSession(self._strategy)
        inputs = TraceInputs(self._strategy, sig.leaves, host_streams(sig))
        outputs = _Outputs(f"the strategy.function {self._name}")  # what the trace returns
        types = [leaf_type(sig.leaves[i], sig.kinds[i]) for i in dynamic]
        closed = self._make_jaxpr(self._flat_fn(sig, dynamic, session, inputs, outputs), sig, dynamic, types, inputs)
        with internal_stage("the import of the traced program into the IR"):  # the user's code has run
            closed, input_types, input_plan = reroll(closed, inputs)  # sx.range loops, next(iterator)
            func = import_jaxpr(closed, types + input_types, "main")
        module, variables = self._module(func, session, snapshots, timings)
        with internal_stage("planning the program's outputs"):
            # the results mask-padding found to be per-example come back with each replica's real rows
            padded = per_example.padded_inputs(sig, dynamic, input_plan)
            out_plan = per_example.output_plan(module, outputs.plan, padded)
        return Traced(module, outputs.treedef, out_plan, variables, input_plan, tuple(inputs.whole))

    def _flat_fn(self, sig: Signature, dynamic: list[int], session: VarSession, inputs: TraceInputs,
                 outputs: "_Outputs") -> Callable:
        """The function of the call's dynamic leaves that make_jaxpr traces: the user's function
        on the arguments rebuilt around the traced values, its result read by `outputs`."""
        strategy = self._strategy

        def flat_fn(*values):
            leaves = _argument_leaves(sig, dynamic, values)
            count, rows = (values[-1], sig.batch.padded_rows) if sig.batch is not None else (None, None)
            args, kwargs = jax.tree_util.tree_unflatten(sig.treedef, leaves[:sig.treedef.num_leaves])
            with _context.tracing(strategy, session, (count, rows), inputs, extents=bool(sig.extents)):
                result = self._fn(*args, **kwargs)
            return outputs.read(result)
        return flat_fn

    def _make_jaxpr(self, flat_fn: Callable, sig: Signature, dynamic: list[int], types: list[TensorType],
                    inputs: TraceInputs):
        """The closed jaxpr of `flat_fn` on values of `types`; a failure that is a known misuse
        raises its own error."""
        structs = [jax.ShapeDtypeStruct(t.shape, t.dtype, weak_type=sig.kinds[i] is SCALAR)  # as jax.jit
                   for t, i in zip(types, dynamic)]
        try:
            return jax.make_jaxpr(flat_fn)(*structs)
        except (TypeError, IndexError, ValueError) as err:  # JAX's concretization errors among them
            if inputs.looping and isinstance(err, jax.errors.ConcretizationTypeError):
                raise loop_branch_error(err) from None
            if SCALAR not in sig.kinds:
                raise
            self._check_needs_static(sig, err)
            raise
        except OverflowError as err:  # a Python int argument beyond int32 met an array
            big = [i for i, (k, x) in enumerate(zip(sig.kinds, sig.leaves)) if k is STATIC and out_of_int32(x)]
            if not big:
                raise
            names = retracing.leaf_names(self._origin, sig.treedef, len(sig.kinds))
            used = _innermost_user_frame(err)
            raise int32_error(names[big[0]], sig.leaves[big[0]],
                              ", and it is used as a number" + (f" at {used[0]}:{used[1]}" if used else "")) from None

    def _module(self, func, session: VarSession, snapshots: dict | None,
                timings: dict | None) -> tuple[Module, list]:
        """The module around the traced `func`, with its variables, after the pass pipeline."""
        strategy = self._strategy
        with internal_stage("the import of the traced program into the IR"):
            attrs = {"num_replicas": strategy.num_replicas_in_sync, **strategy._ir_module_attrs()}
            module = Module(self._name, attrs, funcs=[func])
            variables = session.variables_of(module)
            module.vars = session.decls(variables)
            if snapshots is not None:
                snapshots["traced"] = ir.print_module(module)
        module = default_pipeline(snapshots=snapshots, timings={} if timings is None else timings).run(module)
        return module, variables

    def _check_needs_static(self, sig: Signature, err: Exception) -> None:
        """A trace with Python numbers as values failed: when it traces with them as constants,
        the function needs them concrete, and the error says so (else `err` stands)."""
        static = Signature(sig.key, sig.treedef, [STATIC if k == SCALAR else k for k in sig.kinds],
                           sig.leaves, sig.batch, sig.inputs, sig.host, extents=sig.extents)
        try:
            self._trace(static)
        except Exception:  # noqa: BLE001 - the function fails either way: the original error stands
            return
        raise _traced_scalar_error(self._origin, sig, err) from err

    def _compile(self, sig: Signature) -> _Compiled:
        if self._cache:
            log.debug("strategax: retracing %s for a new input signature", self._name)
        self._detector.traced(self._origin, self._key(sig), sig.treedef, self._parts, self._cache_size, self)
        with gc_pause.paused():  # trace, import and passes allocate; nothing to collect mid-way
            if dump.dump_dir() is None:
                compiled = self._build(sig)
            else:  # STRATEGAX_DUMP_TO: also write every stage, the programs and a summary
                compiled = dump.compile_dumped(self, sig, lambda snaps, timings: self._build(sig, snaps, timings))
        compiled.last_call = self._detector.calls
        if len(self._cache) >= self._cache_size:  # full: the least recently used program goes
            del self._cache[min(self._cache, key=lambda k: self._cache[k].last_call)]
        self._whole[sig.key] = compiled.whole
        self._cache[self._key(sig)] = compiled
        return compiled

    def _key(self, sig: Signature) -> tuple:
        """The cache key of a call: its signature's, plus the element count of each stream its
        program iterates to the end (`for x in dataset`: one program per count)."""
        whole = self._whole.get(sig.key)
        if not whole:
            return sig.key
        host = host_streams(sig)
        return sig.key + (("n", tuple(host.count(s) for s in whole)),)

    def _build(self, sig: Signature, snapshots: dict | None = None, timings: dict | None = None) -> _Compiled:
        traced = self._trace(sig, snapshots, timings)
        with internal_stage("the lowering to JAX"):
            return _Compiled(traced, Executable(traced.module, self._strategy._mesh,
                                                constants=loop_constants(traced, sig)), sig, self._strategy)

    def _signature(self, args, kwargs) -> Signature:
        return signature(args, kwargs, self._strategy.num_replicas_in_sync, self._strategy._num_local_replicas,
                         self._reduce_retracing, self._origin)

    def _specialization(self, args, kwargs) -> tuple[_Compiled, Signature]:
        sig = self._signature(args, kwargs)
        return self._cache.get(self._key(sig)) or self._compile(sig), sig

    # --- inspection -----------------------------------------------------------------------
    def ir(self, *args, stage: str = "final", **kwargs) -> str:
        """The IR text for these arguments: "traced", a pass name, or "final" (default)."""
        sig = self._signature(args, kwargs)
        if stage == "final":
            return ir.print_module(self._specialization(args, kwargs)[0].module)
        snapshots: dict[str, str] = {}
        self._trace(sig, snapshots)
        if stage not in snapshots:
            raise DistributionValueError(f"unknown stage {stage!r}",
                                         f"use one of: {', '.join(list(snapshots) + ['final'])}")
        return snapshots[stage]

    def _lowering_args(self, args, kwargs) -> tuple[_Compiled, list]:
        compiled, sig = self._specialization(args, kwargs)
        if compiled.inputs is not None:  # stand-ins: lowering takes no batch from the iterators
            sig.inputs = compiled.inputs.abstract(compiled.in_layouts[len(compiled.dynamic):])
        return compiled, compiled.global_args(sig)

    def lowered(self, *args, **kwargs):
        compiled, global_args = self._lowering_args(args, kwargs)
        return compiled.executable.lower(*global_args)

    def export(self, *args, platforms: Sequence[str] = ("tpu", "cuda"), **kwargs):
        """The program for these arguments lowered for `platforms` without their hardware: a
        serializable `jax.export.Exported` (`.serialize()`, `.mlir_module()`) over as many devices
        as the strategy's mesh, holding exactly the IR's collectives."""
        platforms = check_platforms(platforms)
        compiled, global_args = self._lowering_args(args, kwargs)
        return compiled.executable.export(global_args, platforms)

    def stablehlo(self, *args, **kwargs) -> str:
        """The StableHLO text handed to XLA (before XLA's own optimisations)."""
        return self.lowered(*args, **kwargs).as_text()

    def hlo(self, *args, **kwargs) -> str:
        """The optimised HLO text XLA compiled (what actually runs)."""
        text = self.lowered(*args, **kwargs).compile().as_text()
        if text is None:  # JAX: "unavailable, e.g. based on backend, compiler, or runtime"
            raise DistributionRuntimeError("this backend keeps no HLO text of the compiled program",
                                           "read the program before XLA's optimisations: f.stablehlo(...)")
        return text

    def stats(self, *args, **kwargs) -> StepStats:
        """Collectives per step (count, bytes moved per replica, each one's reason and line) and
        `.memory`, bytes per device from XLA's analysis of the compiled program (on first use)."""
        collectives = collective_stats(self._specialization(args, kwargs)[0].module)
        return StepStats(collectives.num_replicas, collectives.collectives,
                         memory_of=lambda: self._memory(args, kwargs))

    def report(self, *args, path: str | os.PathLike | None = None, **kwargs):
        """One self-contained HTML page about the program for these arguments: the IR coloured by
        locality (regions folded), the collectives with their bytes, reasons, lines and the pass
        that inserted each, the IR after each pass, compile times, memory and the dataflow graph.
        Written to `path` (which is returned) when given, else returned as text."""
        page = render_report(build_report(self, args, kwargs))
        if path is None:
            return page
        Path(path).write_text(page, encoding="utf-8")
        return Path(path)

    def _memory(self, args, kwargs) -> MemoryStats:
        compiled, global_args = self._lowering_args(args, kwargs)
        if compiled.memory is None:
            lowered = compiled.executable.lower(*global_args)
            compiled.memory = memory = memory_stats(lowered.compile().memory_analysis(),
                                                    compiled.executable.in_layouts, compiled.variables)
            return memory
        return compiled.memory

    def __repr__(self) -> str:
        return f"<strategax function {self._name} ({len(self._cache)} compiled)>"
