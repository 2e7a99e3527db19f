"""One declaration per op, read by the printer, parser, verifier, passes and backends.

An `OpDef` says an op's arity, its attributes (kinds and allowed values), its regions, how
its result locality follows from its operands, its effects (reads or writes a variable) and
any extra verification. The dialects (`strategax.dialects`) declare the ops and keep each
op's JAX primitive and lowering rules beside its declaration; generic `jax.<primitive>` ops
are declared on first use by a resolver the dialects register.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from .attr_spec import Attr
from .ops import Block, Operation
from .types import Locality

LocalityRule = Callable[[Operation, Sequence[Locality]], Sequence[Locality]]

# Effects an op may declare. Ops with effects keep their order relative to each other; an op
# that writes is never removed. Collectives are not effects in the IR: every replica runs the
# same program, so an unused collective may go and two equal ones may merge.
READS_VARIABLE = "reads_variable"
WRITES_VARIABLE = "writes_variable"
_WRITES = frozenset({WRITES_VARIABLE})


def join_operands(op: Operation, localities: Sequence[Locality]) -> list[Locality]:
    """Default locality: per_replica if any operand is, else mirrored."""
    loc = Locality.PER_REPLICA if Locality.PER_REPLICA in localities else Locality.MIRRORED
    return [loc] * len(op.results)


@dataclass(frozen=True)
class OpDef:
    name: str
    summary: str
    num_operands: int | None = None  # None: any number
    num_results: int | None = None
    num_regions: int | None = 0  # None: any number
    attrs: Mapping[str, Attr] | None = None  # None: not declared (a generic JAX op's parameters)
    open_attrs: bool = False  # other (undeclared) attributes are allowed too
    locality: LocalityRule = join_operands
    verify: Callable[[Operation], str | None] | None = None  # returns an error message or None
    is_collective: bool = False
    effects: frozenset[str] = frozenset()
    primitive: Any = None  # the JAX primitive a generic op re-binds (ir/ knows no JAX type)
    # a collective's traffic class (a key of TRAFFIC): what `collective_stats` charges for it
    traffic: str | None = None
    # with one replica (and several logical devices) lowering may run the op as the identity:
    # result i is operand i (a reduction or gather over one replica)
    identity_on_one_replica: bool = False


# Traffic classes: bytes each replica sends for a collective whose results hold B bytes, with N
# replicas and ring algorithms. "reduce": an all-reduce, 2(N-1)/N x B; "gather": an all-gather,
# (N-1)/N x B; "broadcast": one replica's value to all, lowered as a tree of point-to-point
# sends in which every other replica receives it once, (N-1)/N x B per replica on average;
# "scatter": a reduce-scatter whose result is this replica's 1/N piece of the reduction,
# (N-1) x B (the ring's (N-1)/N of the N x B reduced).
TRAFFIC: dict[str, Callable[[int, int], int]] = {
    "scatter": lambda nbytes, n: nbytes * (n - 1),
    "reduce": lambda nbytes, n: 2 * nbytes * (n - 1) // n,
    "gather": lambda nbytes, n: nbytes * (n - 1) // n,
    "broadcast": lambda nbytes, n: nbytes * (n - 1) // n,
}


OP_DEFS: dict[str, OpDef] = {}
_RESOLVERS: list[Callable[[str], OpDef | None]] = []


def declare(opdef: OpDef) -> OpDef:
    OP_DEFS[opdef.name] = opdef
    return opdef


def add_resolver(resolve: Callable[[str], OpDef | None]) -> None:
    """Declare ops on demand: `resolve(name)` returns a declaration for an undeclared name (or None)."""
    _RESOLVERS.append(resolve)


class UndeclaredOpError(ValueError):
    """An op that no dialect declares reached code that needs its declaration."""


def declaration(op: Operation) -> OpDef:
    """The declaration of `op`; raises UndeclaredOpError naming the op (and its line) if none."""
    opdef = lookup(op.name)
    if opdef is None:
        where = f" at {op.loc}" if op.loc is not None else ""
        raise UndeclaredOpError(f"op {op.name!r}{where} is declared by no dialect: strategax does not know "
                                "what it computes (a typo, or a dialect that was not imported)")
    return opdef


def lookup(name: str) -> OpDef | None:
    """The declaration of op `name`, or None if there is no such op."""
    opdef = OP_DEFS.get(name)
    if opdef is None:
        for resolve in _RESOLVERS:
            opdef = resolve(name)
            if opdef is not None:
                return declare(opdef)
    return opdef


# --- what other packages declare about symbols and modules -----------------------------------
VAR_ATTRS: dict[str, Attr] = {}  # the attributes of `var @x : T {...}` declarations
MODULE_ATTRS: dict[str, Attr] = {  # the known module attributes (others are allowed)
    "num_replicas": Attr("int", required=False, minimum=1),
    "parameter_replica": Attr("int", required=False, minimum=0),  # CentralStorageStrategy's
    "logical_axes": Attr("mesh", required=False),  # ((name, size), ...): TPUStrategy's logical mesh
}


# --- effects: one definition, read by every pass ---------------------------------------------
def op_effects(op: Operation) -> frozenset[str]:
    """What `op` does beyond computing its results: its declared effects and those of the ops
    in its regions. An op that returns nothing exists for its effect: it writes."""
    opdef = OP_DEFS.get(op.name) or lookup(op.name)
    effects = opdef.effects if opdef is not None else _WRITES
    if not op.results:
        effects = effects | _WRITES
    for region in op.regions:
        for inner in region.ops:
            effects = effects | op_effects(inner)
    return effects


def has_effects(op: Operation) -> bool:
    """Whether `op`'s place among other effectful ops matters (it reads or writes)."""
    return bool(op_effects(op))


def is_pure(op: Operation) -> bool:
    """No effects at all: it may be removed when unused and merged with an equal op."""
    return not op_effects(op)


def may_write(op: Operation) -> bool:
    """Whether `op` (or an op in its regions) writes: it must never be removed."""
    return WRITES_VARIABLE in op_effects(op)


def is_collective(op: Operation) -> bool:
    opdef = lookup(op.name)
    return opdef is not None and opdef.is_collective


def has_collective(blocks: Block | Iterable[Block]) -> bool:
    """Whether any op in `blocks` (regions included) communicates across replicas."""
    for block in ([blocks] if isinstance(blocks, Block) else blocks):
        if any(is_collective(op) for op in block.walk()):
            return True
    return False
