"""Text to IR: the exact inverse of the printer.

A recursive-descent parser over the tokens of `lexer`; `reader.Reader` reads the types and the
attributes (plain data, by the kinds in `attributes`); nothing is evaluated. Every problem,
syntax or meaning, raises `ParseError` (a ValueError) carrying the line and column and a caret
under the spot.
"""
from __future__ import annotations

from .attr_spec import attrs_problem
from .lexer import ParseError
from .opdefs import MODULE_ATTRS, VAR_ATTRS, lookup
from .ops import Block, Func, Location, Module, Operation, VarDecl
from .reader import Reader
from .types import TensorType
from .values import Value
from .verifier import op_problem


class Parser(Reader):
    """Ops, blocks, functions and modules, over the `Reader`'s tokens, types and attributes."""

    def __init__(self, text: str, filename: str, positions: dict[int, int] | None = None):
        super().__init__(text, filename)
        self.positions = positions
        self.locs: dict[str, Location] = {}

    # --- ops, blocks, functions ---------------------------------------------------------
    def define(self, scope: dict[str, Value], tok: tuple[str, str, int], ty: TensorType) -> Value:
        name = tok[1][1:]
        if name in scope:
            raise self.error(f"value %{name} is defined twice", tok[2])
        scope[name] = v = Value(ty, name)
        return v

    def use(self, scope: dict[str, Value]) -> Value:
        _, text, pos = self.expect(kind="value")
        v = scope.get(text[1:])
        if v is None:
            raise self.error(f"use of undefined value {text}", pos)
        return v

    def parse_block_body(self, scope, terminator: str) -> tuple[list[Operation], list[Value]]:
        ops = []
        toks = self.toks
        while True:
            toks.release(self.i)
            kind, text, _ = toks[self.i]
            if text == terminator and kind == "ident":
                break
            if kind == "eof":
                raise self.error(f"expected {terminator!r} before end of input")
            ops.append(self.parse_op(scope))
        _, _, tpos = self.next()
        results = []
        if self.peek(kind="value") and self.same_line(tpos, self.toks[self.i][2]):
            results.append(self.use(scope))
            while self.accept(","):
                self.toks.release(self.i)
                results.append(self.use(scope))
        return ops, results

    def parse_region(self) -> Block:
        """`{^(%a: T, ...): ops yield %r, ...}`"""
        self.enter()
        scope: dict[str, Value] = {}
        self.expect("{")
        self.expect("^")
        self.expect("(")
        args = self.parse_args(scope)
        self.expect(":")
        ops, results = self.parse_block_body(scope, "yield")
        self.expect("}")
        self.leave()
        return Block(args, ops, results)

    def parse_args(self, scope) -> list[Value]:
        """`%a: T, ...)`"""
        def arg() -> Value:
            tok = self.expect(kind="value")
            self.expect(":")
            return self.define(scope, tok, self.parse_type())
        return self.comma_list(")", arg)

    def parse_op(self, scope) -> Operation:
        toks, i = self.toks, self.i
        start = toks[i][2]
        result_toks = []
        if toks[i][0] == "value":
            result_toks.append(toks[i])
            i += 1
            while toks[i][1] == "," and toks[i][0] == "punct":
                if toks[i + 1][0] != "value":
                    self.i = i + 1
                    self.expect(kind="value")
                result_toks.append(toks[i + 1])
                self.i = i = i + 2
                toks.release(i)
            self.i = i
            self.expect("=")
            i = self.i
        kind, name, npos = toks[i]
        if kind != "ident":
            self.expect(kind="ident")
        opdef = lookup(name)
        if opdef is None:
            raise self.error(f"unknown op {name!r}", npos)
        i += 1
        operands = []
        # operands sit on the op's line (a value on the next line starts the next op)
        if toks[i][0] == "value" and self.text.find("\n", npos, toks[i][2]) < 0:
            while True:
                kind, text, pos = toks[i]
                if kind != "value":
                    self.i = i
                    self.expect(kind="value")
                v = scope.get(text[1:])
                if v is None:
                    raise self.error(f"use of undefined value {text}", pos)
                operands.append(v)
                self.i = i = i + 1
                toks.release(i)
                if toks[i][1] != "," or toks[i][0] != "punct":
                    break
                i += 1
        self.i = i
        attr_pos: dict[str, int] = {}
        attrs = self.parse_attr_dict(attr_pos) if self.peek("{") else {}
        regions = []
        if self.accept("("):
            if not self.peek("{"):
                self.expect("{")
            regions = self.comma_list(")", self.parse_region)
        types = []
        if result_toks:
            self.expect(":")
            types.append(self.parse_type())
            for _ in result_toks[1:]:
                self.toks.release(self.i)
                self.expect(",")
                types.append(self.parse_type())
        loc = None
        kind, text, lpos = self.toks[self.i]
        if kind == "loc":  # the common case, lexed whole: `loc("train.py":18)`
            self.i += 1
            loc = self.locs.get(text)
            if loc is None:
                file, _, ln = text[4:-1].rpartition(":")
                line = self.integer(ln, lpos + 4 + len(file) + 1, "a location's line")
                loc = self.locs[text] = Location(self.string(file, lpos + 4), line)
        elif text == "loc" and kind == "ident" and self.toks[self.i + 1][1] == "(":
            self.next()
            self.next()
            _, file, fpos = self.expect(kind="string")
            file = self.string(file, fpos)
            self.expect(":")
            _, ln, lpos = self.expect(kind="number")
            line = self.integer(ln, lpos, "a location's line")
            self.expect(")")
            loc = Location(file, line)
        results = [self.define(scope, t, ty) for t, ty in zip(result_toks, types)]
        op = Operation(name, operands, results, attrs, regions, loc)
        if self.positions is not None:
            self.positions[id(op)] = start
        problem = op_problem(op, opdef)
        if problem:
            message, attr = problem
            raise self.error(f"{name}: {message}", start if attr is None else attr_pos.get(attr, start))
        return op

    def check_attrs(self, what: str, attrs: dict, specs, positions: dict[str, int], pos: int,
                    strict: bool = True) -> None:
        problem = attrs_problem(attrs, specs, strict)
        if problem:
            message, attr = problem
            raise self.error(f"{what}: {message}", pos if attr is None else positions.get(attr, pos))

    def parse_func(self) -> Func:
        self.expect("func")
        name = self.expect(kind="symbol")[1][1:]
        self.expect("(")
        scope: dict[str, Value] = {}
        args = self.parse_args(scope)
        self.expect("->")
        self.expect("(")
        rtypes = self.comma_list(")", self.parse_type)
        self.expect("{")
        ops, results = self.parse_block_body(scope, "return")
        ret_pos = self.toks[self.i][2]
        self.expect("}")
        got = [v.type for v in results]
        if got != rtypes:
            raise self.error(f"@{name} returns ({', '.join(map(str, got))}) but declares "
                             f"({', '.join(map(str, rtypes))})", ret_pos)
        return Func(name, Block(args, ops, results))

    def parse_module(self) -> Module:
        self.expect("module")
        name = self.expect(kind="symbol")[1][1:]
        attrs, attr_pos = {}, {}
        pos = self.toks[self.i][2]
        if self.accept("attributes"):
            attrs = self.parse_attr_dict(attr_pos)
            self.check_attrs(f"module @{name}", attrs, MODULE_ATTRS, attr_pos, pos, strict=False)
        self.expect("{")
        m = Module(name, attrs)
        seen = set()
        while not self.peek("}"):
            pos = self.toks[self.i][2]
            if self.accept("var"):
                vname = self.expect(kind="symbol")[1][1:]
                self.expect(":")
                ty = self.parse_type()
                attr_pos = {}
                vattrs = self.parse_attr_dict(attr_pos) if self.peek("{") else {}
                self.check_attrs(f"var @{vname}", vattrs, VAR_ATTRS, attr_pos, pos)
                if vname in seen:
                    raise self.error(f"symbol @{vname} is defined twice", pos)
                seen.add(vname)
                m.vars.append(VarDecl(vname, ty, vattrs))
            elif self.peek("func"):
                f = self.parse_func()
                if f.name in seen:
                    raise self.error(f"symbol @{f.name} is defined twice", pos)
                seen.add(f.name)
                m.funcs.append(f)
            else:
                k, t, _ = self.toks[self.i]
                raise self.error(f"expected 'var', 'func' or '}}', found {'end of input' if k == 'eof' else repr(t)}")
        self.expect("}")
        self.expect(kind="eof")
        if not m.funcs:
            raise self.error("a module needs at least one func", 0)
        return m


def parse(text: str, filename: str = "<string>", positions: dict[int, int] | None = None) -> Module:
    """Parse IR text into a Module; raises ParseError (with line and column) on bad input.

    `positions`, when given, receives id(op) -> offset of the op in `text` (for diagnostics)."""
    if not isinstance(text, str):
        raise TypeError(f"parse() takes IR text (str), not {type(text).__name__}")
    try:
        return Parser(text, filename, positions).parse_module()
    except RecursionError:
        raise ParseError("input nests too deeply", text, 0, filename) from None
