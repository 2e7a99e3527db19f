"""Text to IR: the exact inverse of the printer.

A recursive-descent parser over the tokens of `lexer`. Attributes are rebuilt from literals and the
whitelists in `attributes`; nothing is evaluated. Every problem, syntax or meaning, raises
`ParseError` (a ValueError) carrying the line and column and a caret under the spot.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import attributes as A
from .attr_spec import attrs_problem
from .attributes import SymbolRef
from .lexer import (INT, LOCALITIES, EscapeError, ParseError, Tokens, int_problem, shape_problem,
                    unescape, whole_type)
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
        self.toks = Tokens(text, filename)
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
        tok = self.toks[self.i]
        k, t, _ = tok
        if (kind is None or k == kind) and (text is None or (t == text and k != "string")):
            if k != "eof":
                self.i += 1
            return tok
        want = repr(text) if text else kind
        raise self.error(f"expected {want}, found {repr(t) if k != 'eof' else 'end of input'}")

    def accept(self, text: str) -> bool:
        k, t, _ = self.toks[self.i]
        if t == text and k != "string":
            self.i += 1
            return True
        return False

    def same_line(self, a: int, b: int) -> bool:
        return self.text.find("\n", a, b) < 0

    def enter(self):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error(f"nesting deeper than {MAX_DEPTH}")

    def integer(self, text: str, pos: int, what: str = "", minimum: int | None = None) -> int:
        """The integer literal `text` at `pos`: a ParseError unless it fits 64 bits (and `minimum`)."""
        if not INT.match(text):
            raise self.error(f"{what} must be an integer, not {text}", pos)
        problem = int_problem(text)
        if problem:
            raise self.error(problem, pos)
        value = int(text)
        if minimum is not None and value < minimum:
            raise self.error(f"{what} must be >= {minimum}, not {text}", pos)
        return value

    def string(self, text: str, pos: int) -> str:
        """The string literal `text` at `pos`, escapes resolved (a bad one is a ParseError)."""
        try:
            return unescape(text)
        except EscapeError as e:
            raise self.error(str(e), pos + e.offset) from None

    def sized(self, ty: TensorType, pos: int) -> TensorType:
        problem = shape_problem(ty.shape, ty.dtype)
        if problem:
            raise self.error(problem, pos)
        return ty

    # --- types and attributes --------------------------------------------------------------
    def parse_type(self) -> TensorType:
        kind, text, pos = self.toks[self.i]
        if kind == "type":  # the common case, lexed whole: `f32[2,3] per_replica`
            self.i += 1
            ty = self.types.get(text)
            if ty is None:
                ty = self.types[text] = self.sized(whole_type(text), pos)
            return self.parse_type_suffix(ty)
        _, name, pos = self.expect(kind="ident")
        if name not in DTYPES:
            raise self.error(f"unknown dtype {name!r}", pos)
        self.expect("[")
        dims = []
        while not self.peek("]"):
            self.toks.release(self.i)
            _, d, dpos = self.expect(kind="number")
            dims.append(self.integer(d, dpos, "a dimension", minimum=0))
            if not self.accept(","):
                break
        self.expect("]")
        return self.parse_type_suffix(self.sized(TensorType(tuple(dims), DTYPES[name]), pos))

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
            device = self.integer(d, pos, "a logical device", minimum=0)
            self.expect("]")
            return Sharding("device", device=device)
        dims = []
        while not self.peek("]"):
            self.toks.release(self.i)
            self.expect("{")
            axes = []
            while not self.peek("}"):
                self.toks.release(self.i)
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
            self.toks.release(self.i)
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

    def parse_scalar(self, kind: str) -> Any:
        """One element of a dense literal of dtype kind `kind` ("b", "i", "u", "f" or "c"): true
        or false for booleans, an integer for integer dtypes, a number for floating ones, and a
        number or `(re, im)` for complex ones; nothing is rounded or truncated silently."""
        pos = self.toks[self.i][2]
        if kind == "c" and self.peek("("):
            self.next()
            re_, im = self.parse_scalar("f"), None
            self.expect(",")
            im = self.parse_scalar("f")
            self.expect(")")
            return complex(re_, im)
        v = self.parse_attr()
        if kind == "b":
            ok = isinstance(v, bool)
        elif kind in "iu":
            ok = isinstance(v, int) and not isinstance(v, bool)
        else:
            ok = isinstance(v, (int, float)) and not isinstance(v, bool)
        if not ok:
            want = {"b": "true or false", "i": "an integer", "u": "an integer", "f": "a number",
                    "c": "a number or (re, im)"}[kind]
            raise self.error(f"expected {want}, not {A.format_attr(v) if v is not None else 'none'}", pos)
        return v

    def parse_dense(self) -> np.ndarray | A.Splat:
        """`dense<T: v, ...>` (an array) or `dense<T: splat v>` (a Splat, however large T is)."""
        self.expect("<")
        tpos = self.toks[self.i][2]
        ty = self.parse_type()
        if ty.locality is not None or ty.sharding is not None:
            raise self.error("a dense literal's type has no locality or sharding", tpos)
        self.expect(":")
        kind = A.dtype_kind(ty.dtype)
        if self.accept("splat"):
            pos = self.toks[self.i][2]
            value = self.fit([self.parse_scalar(kind)], ty, pos)[0]
            self.expect(">")
            return A.Splat(value, ty.shape)
        size = math.prod(ty.shape)
        items = []
        while not self.peek(">"):
            self.toks.release(self.i)
            if len(items) == size:
                raise self.error(f"dense literal of type {ty} needs {size} values, has more")
            items.append(self.parse_scalar(kind))
            if not self.accept(","):
                break
        end = self.toks[self.i][2]
        self.expect(">")
        if len(items) != size:
            raise self.error(f"dense literal of type {ty} needs {size} values, has {len(items)}", tpos)
        return self.fit(items, ty, end).reshape(ty.shape)

    def fit(self, items: list, ty: TensorType, pos: int) -> np.ndarray:
        """`items` as a 1-D array of `ty`'s dtype; a ParseError at `pos` when an integer does not
        fit (floats round to the dtype, as in any literal)."""
        bounds = A.int_bounds(ty.dtype)
        if bounds is not None and items and not bounds[0] <= min(items) <= max(items) <= bounds[1]:
            lo, hi = bounds
            for k, x in enumerate(items):
                if not lo <= x <= hi:
                    which = f"element {k}" if len(items) > 1 else "the value"
                    raise self.error(f"{which} of the dense literal, {x}, does not fit "
                                     f"{A.dtype_name(ty.dtype)} ({lo}..{hi})", pos)
        return np.array(items, dtype=ty.dtype)

    def parse_attr(self) -> Any:
        kind, text, pos = self.next()
        if kind == "number":
            if INT.match(text):  # up to 18 characters always fit 64 bits
                return int(text) if len(text) <= 18 else self.integer(text, pos)
            return float(text)
        if kind == "string":
            return self.string(text, pos)
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
                self.toks.release(self.i)
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
        if name == "primitive":  # #primitive<"ge">: a JAX primitive, by name
            self.expect("<")
            kind, text, spos = self.next()
            if kind != "string":
                raise self.error(f"expected a primitive's name in quotes, found {text!r}", spos)
            prim = A.find_primitive(self.string(text, spos))
            if prim is None:
                raise self.error(f"unknown primitive {text}", spos)
            self.expect(">")
            return prim
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
            self.toks.release(self.i)
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
            self.toks.release(self.i)
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
