"""Text to IR: the exact inverse of the printer.

A recursive-descent parser over the tokens of `lexer`. Attributes are rebuilt from literals and the
whitelists in `attributes`; nothing is evaluated. Every problem, syntax or meaning, raises
`ParseError` (a ValueError) carrying the line and column and a caret under the spot.
"""
from __future__ import annotations

import bisect
import re
from typing import Any

import numpy as np

from . import attributes as A
from .attr_spec import attrs_problem
from .attributes import SymbolRef
from .lexer import INT, LOCALITIES, ParseError, lex, unescape, whole_type
from .opdefs import MODULE_ATTRS, VAR_ATTRS, lookup
from .ops import Block, Func, Location, Module, Operation, VarDecl
from .sharding import KINDS as SHARDING_KINDS, Sharding
from .types import DTYPES, TensorType
from .values import Value
from .verifier import op_problem

MAX_DEPTH = 100


class _Parser:
    def __init__(self, text: str, filename: str, positions: dict[int, int] | None = None):
        self.text, self.filename, self.positions = text, filename, positions
        self.toks = lex(text, filename)
        self.line_starts = [m.end() for m in re.finditer("\n", text)]
        self.types: dict[str, TensorType] = {}
        self.locs: dict[str, Location] = {}
        self.i = 0
        self.depth = 0

    # --- token helpers -------------------------------------------------------------------
    def error(self, message: str, pos: int | None = None) -> ParseError:
        return ParseError(message, self.text, self.toks[self.i][2] if pos is None else pos,
                          self.filename)

    def peek(self, text: str | None = None, kind: str | None = None) -> bool:
        k, t, _ = self.toks[self.i]
        return (kind is None or k == kind) and (text is None or (t == text and k != "string"))

    def next(self) -> tuple[str, str, int]:
        tok = self.toks[self.i]
        if tok[0] != "eof":
            self.i += 1
        return tok

    def expect(self, text: str | None = None, kind: str | None = None) -> tuple[str, str, int]:
        if not self.peek(text, kind):
            k, t, _ = self.toks[self.i]
            want = repr(text) if text else kind
            raise self.error(f"expected {want}, found {repr(t) if k != 'eof' else 'end of input'}")
        return self.next()

    def accept(self, text: str) -> bool:
        if self.peek(text):
            self.i += 1
            return True
        return False

    def line_of(self, pos: int) -> int:
        return bisect.bisect_right(self.line_starts, pos)

    def enter(self):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error(f"nesting deeper than {MAX_DEPTH}")

    # --- types and attributes --------------------------------------------------------------
    def parse_type(self) -> TensorType:
        kind, text, _ = self.toks[self.i]
        if kind == "type":  # the common case, lexed whole: `f32[2,3] per_replica`
            self.i += 1
            ty = self.types.get(text)
            if ty is None:
                ty = self.types[text] = whole_type(text)
            return self.parse_type_suffix(ty)
        _, name, pos = self.expect(kind="ident")
        if name not in DTYPES:
            raise self.error(f"unknown dtype {name!r}", pos)
        self.expect("[")
        dims = []
        while not self.peek("]"):
            _, d, dpos = self.expect(kind="number")
            if not INT.match(d) or int(d) < 0:
                raise self.error(f"dimension must be a non-negative integer, not {d}", dpos)
            dims.append(int(d))
            if not self.accept(","):
                break
        self.expect("]")
        return self.parse_type_suffix(TensorType(tuple(dims), DTYPES[name]))

    def parse_type_suffix(self, ty: TensorType) -> TensorType:
        """The optional locality (unless the type token held it) and sharding after a type."""
        kind, text, _ = self.toks[self.i]
        if kind != "ident":
            return ty
        if ty.locality is None and text in LOCALITIES:
            self.i += 1
            ty = ty.with_locality(LOCALITIES[text])
            kind, text, _ = self.toks[self.i]
        if kind == "ident" and text in SHARDING_KINDS:
            ty = ty.with_sharding(self.parse_sharding())
        return ty

    def parse_sharding(self) -> Sharding:
        """`split[{}, {l0, l1}]`, `replicated` or `device[3]`."""
        kind = self.next()[1]
        if kind == "replicated":
            return Sharding("replicated")
        self.expect("[")
        if kind == "device":
            _, d, pos = self.expect(kind="number")
            if not INT.match(d) or int(d) < 0:
                raise self.error(f"logical device must be a non-negative integer, not {d}", pos)
            self.expect("]")
            return Sharding("device", device=int(d))
        dims = []
        while not self.peek("]"):
            self.expect("{")
            axes = []
            while not self.peek("}"):
                axes.append(self.expect(kind="ident")[1])
                if not self.accept(","):
                    break
            self.expect("}")
            dims.append(tuple(axes))
            if not self.accept(","):
                break
        self.expect("]")
        return Sharding("split", tuple(dims))

    def parse_attr_dict(self, positions: dict[str, int] | None = None) -> dict[str, Any]:
        """`{k = v, ...}`; `positions`, when given, receives each value's offset."""
        self.expect("{")
        attrs: dict[str, Any] = {}
        while not self.peek("}"):
            _, key, pos = self.expect(kind="ident")
            if key in attrs:
                raise self.error(f"attribute {key!r} given twice", pos)
            self.expect("=")
            if positions is not None:
                positions[key] = self.toks[self.i][2]
            attrs[key] = self.parse_attr()
            if not self.accept(","):
                break
        self.expect("}")
        return attrs

    def parse_scalar(self, dtype: np.dtype) -> Any:
        if self.peek("("):  # complex: (re, im)
            self.next()
            re_ = self.parse_attr()
            self.expect(",")
            im = self.parse_attr()
            self.expect(")")
            return complex(re_, im)
        pos = self.toks[self.i][2]
        v = self.parse_attr()
        if isinstance(v, bool) or isinstance(v, (int, float)):
            return v
        raise self.error("expected a number or a boolean", pos)

    def parse_dense(self) -> np.ndarray:
        self.expect("<")
        tpos = self.toks[self.i][2]
        ty = self.parse_type()
        if ty.locality is not None or ty.sharding is not None:
            raise self.error("a dense literal's type has no locality or sharding", tpos)
        self.expect(":")
        size = int(np.prod(ty.shape, dtype=np.int64))
        if self.accept("splat"):
            items = [self.parse_scalar(ty.dtype)] * size
        else:
            items = []
            while not self.peek(">"):
                items.append(self.parse_scalar(ty.dtype))
                if not self.accept(","):
                    break
        end = self.toks[self.i][2]
        self.expect(">")
        if len(items) != size:
            raise self.error(f"dense literal of type {ty} needs {size} values, has {len(items)}", tpos)
        try:
            return np.array(items, dtype=ty.dtype).reshape(ty.shape)
        except (OverflowError, ValueError, TypeError) as e:
            raise self.error(f"values do not fit {ty}: {e}", end) from None

    def parse_attr(self) -> Any:
        kind, text, pos = self.next()
        if kind == "number":
            return int(text) if INT.match(text) else float(text)
        if kind == "string":
            return unescape(text)
        if kind == "symbol":
            return SymbolRef(text[1:])
        if kind == "ident":
            if text in ("true", "false"):
                return text == "true"
            if text == "none":
                return None
            if text in ("inf", "nan"):
                return float(text)
            if text == "dense":
                return self.parse_dense()
            if text in DTYPES:
                return DTYPES[text]
            raise self.error(f"unknown attribute value {text!r}", pos)
        if kind == "hash":
            return self.parse_hash(text[1:], pos)
        if text in ("(", "["):
            self.enter()
            close = ")" if text == "(" else "]"
            items, trailing = [], False
            while not self.peek(close):
                items.append(self.parse_attr())
                trailing = self.accept(",")
                if not trailing:
                    break
            self.expect(close)
            self.depth -= 1
            if close == ")" and len(items) == 1 and not trailing:
                raise self.error("a one-element tuple is written `(x,)`", pos)
            return tuple(items) if close == ")" else items
        raise self.error(f"expected an attribute value, found {text or 'end of input'!r}", pos)

    def parse_hash(self, name: str, pos: int) -> Any:
        if "." in name:
            cls_name, _, member = name.partition(".")
            cls = A.ENUMS.get(cls_name)
            if cls is None or member not in cls.__members__:
                raise self.error(f"unknown enum value #{name}", pos)
            return cls[member]
        cls = A.RECORDS.get(name)
        if cls is None:
            raise self.error(f"unknown record #{name}", pos)
        fields = self.parse_attr_dict()
        try:
            return cls(**fields)
        except TypeError as e:
            raise self.error(f"bad fields for #{name}: {e}", pos) from None

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
            kind, text, _ = toks[self.i]
            if text == terminator and kind == "ident":
                break
            if kind == "eof":
                raise self.error(f"expected {terminator!r} before end of input")
            ops.append(self.parse_op(scope))
        _, _, tpos = self.next()
        results = []
        if self.peek(kind="value") and self.line_of(self.toks[self.i][2]) == self.line_of(tpos):
            results.append(self.use(scope))
            while self.accept(","):
                results.append(self.use(scope))
        return ops, results

    def parse_region(self) -> Block:
        self.enter()
        scope: dict[str, Value] = {}
        self.expect("^")
        self.expect("(")
        args = self.parse_args(scope)
        self.expect(":")
        ops, results = self.parse_block_body(scope, "yield")
        self.depth -= 1
        return Block(args, ops, results)

    def parse_args(self, scope) -> list[Value]:
        args = []
        while not self.peek(")"):
            tok = self.expect(kind="value")
            self.expect(":")
            args.append(self.define(scope, tok, self.parse_type()))
            if not self.accept(","):
                break
        self.expect(")")
        return args

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
                i += 2
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
                i += 1
                if toks[i][1] != "," or toks[i][0] != "punct":
                    break
                i += 1
        self.i = i
        attr_pos: dict[str, int] = {}
        attrs = self.parse_attr_dict(attr_pos) if self.peek("{") else {}
        regions = []
        if self.accept("("):
            self.expect("{")
            regions.append(self.parse_region())
            self.expect("}")
            while self.accept(","):
                self.expect("{")
                regions.append(self.parse_region())
                self.expect("}")
            self.expect(")")
        types = []
        if result_toks:
            self.expect(":")
            types.append(self.parse_type())
            for _ in result_toks[1:]:
                self.expect(",")
                types.append(self.parse_type())
        loc = None
        kind, text, _ = self.toks[self.i]
        if kind == "loc":  # the common case, lexed whole: `loc("train.py":18)`
            self.i += 1
            loc = self.locs.get(text)
            if loc is None:
                file, _, ln = text[4:-1].rpartition(":")
                loc = self.locs[text] = Location(unescape(file), int(ln))
        elif text == "loc" and kind == "ident" and self.toks[self.i + 1][1] == "(":
            self.next()
            self.next()
            file = unescape(self.expect(kind="string")[1])
            self.expect(":")
            _, ln, lpos = self.expect(kind="number")
            if not INT.match(ln):
                raise self.error("a location's line is an integer", lpos)
            self.expect(")")
            loc = Location(file, int(ln))
        results = [self.define(scope, t, ty) for t, ty in zip(result_toks, types)]
        op = Operation(name, operands, results, attrs, regions, loc)
        if self.positions is not None:
            self.positions[id(op)] = start
        problem = op_problem(op, opdef)
        if problem:
            message, attr = problem
            raise self.error(f"{name}: {message}", attr_pos.get(attr, start))
        return op

    def check_attrs(self, what: str, attrs: dict, specs, positions: dict[str, int], pos: int,
                    strict: bool = True) -> None:
        problem = attrs_problem(attrs, specs, strict)
        if problem:
            message, attr = problem
            raise self.error(f"{what}: {message}", positions.get(attr, pos))

    def parse_func(self) -> Func:
        self.expect("func")
        name = self.expect(kind="symbol")[1][1:]
        self.expect("(")
        scope: dict[str, Value] = {}
        args = self.parse_args(scope)
        self.expect("->")
        self.expect("(")
        rtypes = []
        while not self.peek(")"):
            rtypes.append(self.parse_type())
            if not self.accept(","):
                break
        self.expect(")")
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
        return _Parser(text, filename, positions).parse_module()
    except RecursionError:
        raise ParseError("input nests too deeply", text, 0, filename) from None
