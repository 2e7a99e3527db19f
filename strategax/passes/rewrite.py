"""Small shared helpers for passes that rewrite a block: use replacement, re-ordering, keys."""
from __future__ import annotations

from typing import Any, Iterable

import networkx as nx
import numpy as np

from ..ir import Block, Operation, Value, has_effects


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


def in_order(block: Block) -> bool:
    """Whether every operand is defined before its use."""
    defined = set(map(id, block.args))
    for op in block.ops:
        for v in op.operands:
            if id(v) not in defined:
                return False
        defined.update(map(id, op.results))
    return True


def dependency_graph(block: Block) -> nx.DiGraph:
    """Op indices of `block`, with an edge from each op to the ops that use its results and
    from each op with effects to the next one (their order is kept)."""
    ops = block.ops
    g = nx.DiGraph()
    g.add_nodes_from(range(len(ops)))
    producer = {id(r): i for i, op in enumerate(ops) for r in op.results}
    last_effect = None
    for i, op in enumerate(ops):
        g.add_edges_from((producer[id(v)], i) for v in op.operands if id(v) in producer)
        if has_effects(op):
            if last_effect is not None:
                g.add_edge(last_effect, i)
            last_effect = i
    return g


def topological_sort(block: Block) -> None:
    """Re-order `block.ops` so values are defined before use, otherwise keeping their order.

    Ops with effects keep their relative order. Raises RuntimeError naming the ops of a
    dependency cycle."""
    if in_order(block):
        return
    g = dependency_graph(block)
    try:
        order = list(nx.lexicographical_topological_sort(g))
    except nx.NetworkXUnfeasible:
        cycle = nx.find_cycle(g)
        names = " -> ".join(f"{block.ops[a].name} (op {a})" for a, _ in cycle)
        raise RuntimeError(f"internal error: a rewrite created a dependency cycle: {names}") from None
    block.ops[:] = [block.ops[i] for i in order]


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
