"""The IR's containers: operations, blocks, functions, variables and modules."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from .types import TensorType
from .values import Value


@dataclass(frozen=True, slots=True)
class Location:
    """The user's source line an op came from: `loc("train.py":18)`."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(eq=False, slots=True)
class Block:
    """A straight-line list of ops with arguments and the values it yields."""

    args: list[Value] = field(default_factory=list)
    ops: list["Operation"] = field(default_factory=list)
    results: list[Value] = field(default_factory=list)

    def walk(self) -> Iterator["Operation"]:
        """Every op in this block and, depth first, in its regions."""
        for op in self.ops:
            yield op
            for region in op.regions:
                yield from region.walk()


@dataclass(eq=False, slots=True)
class Operation:
    """One op: `name` is `jax.<primitive>` or `sx.<op>`; `attrs` hold plain literals."""

    name: str
    operands: list[Value]
    results: list[Value]
    attrs: dict[str, Any] = field(default_factory=dict)
    regions: list[Block] = field(default_factory=list)
    loc: Location | None = None

    @property
    def result(self) -> Value:
        (r,) = self.results
        return r


@dataclass(frozen=True)
class VarDecl:
    """A module-level variable symbol: `var @w1 : f32[256,512] {sync = on_write, agg = none}`."""

    name: str
    type: TensorType
    attrs: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


@dataclass(eq=False)
class Func:
    """A function: its body block's args are the parameters, its results the return values."""

    name: str
    body: Block


@dataclass(eq=False)
class Module:
    """A compilation unit: attributes (e.g. num_replicas), variables and functions."""

    name: str
    attrs: dict[str, Any] = field(default_factory=dict)
    vars: list[VarDecl] = field(default_factory=list)
    funcs: list[Func] = field(default_factory=list)

    @property
    def main(self) -> Func:
        """The entry function: the first one."""
        return self.funcs[0]

    def walk(self) -> Iterator[Operation]:
        """Every op of every function, regions included."""
        for f in self.funcs:
            yield from f.body.walk()

    def __str__(self) -> str:
        return _text_of(self)


def _no_printer(module: Module) -> str:
    raise RuntimeError("import strategax.ir to print a module")


_text_of: Callable[[Module], str] = _no_printer


def set_printer(print_module: Callable[[Module], str]) -> None:
    """Give `str(module)` its printer (`printer.py` registers it: the printer imports this
    module, so this module does not import the printer)."""
    global _text_of
    _text_of = print_module
