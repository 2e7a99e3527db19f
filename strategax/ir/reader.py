"""Reading IR text, the part below ops: the token helpers, comma-separated lists, types with
their locality and sharding, and attribute values (dispatched to `attributes.KINDS`).
`parser.Parser` builds ops, blocks, functions and modules on top of it."""
from __future__ import annotations

from typing import Any, Callable, TypeVar

from .attributes import PARSERS
from .lexer import INT, LOCALITIES, EscapeError, ParseError, Tokens, int_problem, shape_problem, unescape, whole_type
from .sharding import KINDS as SHARDING_KINDS, Sharding
from .types import DTYPES, TensorType

MAX_DEPTH = 100
T = TypeVar("T")


class Reader:
    """A cursor over the tokens of one text; every problem is a ParseError at a position."""

    def __init__(self, text: str, filename: str):
        self.text, self.filename = text, filename
        self.toks = Tokens(text, filename)
        self.types: dict[str, TensorType] = {}
        self.i = 0
        self.depth = 0
        self.trailing = False  # whether the last comma_list ended with a comma
        self.last_close = 0  # the offset of the token that closed the last comma_list

    # --- tokens ------------------------------------------------------------------------------
    def error(self, message: str, pos: int | None = None) -> ParseError:
        return ParseError(message, self.text, self.pos() if pos is None else pos, self.filename)

    def pos(self) -> int:
        """The offset of the next token."""
        return self.toks[self.i][2]

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

    def comma_list(self, close: str, item: Callable[[], T], into: list | None = None) -> list[T]:
        """`item, item, ...` up to and including the token `close` (a trailing comma allowed:
        `self.trailing` says whether there was one); the items are appended to `into` if given."""
        items = [] if into is None else into
        self.trailing = False
        while not self.peek(close):
            self.toks.release(self.i)
            items.append(item())
            self.trailing = self.accept(",")
            if not self.trailing:
                break
        self.last_close = self.pos()
        self.expect(close)
        return items

    def same_line(self, a: int, b: int) -> bool:
        return self.text.find("\n", a, b) < 0

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error(f"nesting deeper than {MAX_DEPTH}")

    def leave(self) -> None:
        self.depth -= 1

    # --- literals ----------------------------------------------------------------------------
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

    # --- types -------------------------------------------------------------------------------
    def sized(self, ty: TensorType, pos: int) -> TensorType:
        problem = shape_problem(ty.shape, ty.dtype)
        if problem:
            raise self.error(problem, pos)
        return ty

    def parse_type(self) -> TensorType:
        kind, text, pos = self.toks[self.i]
        if kind == "type":  # the common case, lexed whole: `f32[2,3] per_replica`
            self.i += 1
            ty = self.types.get(text)
            if ty is None:
                ty = self.types[text] = self.sized(whole_type(text), pos)
            return self.parse_type_suffix(ty) if self.toks[self.i][0] == "ident" else ty
        _, name, pos = self.expect(kind="ident")
        if name not in DTYPES:
            raise self.error(f"unknown dtype {name!r}", pos)
        self.expect("[")
        dims = self.comma_list("]", self.dimension)
        return self.parse_type_suffix(self.sized(TensorType(tuple(dims), DTYPES[name]), pos))

    def dimension(self) -> int:
        _, d, pos = self.expect(kind="number")
        return self.integer(d, pos, "a dimension", minimum=0)

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
        return Sharding("split", tuple(self.comma_list("]", self.sharded_dimension)))

    def sharded_dimension(self) -> tuple[str, ...]:
        self.expect("{")
        return tuple(self.comma_list("}", lambda: self.expect(kind="ident")[1]))

    def parse_region(self):
        """A block of ops (a sub-program attribute): `parser.Parser` reads them."""
        raise self.error("a sub-program is read only as part of a module")

    # --- attributes --------------------------------------------------------------------------
    def parse_attr(self) -> Any:
        """One attribute value, read by the kind its first token starts (`attributes.KINDS`)."""
        kind, text, pos = self.next()
        parse = PARSERS.get((kind, text)) or PARSERS.get((kind, None))
        if parse is None:
            raise self.error(f"expected an attribute value, found {text or 'end of input'!r}", pos)
        return parse(self, text, pos)

    def parse_attr_dict(self, positions: dict[str, int] | None = None) -> dict[str, Any]:
        """`{k = v, ...}` (a trailing comma allowed); `positions`, when given, receives each
        value's offset. Tokens are read directly; a wrong one is reported by `expect`."""
        self.expect("{")
        attrs: dict[str, Any] = {}
        toks = self.toks
        while True:
            toks.release(self.i)
            kind, key, pos = toks[self.i]
            if kind != "ident":
                if key == "}" and kind == "punct":
                    break
                self.expect(kind="ident")
            if key in attrs:
                raise self.error(f"attribute {key!r} given twice", pos)
            self.i += 1
            kind, text, pos = toks[self.i]
            if text != "=" or kind != "punct":
                self.expect("=")
            self.i += 1
            if positions is not None:
                positions[key] = toks[self.i][2]
            attrs[key] = self.parse_attr()
            kind, text, _ = toks[self.i]
            if text != "," or kind != "punct":
                break
            self.i += 1
        self.expect("}")
        return attrs
