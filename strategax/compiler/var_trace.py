"""The JAX primitives that variable reads and updates become while a program is traced, and
the per-trace session that gives each variable used its module-level symbol."""
from __future__ import annotations

import re
import threading
import weakref
from typing import Any

import jax.numpy as jnp
from jax import core as jax_core
from jax.extend.core import Primitive
from jax.interpreters import ad

from ..ir import Locality, SymbolRef, TensorType, VarDecl, register_primitive
from .errors import DistributionValueError


_ISSUED: set[str] = set()  # every symbol ever given out: never reused, even after a variable dies
_BY_SYMBOL: "weakref.WeakValueDictionary[str, Any]" = weakref.WeakValueDictionary()


def new_symbol(var) -> str:
    """A module symbol for `var`, unique for the life of the process: a traced read or update
    names its variable by symbol, and JAX may reuse a traced jaxpr (jax.jit's cache) later."""
    base = re.sub(r"[^A-Za-z0-9_.]", "_", var.name) or "v"
    name, k = base, 0
    while name in _ISSUED:
        k += 1
        name = f"{base}_{k}"
    _ISSUED.add(name)
    _BY_SYMBOL[name] = var
    return name


def variable(symbol: str):
    var = _BY_SYMBOL.get(symbol)
    if var is None:
        raise RuntimeError(f"variable @{symbol} no longer exists")
    return var


class VarSession:
    """The variables one trace touches; `decls` lists those its module refers to."""

    def __init__(self, strategy):
        self.strategy = strategy

    def check(self, var) -> None:
        owner = var._strategy
        if owner is not None and owner is not self.strategy:
            raise DistributionValueError(
                f"variable {var.name!r} was created in the scope of {owner!r} but is used in "
                f"a program of {self.strategy!r}",
                "create the variable inside `with strategy.scope():` of the strategy that uses it")

    def symbol(self, var) -> SymbolRef:
        self.check(var)
        return SymbolRef(var._symbol)

    def variables_of(self, module) -> list:
        """The variables `module` refers to, in order of first use (checked for ownership)."""
        seen: dict[str, Any] = {}
        for op in module.walk():
            ref = op.attrs.get("var") if op.name.startswith("sx.var_") else None
            if isinstance(ref, SymbolRef) and ref.name not in seen:
                var = variable(ref.name)
                self.check(var)
                seen[ref.name] = var
        return list(seen.values())

    @staticmethod
    def decls(variables: list) -> list[VarDecl]:
        return [VarDecl(v._symbol, v._ir_type(), v._ir_attrs()) for v in variables]


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
def _read_abstract(*, var, ctx, sync):
    v = variable(var.name)
    return jax_core.ShapedArray(v.shape, v.dtype)


var_read_p.def_abstract_eval(_read_abstract)

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
