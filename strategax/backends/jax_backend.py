"""Lower an IR module to one `jax.jit(shard_map(...))` program over the replica mesh.

An interpreter walks the module inside a function that JAX traces: each op applies its
lowering rule from `dialects.LOWERINGS` (generic ops re-bind their primitive). `check_vma=False`
keeps JAX from adding collectives of its own: the only communication is what the IR says.
"""
from __future__ import annotations

import contextlib
from typing import Mapping, Sequence

import jax
import numpy as np
from jax.sharding import Mesh

from ..dialects import LOWERINGS, generic_lowering
from ..dialects.logical import constrain_propagated
from ..errors import internal_error, is_named
from ..ir import Block, Locality, Module, TensorType, has_collective, lookup
from . import compile_cache, gc_pause
from .inflight import throttle
from .layout import AXIS, ReplicaLayout
from .metadata import op_metadata


class LoweringContext:
    """What lowering rules may ask for: the mesh axis, the replica count, running a region."""

    axis_name = AXIS

    def __init__(self, num_replicas: int, mesh: Mesh | None = None):
        self.num_replicas = num_replicas
        self.mesh = mesh  # the whole mesh: `replica` plus any logical-device axes
        self.vars: dict = {}  # variable symbol -> its current local value (see dialects.variables)
        # One replica of several logical devices: XLA drops the size-1 manual axis, so a
        # cross-replica collective would become a cross-partition one; it is the identity.
        self._collectives_are_identities = (num_replicas == 1 and mesh is not None
                                            and len(mesh.axis_names) > 1)

    def run_block(self, block: Block, args: Sequence) -> list:
        env = {id(a): x for a, x in zip(block.args, args)}
        for op in block.ops:
            rule = LOWERINGS.get(op.name, generic_lowering)
            if self._collectives_are_identities and _identity_on_one_replica(op):
                rule = _identity
            try:
                operands = [env[id(v)] for v in op.operands]
                outs = _uniform(op, operands)  # e.g. a full loop's row count: a constant, its masks fold
                if outs is None:
                    with op_metadata(op):  # XLA's metadata names the IR op and the user's line
                        outs = rule(op, operands, self)
                for r, x in zip(op.results, outs):
                    env[id(r)] = constrain_propagated(op, r, x, self)
            except Exception as e:  # a rule's KeyError, a JAX error from what it built: a bug
                if is_named(e):
                    raise
                raise internal_error(e, "the lowering to JAX", op) from e
        missing = [v for v in block.results if id(v) not in env]
        if missing:
            err = KeyError(missing[0].name)
            raise internal_error(err, "the lowering to JAX",
                                 detail=f"the block yields %{missing[0].name}, which no op defines") from err
        return [env[id(v)] for v in block.results]


# Ops whose result holds its first operand's one value when that operand is a constant of one
# value (whatever the other operands: a step's row count sliced from a loop's full counts).
_KEEPS_UNIFORM = frozenset({"jax.dynamic_slice", "jax.squeeze", "jax.reshape", "jax.broadcast_in_dim",
                            "jax.convert_element_type", "jax.copy", "jax.copy_p", "sx.rows"})


def _uniform(op, operands: Sequence) -> list | None:
    """`op`'s result as a NumPy constant when its first operand is an integer NumPy array of one
    value (`Executable`'s constants) and `op` keeps that value; None otherwise (its rule runs)."""
    if op.name not in _KEEPS_UNIFORM or not operands or len(op.results) != 1:
        return None
    x = operands[0]
    if type(x) is not np.ndarray or x.dtype.kind not in "biu" or x.size == 0 or not (x == x.flat[0]).all():
        return None
    t = op.results[0].type
    return [np.full(t.shape, x.flat[0]).astype(t.dtype)]


def _identity_on_one_replica(op) -> bool:
    """Whether `op` is a collective its declaration says is the identity on one replica (and whose
    results here have its operands' types)."""
    opdef = lookup(op.name)
    return (opdef is not None and opdef.identity_on_one_replica and len(op.operands) == len(op.results)
            and all(a.type.same_tensor(r.type) for a, r in zip(op.operands, op.results)))


def _identity(op, args, ctx) -> list:
    return list(args)


class Executable:
    """The compiled program for one module: call it with global arrays (see `layout`)."""

    def __init__(self, module: Module, mesh: Mesh, donate_argnums: Sequence[int] | None = None,
                 constants: Mapping[int, np.ndarray] | None = None):
        """Inputs are main's arguments then the module's variables; outputs are main's results
        then the variables' new values. Variable inputs are donated unless told otherwise.
        `constants` (argument index -> its per-replica value): arguments the program holds as
        constants (a loop's steps and row counts when a call has every step's batch, full: XLA
        then knows the loop's trip count and folds the row masks away); a call still passes
        them, and `dynamic()` is the program that reads them."""
        self.module, self.mesh = module, mesh
        self._donate_argnums, self.constants = donate_argnums, dict(constants or {})
        self._dynamic: Executable | None = None
        main = module.main
        nargs, var_types = len(main.body.args), [v.type for v in module.vars]
        self.in_layouts = [ReplicaLayout(mesh, t) for t in [a.type for a in main.body.args] + var_types]
        self.out_layouts = [ReplicaLayout(mesh, _result_type(r.type, mesh)) for r in main.body.results] + [
            ReplicaLayout(mesh, t) for t in var_types]
        # XLA:CPU deadlocks with many programs that communicate queued (backends/inflight.py):
        # the smallest output (a result before a variable) marks when a run has finished
        sizes = [(i >= len(main.body.results), int(np.prod(lay.global_shape)), i)
                 for i, lay in enumerate(self.out_layouts)]
        communicates = has_collective(main.body) or len(mesh.shape) > 1  # logical axes: XLA's own
        throttled = communicates and mesh.devices.size > 1 and mesh.devices.flat[0].platform == "cpu"
        self.marker = min(sizes)[2] if throttled and sizes else None
        if donate_argnums is None:
            donate_argnums = range(nargs, nargs + len(var_types))
        ctx = LoweringContext(mesh.shape[AXIS], mesh)
        in_layouts, out_layouts = self.in_layouts, self.out_layouts
        self._cache_first_run = compile_cache.configure() is not None  # its compilation goes to the cache
        self._first_run = True  # lowered and compiled by JAX: with the garbage collector paused

        constant_args = dict(self.constants)

        def body(*local):
            args = [x.reshape(()) if lay.stacked else x for x, lay in zip(local, in_layouts)]
            for i, value in constant_args.items():
                args[i] = value
            ctx.vars = {v.name: x for v, x in zip(module.vars, args[nargs:])}
            outs = ctx.run_block(main.body, args[:nargs]) + [ctx.vars[v.name] for v in module.vars]
            return tuple(x.reshape((1,)) if lay.stacked else x for x, lay in zip(outs, out_layouts))

        body.__name__ = body.__qualname__ = module.name  # XLA's module: jit_<name>, in profiles too

        mapped = jax.shard_map(body, mesh=mesh, in_specs=tuple(lay.spec for lay in in_layouts),
                               out_specs=tuple(lay.spec for lay in out_layouts), check_vma=False,
                               axis_names={AXIS})  # logical-device axes stay automatic
        self.jitted = jax.jit(mapped, in_shardings=tuple(lay.sharding for lay in in_layouts),
                              out_shardings=tuple(lay.sharding for lay in out_layouts),
                              donate_argnums=tuple(donate_argnums))

    def __call__(self, *global_args) -> tuple:
        if self._first_run:
            with gc_pause.paused(), compile_cache.writing() if self._cache_first_run else contextlib.nullcontext():
                outs = self.jitted(*global_args)
            self._first_run = self._cache_first_run = False
        else:
            outs = self.jitted(*global_args)
        if self.marker is not None:
            throttle(outs[self.marker])
        return outs

    def dynamic(self) -> "Executable":
        """The same program reading the arguments this one holds as constants (built on first use:
        a call whose loop runs fewer steps than it was traced for)."""
        if not self.constants:
            return self
        if self._dynamic is None:
            self._dynamic = Executable(self.module, self.mesh, self._donate_argnums)
        return self._dynamic

    def lower(self, *global_args):
        return self.jitted.lower(*global_args)

    def export(self, global_args: Sequence, platforms: Sequence[str]):
        """The program lowered for `platforms` (e.g. ("tpu", "cuda")) as a serializable
        `jax.export.Exported`; no device of those platforms is needed."""
        specs = [jax.ShapeDtypeStruct(np.shape(x), x.dtype, sharding=lay.sharding)
                 for x, lay in zip(global_args, self.in_layouts)]
        return jax.export.export(self.jitted, platforms=tuple(platforms))(*specs)


def _result_type(t: TensorType, mesh: Mesh) -> TensorType:
    """With one replica a per-replica scalar result comes back as the scalar, not stacked into a
    vector of one: the caller hands it to the user as it is (trace/fast_call.py)."""
    if mesh.shape[AXIS] == 1 and t.locality is Locality.PER_REPLICA and not t.shape:
        return t.with_locality(Locality.MIRRORED)
    return t


def make_mesh(devices: Sequence[jax.Device]) -> Mesh:  # pyright: ignore[reportInvalidTypeForm]  jaxlib ships no stub for Device
    """The 1-D mesh of the replicas, axis "replica"."""
    return Mesh(np.array(list(devices)), (AXIS,))
