"""The rewrite driver every pass uses: one block's replacements, insertions and erasures are
recorded by a `BlockRewriter` and applied once by `commit`, which says whether anything changed.

A pass visits `rw.ops()` in program order; each op's operands already read the values earlier
replacements put in their place. Maps are keyed by the `Value`/`Operation` itself (identity).
`commit` refuses to erase an op whose results are still read (by a kept op or by what the
block yields), naming both: a pass's mistake surfaces at the pass, not as a KeyError later.
"""
from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

import numpy as np

from ..dialects.control_flow import add_const
from ..ir import Block, Module, Operation, Value, has_effects

if TYPE_CHECKING:  # imported where a block is re-ordered: networkx takes ~0.5 s of every `import strategax`
    import networkx as nx


class BlockRewriter:
    """Rewrite bookkeeping for one block (regions are isolated: only this block changes)."""

    def __init__(self, block: Block):
        self.block = block
        self.changed = False
        self._remap: dict[Value, tuple[Value, frozenset[Operation]]] = {}
        self._before: dict[Operation, list[Operation]] = {}
        self._after: dict[Operation, list[Operation]] = {}
        self._erased: set[Operation] = set()
        self._sort = False
        self._producers: dict[Value, Operation] | None = None
        self._users: dict[Value, list[Operation]] | None = None

    # -- facts, computed once (on first use: most passes never ask) ----------------------------
    @property
    def producers(self) -> dict[Value, Operation]:
        """Each value the block's ops (inserted ones included) define -> the op defining it."""
        if self._producers is None:
            self._producers = {r: op for op in self.block.ops for r in op.results}
            for inserted in (*self._before.values(), *self._after.values()):
                self._producers.update((r, o) for o in inserted for r in o.results)
        return self._producers

    def users(self, v: Value) -> list[Operation]:
        """The ops of the block (as it was given) that read `v`."""
        if self._users is None:
            self._users = {}
            for op in self.block.ops:
                for x in op.operands:
                    self._users.setdefault(x, []).append(op)
        return self._users.get(v, [])

    def num_uses(self, v: Value) -> int:
        """How often `v` is read: by the block's ops and by what the block yields, counting the
        reads of values replaced by `v` so far (a merged duplicate's readers read `v` now)."""
        count = len(self.users(v)) + sum(r is v for r in self.block.results)
        for old, (_, kept) in self._remap.items():
            if old is not v and self.resolve(old) is v:
                count += sum(u not in kept for u in self.users(old)) + sum(r is old for r in self.block.results)
        return count

    def producer(self, v: Value) -> Operation | None:
        """The op of this block that defines `v` (None for a block argument)."""
        return self.producers.get(v)

    # -- visiting ------------------------------------------------------------------------------
    def ops(self) -> Iterator[Operation]:
        """The block's ops in order (erased ones skipped), each op's operands redirected first."""
        erased, remap = self._erased, self._remap
        for op in list(self.block.ops):
            if op not in erased:
                if remap and not remap.keys().isdisjoint(op.operands):
                    self._redirect(op)
                yield op

    def resolve(self, v: Value, user: Operation | None = None) -> Value:
        """What `v` stands for now (as `user` reads it): replacements followed to their end."""
        for _ in range(len(self._remap) + 1):
            hit = self._remap.get(v)
            if hit is None or user in hit[1]:
                return v
            v = hit[0]
        raise RuntimeError("internal error: a rewrite replaced a value by itself through a cycle")

    # -- edits ---------------------------------------------------------------------------------
    def replace_uses(self, old: Value, new: Value, *, except_in: Iterable[Operation] = ()) -> None:
        """Every later read of `old` (ops and yielded values) reads `new`, except in `except_in`."""
        if old is not new:
            self._remap[old] = (new, frozenset(except_in))
            self.changed = True

    def replace(self, op: Operation, values: list[Value]) -> None:
        """Erase `op`; its results' readers read `values` instead."""
        if len(values) != len(op.results):
            raise ValueError(f"internal error: {op.name} has {len(op.results)} results, not {len(values)}")
        for r, v in zip(op.results, values):
            self.replace_uses(r, v)
        self.erase(op)

    def erase(self, op: Operation) -> None:
        """Drop `op` from the block; `commit` refuses when its results are still read."""
        self._erased.add(op)
        self.changed = True

    def insert_before(self, op: Operation, new_ops: list[Operation]) -> None:
        """Place `new_ops` right before `op` (an op of the block, or one inserted earlier)."""
        self._insert(self._before, op, new_ops)

    def insert_after(self, op: Operation, new_ops: list[Operation]) -> None:
        """Place `new_ops` right after `op`."""
        self._insert(self._after, op, new_ops)

    def set_operands(self, op: Operation, operands: list[Value]) -> None:
        """Give `op` these operands."""
        if len(operands) != len(op.operands) or any(a is not b for a, b in zip(operands, op.operands)):
            op.operands = list(operands)
            self.changed = True

    def set_operand(self, op: Operation, index: int, value: Value) -> None:
        """Give `op` operand `value` at `index`."""
        self.set_operands(op, op.operands[:index] + [value] + op.operands[index + 1:])

    def set_attrs(self, op: Operation, **attrs: Any) -> None:
        """Add or change attributes of `op`."""
        if any(k not in op.attrs or op.attrs[k] is not v for k, v in attrs.items()):
            op.attrs = {**op.attrs, **attrs}
            self.changed = True

    def add_region_const(self, op: Operation, value: Value) -> list[Value]:
        """Make `value` (a value of this block) visible in every region of `op` (an op of this
        block) as a new first region argument, a loop constant or branch operand; returns those
        arguments, one per region. Applied at once: the regions' own rewriters read them."""
        args = add_const(op, value)
        self._users = None  # `op` reads `value` now
        self.changed = True
        return args

    def add_result(self, value: Value) -> int:
        """Yield `value` as a new last result of the block; returns its index."""
        self.block.results.append(value)
        self.changed = True
        return len(self.block.results) - 1

    def reorder(self) -> None:
        """Ask `commit` to re-order the ops so that every value is defined before it is read."""
        self._sort = True

    def commit(self) -> bool:
        """Apply every edit to the block; True when anything changed."""
        if not self.changed and not self._sort:
            return False
        out = self._emitted()
        gone = {r: op for op in self._erased for r in op.results}
        watched = self._remap.keys() | gone.keys()  # values a kept op may not read as they are
        for op in out if watched else ():
            if not watched.isdisjoint(op.operands):
                self._redirect(op)
                self._check_unread(gone, op.operands, op)
        results = [self.resolve(v) for v in self.block.results]
        self._check_unread(gone, results, None)
        self.block.ops[:] = out
        self.block.results = results
        if self._sort:
            self.changed |= topological_sort(self.block)
        return self.changed

    # -- internals -----------------------------------------------------------------------------
    def _check_unread(self, gone: dict[Value, Operation], values: list[Value], user: Operation | None) -> None:
        """Refuse to erase an op whose results are still read (as xDSL's safe erase): by a kept
        op `user` (its operands), or by what the block yields (`user` None). Raises
        RuntimeError naming both (a bug of the pass), with the erased op as its `op`; the
        message is built only for a reader found."""
        v = next((v for v in values if v in gone), None) if gone else None
        if v is not None:
            reader = f"{_named(user)} still reads {_value(v)}" if user else f"the block still yields {_value(v)}"
            error = RuntimeError(f"a rewrite erased {_named(gone[v])}, but {reader}")
            error.op = gone[v]  # pyright: ignore[reportAttributeAccessIssue]  read by errors._op_of
            raise error

    def _insert(self, where: dict, op: Operation, new_ops: list[Operation]) -> None:
        if new_ops:
            where.setdefault(op, []).extend(new_ops)
            if self._producers is not None:
                self._producers.update((r, o) for o in new_ops for r in o.results)
            self.changed = True

    def _emitted(self) -> list[Operation]:
        """The block's ops as they will be: erased ones dropped, inserted ones in place."""
        before, after, erased = self._before, self._after, self._erased
        if not before and not after:
            return [op for op in self.block.ops if op not in erased]
        out: list[Operation] = []
        for op in self.block.ops:
            if op in before or op in after:
                self._emit(op, out)
            elif op not in erased:
                out.append(op)
        return out

    def _emit(self, op: Operation, out: list[Operation]) -> None:
        for o in self._before.pop(op, ()):
            self._emit(o, out)
        if op not in self._erased:
            out.append(op)
        for o in self._after.pop(op, ()):
            self._emit(o, out)

    def _redirect(self, op: Operation) -> None:
        if not self._remap.keys().isdisjoint(op.operands):
            op.operands = [self.resolve(v, op) for v in op.operands]


def _value(v: Value) -> str:
    return f"its result %{v.name}" if v.name else "its result"


def _named(op: Operation) -> str:
    """`op` for an error message: its name, its named results and the user's line."""
    results = ", ".join(f"%{r.name}" for r in op.results if r.name)
    return f"{op.name}{f' ({results})' if results else ''}{f' at {op.loc}' if op.loc else ''}"


def rewrite_blocks(module: Module, visit: Callable[[BlockRewriter], None]) -> bool:
    """Run `visit` on a rewriter of each block of `module` (regions included) and commit it;
    True when any block changed."""
    changed = False
    for block in all_blocks(module):
        rw = BlockRewriter(block)
        visit(rw)
        changed |= rw.commit()
    return changed


def dependency_graph(block: Block) -> nx.DiGraph:
    """Op indices of `block`, with an edge from each op to the ops that use its results and
    from each op with effects to the next one (their order is kept)."""
    import networkx as nx

    ops = block.ops
    g = nx.DiGraph()
    g.add_nodes_from(range(len(ops)))
    producer = {r: i for i, op in enumerate(ops) for r in op.results}
    last_effect = None
    for i, op in enumerate(ops):
        g.add_edges_from((producer[v], i) for v in op.operands if v in producer)
        if has_effects(op):
            if last_effect is not None:
                g.add_edge(last_effect, i)
            last_effect = i
    return g


def in_order(block: Block) -> bool:
    """Whether every operand is defined before its use."""
    defined = set(block.args)
    for op in block.ops:
        if any(v not in defined for v in op.operands):
            return False
        defined.update(op.results)
    return True


def topological_sort(block: Block) -> bool:
    """Re-order `block.ops` so values are defined before use, otherwise keeping their order;
    True when the order changed. Ops with effects keep their relative order. Raises
    RuntimeError naming the ops of a dependency cycle.

    The order is networkx's `lexicographical_topological_sort` of `dependency_graph` (of the
    ready ops, the earliest first), computed here with a heap: importing networkx and building
    its graph cost more than the whole sort on a first call (issue 36)."""
    if in_order(block):
        return False
    ops = block.ops
    producer = {r: i for i, op in enumerate(ops) for r in op.results}
    users: list[list[int]] = [[] for _ in ops]
    waiting = [0] * len(ops)  # how many producers (and the previous op with effects) each op waits on
    last_effect = None
    for i, op in enumerate(ops):
        preds = {producer[v] for v in op.operands if v in producer}
        if has_effects(op):
            if last_effect is not None:
                preds.add(last_effect)
            last_effect = i
        waiting[i] = len(preds)
        for j in preds:
            users[j].append(i)
    ready = [i for i, n in enumerate(waiting) if n == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in users[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, j)
    if len(order) < len(ops):
        import networkx as nx

        cycle = nx.find_cycle(dependency_graph(block))
        names = " -> ".join(f"{ops[a].name} (op {a})" for a, _ in cycle)
        raise RuntimeError(f"internal error: a rewrite created a dependency cycle: {names}")
    block.ops[:] = [ops[i] for i in order]
    return True


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
    if attrs:
        try:
            hash(attrs)  # plain literals (the common case) hash as they are
        except TypeError:
            attrs = freeze(op.attrs)
    return (op.name, tuple(op.operands), attrs, tuple([(r.type.shape, r.type.dtype) for r in op.results]))


def blocks(blocks_in: Iterable[Block]) -> Iterator[Block]:
    """Every block given and, depth first, the regions of their ops."""
    for b in blocks_in:
        yield b
        for op in [op for op in b.ops if op.regions]:
            yield from blocks(op.regions)


def all_blocks(module: Module) -> list[Block]:
    """Every block of every function in `module`."""
    return list(blocks(f.body for f in module.funcs))


def all_values(module: Module) -> Iterator[Value]:
    """Every value of `module`: block arguments and op results, in program order."""
    for block in all_blocks(module):
        yield from block.args
        for op in block.ops:
            yield from op.results
