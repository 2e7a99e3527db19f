"""The cached call's shortcut: JAX's C++ dispatch with no per-call signature work.

After a call compiles (or finds) a specialization, the function remembers, for the argument
positions of that call, what each flattened leaf must be to reuse it: a `jax.Array` of the same
type, shape and dtype; a distributed value whose global array was laid out by a layout object
already checked against the program's (outputs of the last call are the next call's inputs, so
after the first call this is one dict lookup); or the very same object (variables and static
values, by identity). A call that passes these checks goes straight to the `jax.jit` function;
any other call (new shapes, fresh per-replica components, a Python scalar that is not the same
object, keyword arguments, iterators, a multi-worker strategy) takes the full path, which builds
the cache key, so the shortcut can only skip work, never pick a different program.
"""
from __future__ import annotations

import jax
import numpy as np

from ..backends.inflight import throttle
from .distributed_values import Mirrored, PerReplica, PerReplicaBatch
from .keys import is_key
from .kinds import KeyOutput, LocalOutput, Output, OutputEntry, StaticOutput, TakenOutput
from .signature import ARRAY, MIRRORED, PER_EXAMPLE, PER_REPLICA, SCALAR, STATIC, Signature

MISS = object()  # the call does not fit: take the full path
MAX_BUILDS = 4  # shortcuts built per specialization: a call that never fits stops paying for it
_MAX_LAYOUTS = 64  # layout objects remembered per position
_ARRAY, _DIST, _SAME, _KEY, _SCALAR = range(5)
_flatten, _unflatten = jax.tree_util.tree_flatten, jax.tree_util.tree_unflatten


class FastCall:
    """`fast.call(args)`: what `compiled` returns for positional `args`, or MISS. `call` is
    Python generated for this program's arguments and outputs (`fast.source` shows it): a
    loop over generic checks cost a trivial call 3-4 us more than the same checks written
    out, measured against `jax.jit`'s own dispatch (docs/performance.md, issue 18)."""

    __slots__ = ("compiled", "call", "source")

    def __init__(self, compiled, treedef, checks: list, batch_at: int | None, detector):
        self.compiled = compiled
        self.source, env = _generate(compiled, treedef, checks, batch_at, detector)
        exec(compile(self.source, "<strategax fast call>", "exec"), env)
        self.call = env["call"]

    @classmethod
    def build(cls, compiled, sig: Signature, args: tuple, detector) -> "FastCall | None":
        """The shortcut for calls like this one (`sig` its signature, the call already run so its
        distributed values hold their global arrays), or None when such calls cannot take it;
        a call it serves counts in `detector` (retracing.Detector) and marks `compiled` used."""
        if compiled.inputs is not None or not compiled.strategy._executes_directly:
            return None  # iterators take batches per call; a multi-worker run is watched
        if compiled.gaps:
            return None  # each call's batch is checked: a partial one raises
        leaves, treedef = _flatten(args)
        if len(leaves) + (sig.batch is not None) != len(sig.leaves) \
                or any(a is not b for a, b in zip(leaves, sig.leaves)):
            return None  # distributed values regrouped from pytrees, keyword arguments
        if any(isinstance(entry, (TakenOutput, LocalOutput)) for entry in compiled.out_plan):
            return None  # rows of a taken batch, or of one replica: cut per call
        if any(compiled.is_cut(entry) for entry in compiled.out_plan):
            return None  # cut to real extents read from the call's counts (`_Compiled._cut`)
        layouts = dict(zip(compiled.dynamic, compiled.in_layouts))
        checks, batch_at = [], None
        for i, (x, kind) in enumerate(zip(leaves, sig.kinds)):
            if kind == STATIC:
                checks.append((_SAME, x, None))
            elif kind == SCALAR:  # a Python number traced as a value (reduce_retracing)
                checks.append((_SCALAR, type(x), layouts[i].type.dtype))
            elif kind == ARRAY:
                if not isinstance(x, jax.Array):
                    return None
                checks.append((_KEY if is_key(x) else _ARRAY, type(x), (x.shape, x.dtype)))
            elif kind in (PER_REPLICA, MIRRORED):
                layout, g = layouts[i], x.held_global
                if layout.logical_axes is not None or g is None or g[1].mesh is not layout.mesh:
                    return None  # put or assembled per call
                if sig.batch is x:
                    batch_at = i
                want = (layout.mesh, layout.type.shape, layout.type.dtype, g[1].per_replica)
                checks.append((_DIST, type(x), (want, {})))
            else:
                return None
        if batch_at is None and (sig.batch is not None or any(e.kind is PER_EXAMPLE for e in compiled.out_plan)):
            return None  # per-example outputs are trimmed by the batch's row counts
        return cls(compiled, treedef, checks, batch_at, detector)


def _generate(compiled, treedef, checks: list, batch_at: int | None, detector) -> tuple[str, dict]:
    """The source of `call(args)` for these checks and the program's outputs, and the names it
    reads (the source holds only names and integers, never a user's value). Every check is an
    exact type or identity test, which only pytree leaves pass, so when each positional
    argument is one leaf the arguments need no flattening."""
    ex, strategy = compiled.executable, compiled.strategy
    env = {"MISS": MISS, "jitted": ex.jitted, "accept": _accept, "asarray": np.asarray,
           "key_data": jax.random.key_data, "wrap_key_data": jax.random.wrap_key_data, "throttle": throttle,
           "var_slots": compiled.var_slots, "flatten": _flatten, "unflatten": _unflatten,
           "treedef": treedef, "out_treedef": compiled.out_treedef,
           "PerReplica": PerReplica, "Mirrored": Mirrored, "Batch": PerReplicaBatch,
           "detector": detector, "compiled": compiled}
    lines = ["def call(args):"]
    if treedef == jax.tree_util.tree_structure((0,) * len(checks)):
        lines += [f"    if len(args) != {len(checks)}:", "        return MISS", "    leaves = args"]
    else:
        lines += ["    leaves, td = flatten(args)", "    if td != treedef:", "        return MISS"]
    inputs = []
    for i, (check, want, extra) in enumerate(checks):
        env[f"want{i}"], env[f"extra{i}"] = want, extra
        x = f"x{i}"
        lines.append(f"    {x} = leaves[{i}]")
        if check == _SAME:
            lines += [f"    if {x} is not want{i}:", "        return MISS"]
            continue
        lines += [f"    if type({x}) is not want{i}:", "        return MISS"]
        if check == _DIST:
            env[f"seen{i}"] = extra[1]
            lines += [f"    g{i} = {x}.held_global",
                      f"    if g{i} is None or (id(g{i}[1]) not in seen{i} and not accept(g{i}[1], extra{i})):",
                      "        return MISS"]
            inputs.append(f"g{i}[0]")
        elif check == _SCALAR:
            inputs.append(f"asarray({x}, extra{i})")
        else:  # an array, or a typed PRNG key whose key data the program takes
            lines += [f"    if {x}.shape != extra{i}[0] or {x}.dtype != extra{i}[1]:", "        return MISS"]
            inputs.append(f"key_data({x})" if check == _KEY else x)
    if batch_at is not None:  # hidden input: the batch's real row counts
        env["batch_mesh"] = checks[batch_at][2][0][0]
        lines += [f"    counts = x{batch_at}.count_value.held_global",
                  "    if counts is None or counts[1].mesh is not batch_mesh:", "        return MISS"]
        inputs.append("counts[0]")
    if compiled.num_vars:
        inputs.append("*[store.argument(layout) for store, layout in var_slots]")
    lines.append(f"    outs = jitted({', '.join(inputs)})")
    lines += ["    detector.calls += 1", "    compiled.last_call = detector.calls"]  # as the full path counts
    if ex.marker is not None:
        lines.append(f"    throttle(outs[{ex.marker}])")
    if compiled.num_vars:
        lines += [f"    for (store, _), array in zip(var_slots, outs[{len(ex.out_layouts) - compiled.num_vars}:]):",
                  "        store.set(array)"]
    one = strategy.num_replicas_in_sync == 1
    results = [_output(i, entry, ex.out_layouts, env, batch_at, one)
               for i, entry in enumerate(compiled.out_plan)]
    lines.append(f"    return {_rebuild(compiled.out_treedef, results, env)}")
    return "\n".join(lines) + "\n", env


def _rebuild(treedef, results: list, env: dict) -> str:
    """The expression that builds the output pytree from the leaves' expressions: tuples, lists
    and dicts written out (as `tree_unflatten` builds them, dict keys in its order), any
    other pytree through `unflatten`."""
    literal = _literal(treedef, iter(results), env)
    return literal if literal is not None else f"unflatten(out_treedef, [{', '.join(results)}])"


def _literal(treedef, results, env: dict) -> str | None:
    data = treedef.node_data()
    if data is None:  # a leaf
        return next(results)
    node_type, keys = data
    if node_type is type(None):
        return "None"
    maybe = [_literal(child, results, env) for child in treedef.children()]
    parts = [p for p in maybe if p is not None]
    if len(parts) != len(maybe):
        return None
    if node_type is tuple:
        return f"({', '.join(parts)}{',' if len(parts) == 1 else ''})"
    if node_type is list:
        return f"[{', '.join(parts)}]"
    if node_type is dict:
        name = f"keys{len(env)}"
        env[name] = tuple(keys)
        return "{" + ", ".join(f"{name}[{k}]: {p}" for k, p in enumerate(parts)) + "}"
    return None  # a namedtuple, an OrderedDict, a registered class: JAX builds it


def _accept(layout, extra: tuple) -> bool:
    """Whether a global array laid out by `layout` is what this position was compiled for; if
    so remember the layout object (kept alive, so its id stays its own)."""
    (mesh, shape, dtype, per_replica), seen = extra
    if layout.mesh is not mesh or layout.type.shape != shape or layout.type.dtype != dtype \
            or layout.per_replica != per_replica or layout.logical_axes is not None:
        return False
    if len(seen) >= _MAX_LAYOUTS:
        seen.clear()
    seen[id(layout)] = layout
    return True


def _output(i: int, entry: OutputEntry, out_layouts, env: dict, batch_at: int | None, one: bool) -> str:
    """The expression that makes output leaf `i` from the program's outputs `outs` (as
    `_Compiled.__call__` does); the values it reads go into `env`. With one replica
    TensorFlow hands back plain values: an output is the program's array as it is, but for
    per-example rows, trimmed to the batch's real ones."""
    if isinstance(entry, StaticOutput):
        env[f"static{i}"] = entry.value
        return f"static{i}"
    if isinstance(entry, KeyOutput):
        env[f"impl{i}"] = entry.impl
        return f"wrap_key_data(outs[{entry.index}], impl=impl{i})"
    assert isinstance(entry, Output), "taken and local rows take the full path (FastCall.build)"
    kind, index = entry.kind, entry.index
    layout = out_layouts[index]
    env[f"layout{i}"] = layout
    if layout.per_replica and kind == PER_EXAMPLE:
        batch = f"Batch.from_global_batch(outs[{index}], layout{i}, x{batch_at}.real_counts, x{batch_at}.count_value)"
        return f"{batch}.values[0]" if one else batch
    if one:
        return f"outs[{index}]"
    if layout.per_replica:
        return f"PerReplica.from_global(outs[{index}], layout{i})"
    if kind in (PER_REPLICA, MIRRORED, PER_EXAMPLE):
        return f"Mirrored.from_global(outs[{index}], layout{i})"
    return f"outs[{index}]"
