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
from .signature import ARRAY, KEY, MIRRORED, PER_EXAMPLE, PER_REPLICA, SCALAR, STATIC, Signature

MISS = object()  # the call does not fit: take the full path
MAX_BUILDS = 4  # shortcuts built per specialization: a call that never fits stops paying for it
_MAX_LAYOUTS = 64  # layout objects remembered per position
_ARRAY, _DIST, _SAME, _KEY, _SCALAR = range(5)
_OUT_ARRAY, _OUT_STATIC, _OUT_WRAP, _OUT_BATCH, _OUT_KEY = range(5)
_flatten, _unflatten = jax.tree_util.tree_flatten, jax.tree_util.tree_unflatten


class FastCall:
    """`fast(args)`: what `compiled` returns for positional `args`, or MISS."""

    __slots__ = ("compiled", "treedef", "checks", "batch_at", "jitted", "marker", "var_slots", "num_vars",
                 "outputs", "out_treedef", "out_is_leaf", "finalize")

    def __init__(self, compiled, treedef, checks: list, batch_at: int | None):
        ex, strategy = compiled.executable, compiled.strategy
        self.compiled, self.treedef, self.checks, self.batch_at = compiled, treedef, checks, batch_at
        self.jitted, self.marker = ex.jitted, ex.marker
        self.var_slots, self.num_vars = compiled.var_slots, compiled.num_vars
        self.outputs = [_output(kind, index, ex.out_layouts) for kind, index in compiled.out_plan]
        self.out_treedef = compiled.out_treedef
        self.out_is_leaf = jax.tree_util.treedef_is_leaf(compiled.out_treedef) and len(self.outputs) == 1
        # one replica: TensorFlow hands back plain values (Strategy._finalize_outputs)
        self.finalize = strategy._finalize_outputs if strategy.num_replicas_in_sync == 1 else None

    @classmethod
    def build(cls, compiled, sig: Signature, args: tuple) -> "FastCall | None":
        """The shortcut for calls like this one (`sig` its signature, the call already run so its
        distributed values hold their global arrays), or None when such calls cannot take it."""
        if compiled.inputs is not None or not getattr(compiled.strategy._execute, "_runs_directly", False):
            return None  # iterators take batches per call; a multi-worker run is watched
        leaves, treedef = _flatten(args)
        if len(leaves) + (sig.batch is not None) != len(sig.leaves) \
                or any(a is not b for a, b in zip(leaves, sig.leaves)):
            return None  # distributed values regrouped from pytrees, keyword arguments
        if any(kind not in _OUTPUT_KINDS for kind, _ in compiled.out_plan):
            return None
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
                layout, g = layouts[i], x._global
                if layout.logical_axes is not None or g is None or g[1].mesh is not layout.mesh:
                    return None  # put or assembled per call
                if sig.batch is x:
                    batch_at = i
                want = (layout.mesh, layout.type.shape, layout.type.dtype, g[1].per_replica)
                checks.append((_DIST, type(x), (want, {})))
            else:
                return None
        return cls(compiled, treedef, checks, batch_at)

    def __call__(self, args: tuple):
        leaves, treedef = _flatten(args)
        if treedef != self.treedef:
            return MISS
        arrays = []
        for x, (check, want, extra) in zip(leaves, self.checks):
            if check is _DIST:
                if type(x) is not want:
                    return MISS
                g = x._global
                if g is None or (id(g[1]) not in extra[1] and not _accept(g[1], extra)):
                    return MISS
                arrays.append(g[0])
            elif check is _ARRAY:
                if type(x) is not want or x.shape != extra[0] or x.dtype != extra[1]:
                    return MISS
                arrays.append(x)
            elif check is _SCALAR:
                if type(x) is not want:
                    return MISS
                arrays.append(np.asarray(x, extra))
            elif check is _KEY:  # a typed PRNG key: the program takes its key data
                if type(x) is not want or x.shape != extra[0] or x.dtype != extra[1]:
                    return MISS
                arrays.append(jax.random.key_data(x))
            elif x is not want:
                return MISS
        batch = None
        if self.batch_at is not None:  # hidden input: the batch's real row counts
            batch = leaves[self.batch_at]
            counts = batch._count_value._global
            if counts is None or counts[1].mesh is not self.checks[self.batch_at][2][0][0]:
                return MISS
            arrays.append(counts[0])
        if self.num_vars:
            for store, layout in self.var_slots:
                arrays.append(store.argument(layout))
        outs = self.jitted(*arrays)
        if self.marker is not None:
            throttle(outs[self.marker])
        if self.num_vars:
            for (store, _), array in zip(self.var_slots, outs[len(outs) - self.num_vars:]):
                store.set(array)
        result = []
        for code, index, layout, cls in self.outputs:
            if code is _OUT_WRAP:
                result.append(cls._from_global(outs[index], layout))
            elif code is _OUT_ARRAY:
                result.append(outs[index])
            elif code is _OUT_STATIC:
                result.append(index)
            elif code is _OUT_KEY:
                result.append(jax.random.wrap_key_data(outs[index[0]], impl=index[1]))
            else:
                result.append(PerReplicaBatch._from_global_batch(
                    outs[index], layout, batch._counts, batch._count_value))
        result = result[0] if self.out_is_leaf else _unflatten(self.out_treedef, result)
        return result if self.finalize is None else self.finalize(result)


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


_OUTPUT_KINDS = (ARRAY, STATIC, KEY, PER_REPLICA, MIRRORED, PER_EXAMPLE)


def _output(kind: str, index, out_layouts) -> tuple:
    """How one output leaf is made from the program's outputs (as `_Compiled.__call__` does)."""
    if kind == STATIC:
        return _OUT_STATIC, index, None, None
    if kind == KEY:
        return _OUT_KEY, index, None, None
    layout = out_layouts[index]
    if layout.per_replica:
        if kind == PER_EXAMPLE:
            return _OUT_BATCH, index, layout, None
        return _OUT_WRAP, index, layout, PerReplica
    if kind in (PER_REPLICA, MIRRORED, PER_EXAMPLE):
        return _OUT_WRAP, index, layout, Mirrored
    return _OUT_ARRAY, index, None, None
