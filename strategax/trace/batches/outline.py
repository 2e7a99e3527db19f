"""One on-device loop for an `sx.range` loop, and program inputs for `next(iterator)`.

`jax.make_jaxpr` of a strategy function leaves an `sx.range` loop as its first two traced
iterations between `sx.loop_mark` equations (`loops.py`), and each `next(iterator)` as an
`sx.take` equation (`takes.py`). `reroll` re-traces the jaxpr equation by equation:

- the two iterations must be the same computation (same primitives and parameters, nested
  jaxprs compared up to renaming); where the second reads a value the first computed, that
  value is loop-carried, starting from what the first iteration read in its place (Python's
  `x = f(x)`); values of the last iteration used after the loop are carried out of it. The
  second iteration becomes the body of one `lax.while_loop` over a step counter, so the
  program holds one copy of the step, not `n`;
- a take outside a loop becomes the inputs of one element; a take in a loop body becomes
  its element's inputs stacked over the `n` steps (each an input of `[n, ...]`, stacked when
  the call takes the batches: `stacking.py`) and indexed by the step counter, plus the loop's
  step count (an input: fewer when the iterator runs out), which ends the loop.

A `for x in dataset` loop (`takes.whole_loop`) that Python left before its end (`break`)
ran its steps as plain steps: its markers are dropped and its takes are single takes.
Whatever else cannot be a loop raises with the user's line: a body that traces differently
in its two iterations (Python state changing per step), a value kept from an earlier
iteration (a Python list of per-step results), `break` out of an `sx.range` loop, nested
loops, a traced trip count for a body that takes batches, a take or loop inside a JAX
transformation.
"""
from __future__ import annotations

import builtins
import math
from dataclasses import dataclass
from typing import AbstractSet, Any, Callable, Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import core as jax_core
from jax import lax
from jax._src import source_info_util
from jax.extend import core as jex

from ...errors import DistributionTypeError, DistributionValueError
from ...ir import TensorType
from ..importer import location_of
from .loops import BEGIN, END, NEXT, loop_mark_p
from .takes import InputPlan, Loop, Site, TraceInputs, take_p

INDEX = "index"  # the position of the loop index among an iteration's values
_STATE_FIX = ("keep state that changes from step to step in JAX values (they become loop carries) "
              "or in variables; Python values (ints, lists) are fixed when the loop is traced")


def _kind(eqn) -> str | None:
    if eqn.primitive is loop_mark_p:
        return eqn.params["kind"]
    return "take" if eqn.primitive is take_p else None


def _where(eqn) -> tuple[str, int]:
    loc = location_of(eqn)
    return (loc.file, loc.line) if loc is not None else ("<unknown>", 0)


def _at(eqn) -> str:
    return "%s:%d" % _where(eqn)


def _bind(eqn, invals: Sequence) -> list:
    """Re-bind one equation with its original source location (so IR ops keep the user's line)."""
    params = eqn.primitive.get_bind_params(eqn.params)
    with source_info_util.user_context(eqn.source_info.traceback, name_stack=eqn.source_info.name_stack), \
            eqn.ctx.manager:
        out = eqn.primitive.bind(*invals, **params)
    return list(out) if eqn.primitive.multiple_results else [out]


# --- comparing the two traced iterations ----------------------------------------------------
def _same_value(a, b) -> bool:
    if a is b:
        return True
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True  # nan (a gather's fill value)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) or isinstance(a, jax.Array):
        a, b = np.asarray(a), np.asarray(b)
        return a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(a, b, equal_nan=True))
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - incomparable: treat as different
        return a is b


def _same_param(a, b) -> bool:
    if a is b:
        return True
    if isinstance(a, (jex.ClosedJaxpr, jex.Jaxpr)) or isinstance(b, (jex.ClosedJaxpr, jex.Jaxpr)):
        return type(a) is type(b) and _same_jaxpr(a, b)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same_param(x, y) for x, y in zip(a, b))
    if _is_function(a) and _is_function(b):
        return True  # derived rules (custom_jvp's jvp, custom_vjp's bwd) of a compared jaxpr
    return _same_value(a, b)


def _is_function(x) -> bool:
    """A Python function or JAX's wrapped one (lu.WrappedFun has `call_wrapped`)."""
    return (callable(x) and not isinstance(x, type)) or hasattr(x, "call_wrapped")


def _same_eqn_params(e1, e2) -> bool:
    return (e1.primitive is e2.primitive and e1.params.keys() == e2.params.keys()
            and all(_same_param(e1.params[k], e2.params[k]) for k in e1.params))


def _same_jaxpr(a, b) -> bool:
    """Equal up to the renaming of variables (consts compared by value)."""
    if isinstance(a, jex.ClosedJaxpr):
        if len(a.consts) != len(b.consts) or not all(map(_same_value, a.consts, b.consts)):
            return False
        a, b = a.jaxpr, b.jaxpr
    if (len(a.eqns) != len(b.eqns) or len(a.invars) != len(b.invars)
            or len(a.constvars) != len(b.constvars)):
        return False
    names = dict(zip(a.constvars + a.invars, b.constvars + b.invars))

    def same_atom(x, y) -> bool:
        if isinstance(x, jex.Literal) or isinstance(y, jex.Literal):
            return isinstance(x, jex.Literal) and isinstance(y, jex.Literal) and _same_value(x.val, y.val)
        return names.get(x) is y and x.aval == y.aval

    for e1, e2 in zip(a.eqns, b.eqns):
        if not _same_eqn_params(e1, e2) or len(e1.invars) != len(e2.invars) \
                or not all(map(same_atom, e1.invars, e2.invars)):
            return False
        names.update(zip(e1.outvars, e2.outvars))
    return all(map(same_atom, a.outvars, b.outvars))


# --- the loops of the top-level equations ---------------------------------------------------
@dataclass
class _Span:
    begin: int
    next: int
    end: int


@dataclass
class _LoopBody:
    """The second iteration's equations and what the loop carries."""

    span: _Span
    body: list
    first: dict  # var of the first iteration -> its position ((eqn, result) or INDEX)
    second: dict  # var of the second iteration -> its position
    carries: list  # positions carried from step to step or out of the loop, in order
    inits: dict  # position -> atom read before the loop (absent: zeros, carried out only)
    takes: list  # the body's take equations


def _left_early(eqns, whole_loops: set) -> set:
    """The `for x in dataset` loops that Python left before their end (a `break`, or `next()`
    on an explicit `iter(dataset)`): the steps it ran are plain steps, their markers dropped."""
    ended = {e.params["loop"] for e in eqns if _kind(e) == END}
    return {e.params["loop"] for e in eqns if _kind(e) == BEGIN and e.params["loop"] in whole_loops
            and e.params["loop"] not in ended}


def _spans(eqns, unrolled: AbstractSet[int] = frozenset()) -> list[int | _Span]:
    """Top-level equation indices, with each `sx.range` loop as one _Span (the markers of the
    `unrolled` loops stay plain indices)."""
    out: list[int | _Span] = []
    i = 0
    while i < len(eqns):
        if _kind(eqns[i]) != BEGIN or eqns[i].params["loop"] in unrolled:
            out.append(i)
            i += 1
            continue
        loop, marks = eqns[i].params["loop"], {}
        for j in builtins.range(i + 1, len(eqns)):
            kind = _kind(eqns[j])
            if kind in (BEGIN, NEXT) and eqns[j].params["loop"] in unrolled:
                continue
            if kind in (BEGIN, NEXT, END) and eqns[j].params["loop"] != loop:
                raise DistributionTypeError(
                    f"an sx.range loop at {_at(eqns[j])} runs inside the sx.range loop at "
                    f"{_at(eqns[i])} (or that loop's body ended early)",
                    "nest a lax.fori_loop or Python loop inside instead, or merge the loops",
                    location=_where(eqns[j]))
            if kind in (NEXT, END):
                marks[kind] = j
                if kind == END:
                    break
        if END not in marks:
            raise DistributionTypeError(
                f"the body of the sx.range loop at {_at(eqns[i])} ended early (break, return or an "
                "exception): strategax traces the body as one step of an on-device loop",
                "run every step to its end (compute a mask with jnp.where instead of breaking)",
                location=_where(eqns[i]))
        out.append(_Span(i, marks[NEXT], marks[END]))
        i = marks[END] + 1
    return out


def _analyse(eqns, span: _Span, later: Sequence, outer_same: Callable) -> _LoopBody:
    first_it, second_it = eqns[span.begin + 1:span.next], eqns[span.next + 1:span.end]
    for e1, e2 in zip(first_it, second_it):
        if not _same_eqn_params(e1, e2) or len(e1.invars) != len(e2.invars):
            raise DistributionValueError(
                f"the body of the sx.range loop at {_at(eqns[span.begin])} traces differently in its "
                f"first two steps ({e1.primitive} at {_at(e1)} vs {e2.primitive} at {_at(e2)})",
                _STATE_FIX, location=_where(e2))
    if len(first_it) != len(second_it):
        raise DistributionValueError(
            f"the body of the sx.range loop at {_at(eqns[span.begin])} traces differently in its "
            f"first two steps ({len(first_it)} vs {len(second_it)} operations)", _STATE_FIX,
            location=_where(eqns[span.begin]))
    first: dict = {eqns[span.begin].outvars[0]: INDEX}
    second: dict = {eqns[span.next].outvars[0]: INDEX}
    for j, (e1, e2) in enumerate(zip(first_it, second_it)):
        for k, (v1, v2) in enumerate(zip(e1.outvars, e2.outvars)):
            first[v1], second[v2] = (j, k), (j, k)
    inits: dict = {}

    def mismatch(eqn) -> DistributionValueError:
        return DistributionValueError(
            f"the body of the sx.range loop at {_at(eqns[span.begin])} reads different values in its "
            f"first two steps at {_at(eqn)}, and they are not one value carried from step to step "
            "(e.g. `a, b = b, a` swaps without computing)", _STATE_FIX, location=_where(eqn))

    for e1, e2 in zip(first_it, second_it):
        for a, b in zip(e1.invars, e2.invars):
            a_var = not isinstance(a, jex.Literal)
            if isinstance(b, jex.Literal):
                if a_var or not _same_value(a.val, b.val):
                    raise mismatch(e2)
            elif b in second:  # this step's own value: the first step must read its counterpart
                if not a_var or first.get(a) != second[b]:
                    raise mismatch(e2)
            elif b in first:  # a value of the step before: carried, starting from what step 1 read
                if ((a_var and (a in first or a in second))
                        or (first[b] in inits and not outer_same(inits[first[b]], a))):
                    raise mismatch(e2)
                inits[first[b]] = a
            elif not outer_same(a, b):
                raise mismatch(e2)
    carries = list(inits)
    for eqn, v in later:
        if isinstance(v, jex.Literal):
            continue
        if v in first:
            raise DistributionValueError(
                f"a value computed in an earlier step of the sx.range loop at {_at(eqns[span.begin])} "
                f"is used after the loop{f' at {_at(eqn)}' if eqn is not None else ' (returned)'} (e.g. kept in a "
                "Python list): after the loop only the last step's values exist",
                "use the last step's values after the loop, or accumulate in a JAX value or a "
                "variable", location=_where(eqn if eqn is not None else eqns[span.begin]))
        if v in second and second[v] not in carries:
            carries.append(second[v])
    takes = [e for e in second_it if _kind(e) == "take"]
    return _LoopBody(span, second_it, first, second, carries, inits, takes)


def _later_uses(eqns, end: int, outvars) -> list:
    """(equation or None, atom) for every operand after equation `end` and every output."""
    return [(e, v) for e in eqns[end + 1:] for v in e.invars] + [(None, v) for v in outvars]


def _check_not_nested(jaxpr, inside: str | None = None) -> None:
    """No `sx.range` marker or take below the top level (inside jit, cond, grad, ...)."""
    for eqn in jaxpr.eqns:
        if inside is not None and _kind(eqn) is not None:
            what = "next(iterator)" if _kind(eqn) == "take" else "an sx.range loop"
            raise DistributionTypeError(
                f"{what} inside {inside}: batches and sx.range loops belong to the strategy.function "
                "itself", "call next(iterator) and loop with sx.range in the function's own code "
                "(strategy.run inside is fine)", location=_where(eqn))
        for sub in jex.jaxprs_in_params(eqn.params):
            _check_not_nested(sub, inside or f"a `{eqn.primitive}` (a JAX transformation or control flow)")


# --- re-rolling: sx.range loops as while loops, takes as inputs ----------------------------
def reroll(closed, inputs: TraceInputs) -> tuple[Any, list[TensorType], InputPlan | None]:
    """`closed` with every `sx.range` loop made one while loop and every take an input; also the
    types of the new inputs (after the old ones) and the plan that feeds them. Unchanged
    (no plan) when the function has neither."""
    jaxpr = closed.jaxpr
    _check_not_nested(jaxpr)
    if not any(_kind(e) is not None for e in jaxpr.eqns):
        return closed, [], None
    consts = dict(zip(jaxpr.constvars, closed.consts))

    def outer_same(a, b) -> bool:  # two reads of values made before the loop: the same value?
        if isinstance(a, jex.Literal) or isinstance(b, jex.Literal):
            return isinstance(a, jex.Literal) and isinstance(b, jex.Literal) and _same_value(a.val, b.val)
        return a is b or (a in consts and b in consts and _same_value(consts[a], consts[b]))

    items: list[int | _LoopBody] = []
    plan = InputPlan()
    for item in _spans(jaxpr.eqns, _left_early(jaxpr.eqns, inputs.whole_loops)):
        if isinstance(item, int):
            if _kind(jaxpr.eqns[item]) == "take":
                plan.segments.append(_site(jaxpr.eqns[item], inputs))
            items.append(item)
            continue
        loop = _analyse(jaxpr.eqns, item, _later_uses(jaxpr.eqns, item.end, jaxpr.outvars), outer_same)
        if loop.takes:
            begin = jaxpr.eqns[item.begin]
            steps = _static_trip_count(begin)
            if steps is None:
                raise DistributionTypeError(
                    f"the sx.range loop at {_at(begin)} takes batches from an iterator, so its "
                    "number of steps must be known when it is traced", "pass the stop of "
                    "sx.range as a Python int", location=_where(begin))
            plan.segments.append(Loop(steps, [_site(e, inputs) for e in loop.takes], _at(begin)))
        items.append(loop)
    new_types = plan.input_types
    fn = _evaluator(closed, items, plan)
    avals = [*closed.in_avals, *(jax_core.ShapedArray(t.shape, t.dtype) for t in new_types)]
    return jax.make_jaxpr(fn)(*avals), new_types, plan


def _site(eqn, inputs: TraceInputs) -> Site:
    spec = inputs.spec(eqn.params["stream"])
    assert spec is not None, "take() raised OutOfRangeError for an exhausted stream"
    return Site(eqn.params["stream"], spec, _at(eqn))


def _static_trip_count(begin) -> int | None:
    bounds = begin.invars
    if not all(isinstance(b, jex.Literal) for b in bounds):
        return None
    return len(builtins.range(*(int(b.val) for b in bounds)))


class _Env(dict):
    def read(self, atom):
        return atom.val if isinstance(atom, jex.Literal) else self[atom]


def _evaluator(closed, items: list, plan: InputPlan) -> Callable:
    jaxpr = closed.jaxpr
    nin = len(jaxpr.invars)
    loops = iter(seg for seg in plan.segments if isinstance(seg, Loop))

    def fn(*args):
        env = _Env(zip(jaxpr.constvars, closed.consts))
        env.update(zip(jaxpr.invars, args[:nin]))
        extra: Iterator = iter(args[nin:])
        for item in items:
            if isinstance(item, int):
                eqn = jaxpr.eqns[item]
                kind = _kind(eqn)
                if kind == "take":
                    outs = [next(extra) for _ in eqn.outvars]
                elif kind is not None:  # a marker of a loop left early: its steps run as they are
                    outs = [jnp.int32(0) for _ in eqn.outvars]
                else:
                    outs = _bind(eqn, [env.read(v) for v in eqn.invars])
                env.update(zip(eqn.outvars, outs))
            else:
                _run_loop(jaxpr.eqns, item, env, extra, next(loops) if item.takes else None)
        return [env.read(v) for v in jaxpr.outvars]

    return fn


def _run_loop(eqns, loop: _LoopBody, env: _Env, extra: Iterator, plan: Loop | None) -> None:
    """Bind one `lax.while_loop` for `loop` (its inputs taken from `extra`); put the values of
    its last step that are used after it into `env`."""
    begin = eqns[loop.span.begin]
    start, stop, step = (env.read(v) for v in begin.invars)
    start, step = int(start), int(step)
    with source_info_util.user_context(begin.source_info.traceback):
        stacked = []  # per take of the body: its inputs, stacked over the steps (as they come in)
        if plan is not None:
            for site in plan.sites:
                stacked.append([next(extra) for _ in site.spec.input_types])
            trip = next(extra)
        else:
            count = _static_trip_count(begin)
            trip = (count if count is not None
                    else jnp.maximum(0, (stop - start + step - (1 if step > 0 else -1)) // step))
        inits = [env.read(loop.inits[p]) if p in loop.inits else jnp.zeros(_aval(loop, p).shape, _aval(loop, p).dtype)
                 for p in loop.carries]
        index_var = eqns[loop.span.next].outvars[0]

        def body(state):
            t, carried = state[0], dict(zip(loop.carries, state[1:]))
            local = _Env(env)
            local[index_var] = start + t * step
            produced: dict = {INDEX: local[index_var]}  # by position: a carry's next value may have no name
            takes = iter(stacked)
            for j, eqn in enumerate(loop.body):
                ins = [v.val if isinstance(v, jex.Literal) else
                       carried[loop.first[v]] if v in loop.first else local[v] for v in eqn.invars]
                if _kind(eqn) == "take":
                    with source_info_util.user_context(eqn.source_info.traceback):
                        outs = [_step_slice(s, t) for s in next(takes)]
                else:
                    outs = _bind(eqn, ins)
                local.update(zip(eqn.outvars, outs))
                produced.update(((j, k), x) for k, x in enumerate(outs))
            return (t + 1, *(produced[p] for p in loop.carries))

        final = lax.while_loop(lambda s: s[0] < trip, body, (jnp.int32(0), *inits))
    last = dict(zip(loop.carries, final[1:]))
    for v, p in loop.second.items():
        if p in last:
            env[v] = last[p]


def _step_slice(stacked, t):
    """`stacked[t]` (t is a step counter, never negative: no index wrapping)."""
    zeros = (jnp.int32(0),) * (stacked.ndim - 1)
    piece = lax.dynamic_slice(stacked, (t, *zeros), (1, *stacked.shape[1:]), allow_negative_indices=False)
    return lax.squeeze(piece, (0,))


def _aval(loop: _LoopBody, p):
    if p == INDEX:
        return jax_core.ShapedArray((), jnp.int32)
    return loop.body[p[0]].outvars[p[1]].aval
