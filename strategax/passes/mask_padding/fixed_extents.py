"""mask-padding's check of values whose extent along a padded axis is fixed (issue 35).

Padding is provably invisible when every value that meets a padded axis either comes from the
padded data itself (`x.T @ x`, `x * y` of one batch), follows its extent (`jnp.ones(x.shape[0])`,
`jnp.arange(...)`, a broadcast along the axis: uniform, or an iota, whose real prefix is what
TensorFlow's dynamic shapes give) or is masked. A value of a fixed extent is not: a constant
that is not uniform along the axis, a variable, or an input that carries no padding of its
own. Met along a padded axis (`x @ W` contracting it, `x * c` entry by entry) it has the padded
extent, where in TensorFlow each replica's value has its own real extent and the op raises
(or broadcasts a one-row value): strategax cannot give TensorFlow's answer, so the place is a
padding gap (a full batch runs; a call with padded entries raises naming the user's line).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...dialects.control_flow import region_flows
from ...ir import Block, Module, Operation, Value

_STEP_OPS = ("jax.dynamic_slice", "jax.squeeze")  # one step of a stacked input: `stacked[t]`
_SHAPE_OPS = ("jax.broadcast_in_dim", "jax.reshape", "jax.convert_element_type", "jax.squeeze", "jax.transpose")

FIX = ("make that operand from this replica's value (its shape: `jnp.ones(x.shape[0])`, `jnp.arange(...)`, "
       "or a broadcast along the axis), or reduce over the padded axis before it meets a value of a fixed size")


def _uniform(value: np.ndarray, axis: int) -> bool:
    """Whether every entry of `value` equals the first along `axis` (a broadcast along it)."""
    return bool(np.all(value == np.take(value, [0], axis=axis)))


def fixed_extent_sources(module: Module, every: list[Block],
                         row_count: Callable[[Value, int], object]) -> list[tuple[Operation | None, str]]:
    """(the op to name, what it combines) for each value of a fixed extent that the rows analysis
    (`row_count(value, axis)`: its count, or None) made padded along an axis longer than 1."""
    marked = _marked(every)
    users: dict[Value, list[Operation]] = {}
    for b in every:
        for op in b.ops:
            for x in op.operands:
                users.setdefault(x, []).append(op)
    sources: list[tuple[Value, Operation | None, str]] = []
    for b in every:
        for op in b.ops:
            if op.name == "sx.constant" and op.results:
                value = np.asarray(op.attrs["value"])
                sources.append((op.result, op, "a constant") if value.ndim else (op.result, None, ""))
            elif op.name == "sx.var_read" and op.results:
                ref = op.attrs.get("var")
                sources.append((op.result, op, f"the variable @{getattr(ref, 'name', ref)}"))
    sources += [(a, None, "an input that is not padded") for a in module.main.body.args if a not in marked]
    found: list[tuple[Operation | None, str]] = []
    for v, op, what in sources:
        if not what:
            continue
        shape = v.type.shape
        for i in range(len(shape)):
            if shape[i] <= 1 or row_count(v, i) is None:
                continue
            if op is not None and op.name == "sx.constant" and _uniform(np.asarray(op.attrs["value"]), i):
                continue
            at = _first_user(v, users) or op
            name = at.name if at is not None else "an op"
            found.append((at, f"{name} meets {what} ({v.type}) whose axis {i} has the fixed extent {shape[i]}, "
                              "along an axis whose real extent differs across replicas (TensorFlow raises where "
                              "a replica's extent is not that size)"))
            break
    return found


def _marked(every: list[Block]) -> set[Value]:
    """The values marked `sx.rows`, and those that flow into them through a region or that they
    are one step of (a slice): an input a loop's body marks (the batches taken inside `sx.range`
    or `for x in dataset`, stacked over the steps, each step sliced out) has its padding."""
    marked = {op.operands[0] for b in every for op in b.ops if op.name == "sx.rows"}
    flows = [(src, dst) for b in every for op in b.ops if op.regions for src, dst, _ in region_flows(op)]
    flows += [(op.operands[0], op.result) for b in every for op in b.ops
              if op.name in _STEP_OPS and op.operands and len(op.results) == 1]
    changed = True
    while changed:
        changed = False
        for src, dst in flows:
            if dst in marked and src not in marked:
                marked.add(src)
                changed = True
    return marked


def _first_user(v: Value, users: dict[Value, list[Operation]]) -> Operation | None:
    """The first op reading `v` (through shape ops) that has the user's line (else the first)."""
    todo, seen, first = [v], set(), None
    while todo:
        x = todo.pop(0)
        for op in users.get(x, ()):
            if id(op) in seen:
                continue
            seen.add(id(op))
            if op.name in _SHAPE_OPS:
                todo.extend(op.results)
            elif op.loc is not None:
                return op
            elif first is None:
                first = op
    return first
