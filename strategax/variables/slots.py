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
