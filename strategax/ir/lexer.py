"""The IR text's tokens: a regex lexer, the whole-type and string-literal readers, and
`ParseError`, which every problem in the text raises with its line, column and a caret."""
from __future__ import annotations

import re

from .types import DTYPES, Locality, TensorType

# Each match is the whitespace and comments before a token (consumed atomically), then the token.
_TOKEN = re.compile(r"""
 (?:[ \t\r\n]+|//[^\n]*)*+
 (?:(?P<value>%[A-Za-z0-9_.]+)
 | (?P<symbol>@[A-Za-z0-9_.]+)
 | (?P<hash>\#[A-Za-z_][A-Za-z0-9_.]*)
 | (?P<number>-?(?:\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\d+)|-inf)
 | (?P<string>"(?:[^"\\\n]|\\.)*")
 | (?P<loc>loc\("(?:[^"\\\n]|\\.)*":\d+\))
 | (?P<type>(?:DTYPE_NAMES)\[(?:\d+(?:,\d+)*)?\](?:\ (?:per_replica|mirrored)(?![A-Za-z0-9_.\-]))?)
 | (?P<ident>[A-Za-z_][A-Za-z0-9_.\-]*)
 | (?P<punct>->|[{}()\[\],:=^<>])
 | (?P<bad>.)
 | (?P<eof>\Z))
""".replace("DTYPE_NAMES", "|".join(sorted(DTYPES, key=len, reverse=True))), re.VERBOSE | re.DOTALL)
INT = re.compile(r"-?\d+\Z")
LOCALITIES = {loc.value: loc for loc in Locality}


class ParseError(ValueError):
    """Malformed IR text; `line` and `col` are 1-based."""

    def __init__(self, message: str, text: str = "", pos: int = 0, filename: str = "<string>"):
        self.message, self.filename = message, filename
        self.line = text.count("\n", 0, pos) + 1
        start = text.rfind("\n", 0, pos) + 1
        end = text.find("\n", pos)
        self.source_line = text[start:end if end >= 0 else len(text)]
        self.col = pos - start + 1
        super().__init__(self.format())

    def format(self) -> str:
        caret = " " * (self.col - 1) + "^"
        return f"{self.filename}:{self.line}:{self.col}: {self.message}\n{self.source_line}\n{caret}"


def lex(text: str, filename: str) -> list[tuple[str, str, int]]:
    """(kind, text, offset) per token, ending with an `eof` token."""
    tokens = []
    append = tokens.append
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        token = m.group(kind)
        if kind == "eof":
            break
        if kind == "bad":
            raise ParseError(f"unexpected character {token!r}", text, m.end() - 1, filename)
        append((kind, token, m.end() - len(token)))
    append(("eof", "", len(text)))
    return tokens


def whole_type(text: str) -> TensorType:
    """A type token `f32[2,3]` or `f32[2,3] mirrored` (already checked by the lexer)."""
    name, _, rest = text.partition("[")
    dims, _, locality = rest.partition("]")
    shape = tuple(int(d) for d in dims.split(",")) if dims else ()
    return TensorType(shape, DTYPES[name], LOCALITIES[locality.strip()] if locality else None)


def unescape(s: str) -> str:
    """The text of a quoted string literal, escapes resolved."""
    if "\\" not in s:
        return s[1:-1]
    out, i = [], 1
    while i < len(s) - 1:
        ch = s[i]
        if ch == "\\":
            nxt = s[i + 1]
            if nxt == "x":
                out.append(chr(int(s[i + 2:i + 4], 16)))
                i += 4
                continue
            out.append({"n": "\n", "t": "\t", "r": "\r"}.get(nxt, nxt))
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)
