"""Structural checks: every op matches its declaration (arity, attributes, regions), values are
defined before use, regions are isolated, functions return what they declare, symbols exist,
variables and the module carry well-formed attributes."""
from __future__ import annotations

from .attr_spec import attrs_problem
from .attr_values import SymbolRef
from .opdefs import MODULE_ATTRS, VAR_ATTRS, OpDef, lookup
from .ops import Block, Module, Operation
from .printer import print_module


class VerifyError(ValueError):
    """A malformed module; the message reprints the IR around the bad op (kept as `.op`)."""

    op: Operation | None = None


def _error(module: Module, op: Operation, message: str) -> VerifyError:
    e = VerifyError(_excerpt(module, op, message))
    e.op = op
    return e


def op_problem(op: Operation, opdef: OpDef) -> tuple[str, str | None] | None:
    """Arity, attributes and the op's own check: (message, offending attribute or None), or None."""
    problem = (_count_problem("operands", opdef.num_operands, op.operands)
               or _count_problem("results", opdef.num_results, op.results)
               or _count_problem("regions", opdef.num_regions, op.regions))
    if problem is None and opdef.attrs is not None:
        problem = attrs_problem(op.attrs, opdef.attrs, strict=not opdef.open_attrs)
    if problem is None and opdef.verify is not None:
        message = opdef.verify(op)
        problem = (message, None) if message else None
    return problem


def _count_problem(kind: str, want: int | None, items: list) -> tuple[str, None] | None:
    if want is None or want == len(items):
        return None
    return f"expects {want} {kind}, has {len(items)}", None


def verify_op_shape(op: Operation, opdef: OpDef) -> str | None:
    """`op_problem`'s message alone."""
    problem = op_problem(op, opdef)
    return problem[0] if problem else None


def _excerpt(module: Module, bad: Operation, message: str) -> str:
    """The module text with the bad op's line marked, a few lines either side."""
    op_lines: dict[int, int] = {}
    lines = print_module(module, op_lines).splitlines()
    where = op_lines.get(id(bad))
    if where is None:
        return message
    lo, hi = max(0, where - 3), min(len(lines), where + 4)
    body = []
    for i in range(lo, hi):
        body.append(lines[i])
        if i == where:
            text = lines[i]
            start = len(text) - len(text.lstrip())
            body.append(" " * start + "^" * (len(text) - start) + "  " + message)
    loc = f" (from {bad.loc})" if bad.loc else ""
    return f"{message}{loc}\n" + "\n".join(body)


def verify(module: Module) -> None:
    """Raise VerifyError describing the first problem found in `module`."""
    symbols = {v.name for v in module.vars}
    names = [v.name for v in module.vars] + [f.name for f in module.funcs]
    if len(set(names)) != len(names):
        raise VerifyError(f"module @{module.name} defines a symbol twice")
    if not module.funcs:
        raise VerifyError(f"module @{module.name} has no function")
    problem = attrs_problem(module.attrs, MODULE_ATTRS, strict=False)
    if problem:
        raise VerifyError(f"module @{module.name}: {problem[0]}")
    for v in module.vars:
        problem = attrs_problem(v.attrs, VAR_ATTRS)
        if problem:
            raise VerifyError(f"var @{v.name}: {problem[0]}")

    def check_block(block: Block) -> None:
        defined = set(map(id, block.args))
        for op in block.ops:
            opdef = lookup(op.name)
            problem = f"unknown op {op.name!r}" if opdef is None else None
            for v in op.operands:
                if problem is None and id(v) not in defined:
                    problem = f"operand {v!r} is used before it is defined (or comes from outside the region)"
            if problem is None and opdef is not None:
                problem = verify_op_shape(op, opdef)
            for key, val in op.attrs.items():
                if problem is None and isinstance(val, SymbolRef) and val.name not in symbols:
                    problem = f"attribute {key} refers to unknown symbol @{val.name}"
            if problem:
                raise _error(module, op, f"{op.name}: {problem}")
            for region in op.regions:
                check_block(region)
            for r in op.results:
                if id(r) in defined:
                    raise _error(module, op, f"{op.name}: result defined twice")
                defined.add(id(r))
        for v in block.results:
            if id(v) not in defined:
                raise VerifyError(f"block yields {v!r}, which is not defined in it")

    for f in module.funcs:
        check_block(f.body)
