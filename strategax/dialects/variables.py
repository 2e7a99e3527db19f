"""Variable ops: `sx.var_read`, `sx.var_assign`, `sx.var_assign_add`, `sx.var_assign_sub`, and
`sx.broadcast` (replica `source`'s value to every replica: ONLY_FIRST_REPLICA aggregation).

Variables are module-level symbols (`var @w : f32[4] mirrored {sync = "on_write", agg = "sum"}`);
each op names one with its `var` attribute. `ctx` says whether the op was traced in replica or
cross-replica context; `insert-collectives` reads it and sets `reduced = true` once it has
added the aggregation. While tracing, reads and updates are primitives with the variable
effect (so no JAX transformation drops or repeats them); lowered, a variable is an extra
input and output of the executable (donated, so an update is in place), and the rules below
keep its current value in `ctx.vars` (one value per replica in the reference interpreter).
"""
from __future__ import annotations

import re
import weakref
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import core as jax_core
from jax import lax
from jax.interpreters import ad, batching

from .. import _context
from ..errors import DistributionValueError
from ..ir import (READS_VARIABLE, VAR_ATTRS, WRITES_VARIABLE, Attr, Enum, Flag, Int, Locality,
                  OpDef, Operation, Str, SymbolRef, declare)
from .collectives import primitive
from .effects import VARIABLE
from .registry import LOWERINGS, REFERENCE

CONTEXTS = ("replica", "cross_replica")
SYNCS = ("on_write", "on_read")
AGGREGATIONS = ("none", "sum", "mean", "only_first_replica")
UPDATES = ("sx.var_assign", "sx.var_assign_add", "sx.var_assign_sub")
VARIABLE_OPS = ("sx.var_read",) + UPDATES


def variable_of(op: Operation) -> SymbolRef | None:
    """The variable symbol `op` reads or updates; None for an op that touches no variable."""
    ref = op.attrs.get("var") if op.name in VARIABLE_OPS else None
    return ref if isinstance(ref, SymbolRef) else None


# `slot_of` and `shards`: an optimizer slot held 1/`shards` per replica (sx.Optimizer(shard_state=True)),
# the name of the variable it serves; its type is one replica's piece.
VAR_ATTRS.update({"sync": Enum(*SYNCS), "agg": Enum(*AGGREGATIONS), "slot_of": Str(required=False),
                  "shards": Int(1, required=False)})
_OP_ATTRS = {"var": Attr("symbol"), "ctx": Enum(*CONTEXTS), "reduced": Flag(), "central": Flag()}

# --- symbols: every variable's name in IR modules, unique for the life of the process -------
_ISSUED: set[str] = set()  # never reused, even after a variable dies
_BY_SYMBOL: "weakref.WeakValueDictionary[str, Any]" = weakref.WeakValueDictionary()
_NEXT_SUFFIX: dict[str, int] = {}


def new_symbol(var) -> str:
    """A module symbol for `var`: a traced read or update names its variable by symbol, and JAX
    may reuse a traced jaxpr (jax.jit's cache) later, so symbols are never reused."""
    base = re.sub(r"[^A-Za-z0-9_.]", "_", var.name) or "v"
    name, k = base, _NEXT_SUFFIX.get(base, 0)
    while name in _ISSUED:
        k += 1
        name = f"{base}_{k}"
    _NEXT_SUFFIX[base] = k
    _ISSUED.add(name)
    _BY_SYMBOL[name] = var
    return name


def variable(symbol: str):
    """The live variable behind `symbol`."""
    var = _BY_SYMBOL.get(symbol)
    if var is None:
        raise RuntimeError(f"variable @{symbol} no longer exists")
    return var


# --- sx.var_read: the variable's current (local) value ---------------------------------------
def _read_locality(op, localities):
    return [Locality.PER_REPLICA if op.attrs["sync"] == "on_read" else Locality.MIRRORED]


declare(OpDef("sx.var_read", "Read a variable's local copy.", num_operands=0, num_results=1,
              attrs={**_OP_ATTRS, "sync": Enum(*SYNCS)}, locality=_read_locality,
              effects=frozenset({READS_VARIABLE})))
var_read_p = primitive("sx.var_read")


def _read_abstract(*, var, ctx, sync):
    v = variable(var.name)
    return jax_core.ShapedArray(v._ir_type().shape, v.dtype), {VARIABLE}


var_read_p.def_effectful_abstract_eval(_read_abstract)
LOWERINGS["sx.var_read"] = lambda op, args, ctx: [ctx.vars[op.attrs["var"].name]]
REFERENCE["sx.var_read"] = lambda op, args, ctx: [list(ctx.vars[op.attrs["var"].name])]


def read(var, ctx: str):
    """Bind a traced read of `var` in context `ctx` ("replica" or "cross_replica")."""
    return var_read_p.bind(var=_context.session().symbol(var), ctx=ctx, sync=var._sync_name)


# --- sx.var_assign / _add / _sub: replace, add to or subtract from the local copy -----------
_UPDATES = {"sx.var_assign": lambda old, v: v, "sx.var_assign_add": lambda old, v: old + v,
            "sx.var_assign_sub": lambda old, v: old - v}


def _lower_update(op, args, ctx):
    name = op.attrs["var"].name
    old = ctx.vars[name]
    ctx.vars[name] = _UPDATES[op.name](old, args[0]).astype(old.dtype).reshape(old.shape)
    return []


def _reference_update(op, args, ctx):
    name = op.attrs["var"].name
    olds = ctx.vars[name]
    ctx.vars[name] = [np.asarray(_UPDATES[op.name](o, v), dtype=np.asarray(o).dtype).reshape(np.shape(o))
                      for o, v in zip(olds, args[0])]
    return []


def _update_jvp(p):
    return lambda primals, tangents, **params: (p.bind(*primals, **params), [])


def _update_batch(args, dims, *, var, ctx):
    raise DistributionValueError(
        f"variable {variable(var.name).name!r} is updated inside jax.vmap with a batched value: every batch "
        "element would write the same variable",
        "update the variable outside the vmapped function, with one value (e.g. reduce the batch first)")


UPDATE_PRIMITIVES = {}
for _name in UPDATES:
    declare(OpDef(_name, "Update a variable's local copy with a value.", num_operands=1,
                  num_results=0, attrs=_OP_ATTRS, effects=frozenset({WRITES_VARIABLE})))
    LOWERINGS[_name] = _lower_update
    REFERENCE[_name] = _reference_update
    _p = UPDATE_PRIMITIVES[_name[len("sx.var_"):]] = primitive(_name)
    _p.multiple_results = True
    _p.def_effectful_abstract_eval(lambda value, *, var, ctx: ([], {VARIABLE}))
    ad.primitive_jvps[_p] = _update_jvp(_p)
    batching.primitive_batchers[_p] = _update_batch


def update(var, kind: str, value, ctx: str) -> None:
    """Bind a traced assign/assign_add/assign_sub of `value` (already of var's shape and dtype)."""
    ref = _context.session().symbol(var)
    UPDATE_PRIMITIVES[kind].bind(jnp.asarray(value), var=ref, ctx=ctx)


# --- sx.broadcast: every replica gets replica `source`'s value ------------------------------
def _verify_broadcast(op: Operation) -> str | None:
    if not op.operands[0].type.same_tensor(op.results[0].type):
        return f"result type {op.results[0].type} differs from operand type {op.operands[0].type}"
    return None


declare(OpDef("sx.broadcast", "Every replica gets replica `source`'s value.", num_operands=1,
              num_results=1, attrs={"source": Int(minimum=0), "reason": Str()},
              locality=lambda op, locs: [Locality.MIRRORED], verify=_verify_broadcast,
              is_collective=True, traffic="broadcast", identity_on_one_replica=True))


def _lower_broadcast(op, args, ctx):
    """A binomial tree of point-to-point sends from `source`: in round k the 2**k replicas that
    hold the value (counted from the source) send it on to the next 2**k. Every other replica
    receives it once: (N-1)/N of its bytes per replica on average (an all-reduce of the value
    and zeros would move twice that), in ceil(log2 N) rounds; any dtype (bools too)."""
    x, n, source = args[0], ctx.num_replicas, op.attrs["source"]
    rank = (lax.axis_index(ctx.axis_name) - source) % n  # the distance from the source
    k = 1
    while k < n:
        pairs = [((source + i) % n, (source + i + k) % n) for i in range(min(k, n - k))]
        received = lax.ppermute(x, ctx.axis_name, pairs)
        x = jnp.where((rank >= k) & (rank < 2 * k), received, x)
        k *= 2
    return [x]


LOWERINGS["sx.broadcast"] = _lower_broadcast
REFERENCE["sx.broadcast"] = lambda op, args, ctx: [[args[0][op.attrs["source"]]] * len(args[0])]
