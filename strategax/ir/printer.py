"""IR to text. `parser.parse` is its exact inverse: parse(print(m)) prints identically."""
from __future__ import annotations

import re
from .attributes import format_attr, format_string, set_block_printer
from .ops import Block, Func, Module, Operation, set_printer
from .values import Value

_NAME_OK = re.compile(r"[A-Za-z0-9_.]+\Z")


class _Names:
    """Per-print names: a value keeps its hint when free, else gets a fresh suffix or number."""

    def __init__(self):
        self.names: dict[int, str] = {}
        self.used: set[str] = set()
        self.counter = 0

    def define(self, v: Value) -> str:
        hint = v.name if v.name and _NAME_OK.match(v.name) else None
        if hint is None:
            while str(self.counter) in self.used:
                self.counter += 1
            name = str(self.counter)
        else:
            name, k = hint, 0
            while name in self.used:
                k += 1
                name = f"{hint}_{k}"
        self.used.add(name)
        self.names[id(v)] = name
        return "%" + name

    def use(self, v: Value) -> str:
        name = self.names.get(id(v))
        return "%" + name if name is not None else "%<undefined>"


def format_attr_dict(attrs: dict) -> str:
    return "{" + ", ".join(f"{k} = {format_attr(v)}" for k, v in attrs.items()) + "}"


class _Printer:
    def __init__(self, op_lines: dict[int, int] | None = None):
        self.lines: list[str] = []
        self.names = _Names()
        self.op_lines = op_lines  # filled with id(op) -> 0-based line index when given
        self.files: dict[str, str] = {}  # a location's file -> its quoted text

    def block_header(self, block: Block) -> str:
        return ", ".join(f"{self.names.define(a)}: {a.type}" for a in block.args)

    def op(self, op: Operation, indent: str) -> None:
        n = self.names
        results = ", ".join(n.define(r) for r in op.results)
        text = indent + (results + " = " if results else "") + op.name
        if op.operands:
            text += " " + ", ".join(n.use(v) for v in op.operands)
        if op.attrs:
            text += " " + format_attr_dict(op.attrs)
        if self.op_lines is not None:
            self.op_lines[id(op)] = len(self.lines)
        if op.regions:
            self.lines.append(text + " ({")
            for i, region in enumerate(op.regions):
                if i:
                    self.lines.append(indent + "}, {")
                self.lines.append(f"{indent}^({self.block_header(region)}):")
                for inner in region.ops:
                    self.op(inner, indent + "  ")
                yielded = ", ".join(n.use(v) for v in region.results)
                self.lines.append(f"{indent}  yield" + (" " + yielded if yielded else ""))
            text = indent + "})"
        if op.results:
            text += " : " + ", ".join(str(r.type) for r in op.results)
        if op.loc is not None:
            file = self.files.get(op.loc.file)
            if file is None:
                file = self.files[op.loc.file] = format_string(op.loc.file)
            text += f" loc({file}:{op.loc.line})"
        self.lines.append(text)

    def func(self, f: Func, indent: str) -> None:
        args = self.block_header(f.body)
        results = ", ".join(str(v.type) for v in f.body.results)
        self.lines.append(f"{indent}func @{f.name}({args}) -> ({results}) {{")
        for op in f.body.ops:
            self.op(op, indent + "  ")
        ret = ", ".join(self.names.use(v) for v in f.body.results)
        self.lines.append(f"{indent}  return" + (" " + ret if ret else ""))
        self.lines.append(indent + "}")


def print_module(m: Module, op_lines: dict[int, int] | None = None) -> str:
    """The module's text, ending with a newline; `op_lines` collects each op's line index."""
    p = _Printer(op_lines)
    head = f"module @{m.name}"
    if m.attrs:
        head += " attributes " + format_attr_dict(m.attrs)
    p.lines.append(head + " {")
    for v in m.vars:
        line = f"  var @{v.name} : {v.type}"
        if v.attrs:
            line += " " + format_attr_dict(v.attrs)
        p.lines.append(line)
    for f in m.funcs:
        p.names = _Names()
        p.func(f, "  ")
    p.lines.append("}")
    return "\n".join(p.lines) + "\n"


def print_block(block: Block) -> str:
    """`{^(%a: T): ops yield %r}`, names of its own: a sub-program attribute's text."""
    p = _Printer()
    p.lines.append(f"{{^({p.block_header(block)}):")
    for op in block.ops:
        p.op(op, "  ")
    yielded = ", ".join(p.names.use(v) for v in block.results)
    p.lines.append("  yield" + (" " + yielded if yielded else "") + "}")
    return "\n".join(p.lines)


set_printer(print_module)
set_block_printer(print_block)
