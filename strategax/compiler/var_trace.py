"""The JAX primitives that variable reads and updates become while a program is traced, and
the per-trace session that gives each variable used its module-level symbol."""
from __future__ import annotations

import re
import threading

import jax.numpy as jnp
from jax import core as jax_core
from jax.extend.core import Primitive
from jax.interpreters import ad

from ..ir import Locality, SymbolRef, TensorType, VarDecl, register_primitive
from .errors import DistributionValueError


class VarSession:
    """The variables one trace touches, in first-use order, each with a unique symbol."""

    def __init__(self, strategy):
        self.strategy = strategy
        self.variables: list = []
        self._names: dict[int, str] = {}

    def symbol(self, var) -> SymbolRef:
        name = self._names.get(id(var))
        if name is None:
            owner = var._strategy
            if owner is not None and owner is not self.strategy:
                raise DistributionValueError(
                    f"variable {var.name!r} was created in the scope of {owner!r} but is used in "
                    f"a program of {self.strategy!r}",
                    "create the variable inside `with strategy.scope():` of the strategy that uses it")
            base = re.sub(r"[^A-Za-z0-9_.]", "_", var.name) or "v"
            name, k = base, 0
            while name in self._names.values():
                k += 1
                name = f"{base}_{k}"
            self._names[id(var)] = name
            self.variables.append(var)
        return SymbolRef(name)

    def aval(self, ref: SymbolRef):
        var = self.variables[list(self._names.values()).index(ref.name)]
        return jax_core.ShapedArray(var.shape, var.dtype)

    def decls(self) -> list[VarDecl]:
        return [VarDecl(self._names[id(v)], v._ir_type(), v._ir_attrs()) for v in self.variables]


class _State(threading.local):
    def __init__(self):
        self.sessions: list[VarSession] = []


_state = _State()


def push(session: VarSession) -> None:
    _state.sessions.append(session)


def pop() -> None:
    _state.sessions.pop()


def session() -> VarSession | None:
    return _state.sessions[-1] if _state.sessions else None


def _primitive(name: str, multiple_results: bool = False) -> Primitive:
    p = Primitive(name)
    p.multiple_results = multiple_results
    register_primitive(p)
    return p


var_read_p = _primitive("sx.var_read")
var_read_p.def_abstract_eval(lambda *, var, ctx, sync: session().aval(var))
# The read's type comes from the trace's session, not from its parameters: stop JAX from
# caching it by parameters (two programs whose variables share a symbol name, e.g. two
# optimizers' slots, would otherwise get the first program's shapes).
var_read_p.ref_allocating = True

UPDATE_PRIMITIVES = {kind: _primitive(f"sx.var_{kind}", multiple_results=True)
                     for kind in ("assign", "assign_add", "assign_sub")}
for _p in UPDATE_PRIMITIVES.values():
    _p.def_abstract_eval(lambda value, *, var, ctx: [])
    ad.primitive_jvps[_p] = (lambda p: lambda primals, tangents, **kw: (p.bind(*primals, **kw), []))(_p)


def read(var, ctx: str):
    """Bind a traced read of `var` in context `ctx` ("replica" or "cross_replica")."""
    return var_read_p.bind(var=session().symbol(var), ctx=ctx, sync=var._sync_name)


def update(var, kind: str, value, ctx: str) -> None:
    """Bind a traced assign/assign_add/assign_sub of `value` (already of var's shape and dtype)."""
    ref = session().symbol(var)
    UPDATE_PRIMITIVES[kind].bind(jnp.asarray(value), var=ref, ctx=ctx)


def ir_type(shape, dtype, per_replica: bool) -> TensorType:
    return TensorType(tuple(shape), jnp.dtype(dtype),
                      Locality.PER_REPLICA if per_replica else Locality.MIRRORED)
