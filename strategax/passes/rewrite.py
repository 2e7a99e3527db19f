"""Small shared helpers for passes that rewrite a block: use replacement, re-ordering, keys."""
from __future__ import annotations

import heapq
from typing import Any, Iterable

import numpy as np

from ..ir import Block, Operation, SymbolRef, Value


def replace_uses(block: Block, mapping: dict[int, Value]) -> None:
    """Replace every use in `block` (operands and yielded values) of value id k by mapping[k].

    Chains (a -> b -> c) resolve to their end. Regions are isolated, so only this block changes.
    """
    if not mapping:
        return

    def resolve(v: Value) -> Value:
        seen = 0
        while id(v) in mapping and seen < len(mapping) + 1:
            v = mapping[id(v)]
            seen += 1
        return v

    for op in block.ops:
        if any(id(v) in mapping for v in op.operands):
            op.operands = [resolve(v) for v in op.operands]
    block.results = [resolve(v) for v in block.results]


def replace_value_after(ops: list[Operation], results: list[Value], old: Value, new: Value) -> None:
    """Replace `old` by `new` in `ops` (the ops after the one that made `new`, nested regions
    included) and in `results`: for a rewrite that inserts one op and redirects later uses."""
    for op in ops:
        op.operands = [new if v is old else v for v in op.operands]
        for region in op.regions:
            replace_value_after(region.ops, region.results, old, new)
    results[:] = [new if v is old else v for v in results]


def has_effects(op: Operation) -> bool:
    """Ops whose order matters beyond their operands: no results, or touching a module symbol."""
    return not op.results or any(isinstance(a, SymbolRef) for a in op.attrs.values())


def in_order(block: Block) -> bool:
    """Whether every operand is defined before its use."""
    defined = set(map(id, block.args))
    for op in block.ops:
        for v in op.operands:
            if id(v) not in defined:
                return False
        defined.update(map(id, op.results))
    return True


def topological_sort(block: Block) -> None:
    """Re-order `block.ops` so values are defined before use, otherwise keeping their order.

    Ops with effects keep their relative order. Raises RuntimeError on a dependency cycle.
    """
    if in_order(block):
        return
    ops = block.ops
    producer = {id(r): i for i, op in enumerate(ops) for r in op.results}
    users: list[list[int]] = [[] for _ in ops]
    pending = [0] * len(ops)
    last_effect = None
    for i, op in enumerate(ops):
        deps = {producer[id(v)] for v in op.operands if id(v) in producer}
        if has_effects(op):
            if last_effect is not None:
                deps.add(last_effect)
            last_effect = i
        deps.discard(i)
        pending[i] = len(deps)
        for d in deps:
            users[d].append(i)
    ready = [i for i in range(len(ops)) if pending[i] == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        i = heapq.heappop(ready)
        out.append(ops[i])
        for u in users[i]:
            pending[u] -= 1
            if pending[u] == 0:
                heapq.heappush(ready, u)
    if len(out) != len(ops):
        raise RuntimeError("internal error: a rewrite created a dependency cycle")
    block.ops[:] = out


def freeze(value: Any) -> Any:
    """A hashable stand-in for an attribute value (lists and arrays included)."""
    if isinstance(value, (list, tuple)):
        return (type(value).__name__,) + tuple(freeze(v) for v in value)
    if isinstance(value, np.ndarray):
        return ("dense", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, dict):
        return tuple(sorted((k, freeze(v)) for k, v in value.items()))
    try:
        hash(value)
    except TypeError:
        return ("repr", repr(value))
    return (type(value).__name__, value)


def op_key(op: Operation) -> tuple:
    """Two ops with equal keys compute the same values (for ops without regions or effects)."""
    attrs = tuple(op.attrs.items())
    try:
        hash(attrs)  # plain literals (the common case) hash as they are
    except TypeError:
        attrs = freeze(op.attrs)
    return (op.name, tuple(map(id, op.operands)), attrs,
            tuple((r.type.shape, r.type.dtype) for r in op.results))


def blocks(blocks_in: Iterable[Block]) -> Iterable[Block]:
    """Every block given and, depth first, the regions of their ops."""
    for b in blocks_in:
        yield b
        for op in b.ops:
            if op.regions:
                yield from blocks(op.regions)


def all_blocks(module) -> list[Block]:
    """Every block of every function in `module`."""
    return list(blocks(f.body for f in module.funcs))
