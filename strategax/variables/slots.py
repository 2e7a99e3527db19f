"""Optimizer slots named by their variable, never by call order.

optax sees a group's parameters as a `Params` node whose key for each parameter is a
`ParamKey`, so every leaf of the optax state says which variable it belongs to (Adam's `mu`
and `nu` do) or that it belongs to the whole group (Adam's `count`). A slot is then named by
(its variable, its optax state path), e.g. (w1, ("0", "mu")), whatever order the gradients
come in.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from ..errors import DistributionValueError

StatePath = tuple[str, ...]


@dataclass(frozen=True)
class ParamKey:
    """The key of the `index`-th parameter of a group inside optax's state tree."""
    index: int

    def __str__(self) -> str:
        return f"<param {self.index}>"


class Params(tuple):
    """A group's parameters (or gradients, or updates) as optax sees them."""


jax.tree_util.register_pytree_with_keys(
    Params, lambda p: ([(ParamKey(i), x) for i, x in enumerate(p)], None),
    lambda _, children: Params(children), flatten_func=lambda p: (list(p), None))


def _key_name(key) -> str:
    for attr in ("name", "key", "idx"):  # GetAttrKey, DictKey, SequenceKey / FlattenedIndexKey
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def leaf_owner_and_path(key_path) -> tuple[int | None, StatePath]:
    """(index of the parameter the leaf belongs to, or None for a group-wide leaf; its optax
    state path without the parameter key)."""
    owners = [k.index for k in key_path if isinstance(k, ParamKey)]
    if len(owners) > 1:
        raise DistributionValueError(f"an optax state leaf at {jax.tree_util.keystr(key_path)} belongs to "
                                     "several parameters", "use a per-parameter optax transformation")
    return (owners[0] if owners else None), tuple(_key_name(k) for k in key_path if not isinstance(k, ParamKey))


def state_leaves(state) -> list[tuple[int | None, StatePath, Any]]:
    """(owner index or None, state path, leaf) for every leaf of an optax state."""
    flat, _ = jax.tree_util.tree_flatten_with_path(state)
    return [(*leaf_owner_and_path(kp), leaf) for kp, leaf in flat]


def slot_spec(tx, shape: tuple, dtype) -> dict[StatePath, jax.ShapeDtypeStruct]:
    """The slots one variable of this shape and dtype gets from `tx`, by state path."""
    state = jax.eval_shape(tx.init, Params([jax.ShapeDtypeStruct(shape, dtype)]))
    return {path: leaf for _, path, leaf in state_leaves(state)}


def group_value(name: str, path: StatePath, values: list[np.ndarray]):
    """The value of a group-wide leaf restored from its variables' copies (all must agree)."""
    first = values[0]
    if any(v.shape != first.shape or not np.array_equal(v, first) for v in values[1:]):
        raise DistributionValueError(
            f"optimizer {name!r}: the restored values of group-wide state {'/'.join(path)!r} differ "
            "between the variables now updated together (they were saved from separate "
            "apply_gradients groups)",
            "apply gradients to the same groups of variables as the run that saved the checkpoint")
    return first


# --- sharded state (sx.Optimizer(shard_state=True)): the update must act element by element ----
# What may touch a piece of a sharded slot, gradient or parameter: ops whose every output
# element depends only on the same element of each input (and on scalars). Anything else (a
# norm, a sum, a reshape of the piece) would see 1/N of the value and silently differ.
ELEMENTWISE = frozenset({
    "abs", "add", "and", "atan2", "cbrt", "ceil", "clamp", "convert_element_type", "copy", "copy_p", "cos",
    "div", "eq", "erf", "erf_inv", "exp", "exp2", "expm1", "floor", "ge", "gt", "integer_pow", "is_finite",
    "le", "log", "log1p", "logistic", "lt", "max", "min", "mul", "ne", "neg", "nextafter", "not", "or",
    "pow", "reduce_precision", "rem", "round", "rsqrt", "select_n", "sign", "sin", "sqrt", "square",
    "stop_gradient", "sub", "tan", "tanh", "xor"})
_CALLS = {"jit": "jaxpr", "pjit": "jaxpr", "closed_call": "call_jaxpr", "custom_jvp_call": "call_jaxpr",
          "custom_vjp_call": "call_jaxpr", "remat": "jaxpr", "checkpoint": "jaxpr"}
_SAME_SHAPE = frozenset({"broadcast_in_dim", "reshape", "squeeze", "expand_dims"})


def _shape(v) -> tuple:
    return tuple(getattr(v.aval, "shape", ()))


def _walk(jaxpr, sharded: list[bool], whole: list[bool], name: str) -> tuple[list[bool], list[bool]]:
    """Follow which values are pieces (`sharded`) or non-scalar values of unsharded state
    (`whole`) through `jaxpr`; raise where an op would mix a piece's elements or a piece with a
    whole value. Returns the flags of its outputs."""
    from jax.extend.core import Literal  # noqa: PLC0415 - JAX's jaxpr types, read only here
    flags: dict = {}
    for v, s, w in zip(jaxpr.invars, sharded, whole):
        flags[v] = (s, w)

    def get(v):
        return (False, False) if isinstance(v, Literal) else flags.get(v, (False, False))

    for eqn in jaxpr.eqns:
        ins = [get(v) for v in eqn.invars]
        any_s = any(s for s, _ in ins)
        any_w = any(w for _, w in ins)
        prim = eqn.primitive.name
        if prim in _CALLS and _CALLS[prim] in eqn.params:
            sub = eqn.params[_CALLS[prim]]
            outs = _walk(getattr(sub, "jaxpr", sub), [s for s, _ in ins], [w for _, w in ins], name)
            for v, s, w in zip(eqn.outvars, *outs):
                flags[v] = (s, w)
            continue
        if any_s:
            bad = None
            if prim in _SAME_SHAPE:
                if any(_shape(v) != _shape(eqn.outvars[0]) for v, (s, _) in zip(eqn.invars, ins) if s):
                    bad = "changes the shape of a piece"
            elif prim not in ELEMENTWISE:
                bad = "combines elements"
            elif any(w and _shape(v) for v, (_, w) in zip(eqn.invars, ins)):
                bad = "combines a piece with an unsharded state value"
            if bad:
                raise DistributionValueError(
                    f"optimizer {name!r} has shard_state=True, but its optax update {bad} ({prim}): "
                    "applied to 1/N of each slot, gradient and parameter it would give a different result",
                    "use an element-wise transformation (sgd, momentum, adam, adamw, rmsprop, ...) with "
                    "shard_state=True, or shard_state=False for this one (e.g. clip_by_global_norm)")
        for v in eqn.outvars:
            flags[v] = (any_s, any_w)
    outs = [get(v) for v in jaxpr.outvars]
    return [s for s, _ in outs], [w for _, w in outs]


def check_elementwise(name: str, tx, grads: list, state, params: list, sharded_leaves: list[bool]) -> None:
    """Raise unless `tx.update` on pieces (`grads`, `params` and the state leaves marked in
    `sharded_leaves`, given as abstract arrays) acts element by element, and the unsharded state
    it returns does not depend on a piece."""
    closed = jax.make_jaxpr(lambda g, s, p: tx.update(g, s, p))(Params(grads), state, Params(params))
    leaves = jax.tree_util.tree_leaves(state)
    sharded = [True] * len(grads) + list(sharded_leaves) + [True] * len(params)
    whole = [False] * len(grads) + [not s and bool(np.shape(x)) for s, x in zip(sharded_leaves, leaves)] \
        + [False] * len(params)
    out_s, _ = _walk(closed.jaxpr, sharded, whole, name)
    new_state = out_s[len(grads):]
    for (s_in, leaf_sharded) in zip(new_state, sharded_leaves):
        if s_in and not leaf_sharded:
            raise DistributionValueError(
                f"optimizer {name!r} has shard_state=True, but a state value it keeps whole depends on "
                "a piece of a gradient or parameter: each replica would hold a different value",
                "use an element-wise transformation with shard_state=True, or shard_state=False")
