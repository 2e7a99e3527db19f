"""The IR text's tokens: a regex lexer, the whole-type and string-literal readers, and
`ParseError`, which every problem in the text raises with its line, column and a caret."""
from __future__ import annotations

import re
from itertools import islice
from operator import itemgetter

import numpy as np

from .types import DTYPES, Locality, TensorType

# Each match is the whitespace and comments before a token (consumed atomically), then the token.
# The alternatives are tried in order, the most frequent first (a type and `loc(` before an
# identifier, which would take their first word); no two others can start the same way.
_TOKEN = re.compile(r"""
 (?:[ \t\r\n]+|//[^\n]*)*+
 (?:(?P<punct>->|[{}()\[\],:=^<>])
 | (?P<value>%[A-Za-z0-9_.]+)
 | (?P<type>(?:DTYPE_NAMES)\[(?:\d{1,18}(?:,\d{1,18})*)?\](?:\ (?:per_replica|mirrored)(?![A-Za-z0-9_.\-]))?)
 | (?P<loc>loc\("(?:[^"\\\n]|\\.)*+":\d+\))
 | (?P<ident>[A-Za-z_][A-Za-z0-9_.\-]*)
 | (?P<number>-?(?:\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\d+)|-inf)
 | (?P<string>"(?:[^"\\\n]|\\.)*+")
 | (?P<symbol>@[A-Za-z0-9_.]+)
 | (?P<hash>\#[A-Za-z_][A-Za-z0-9_.]*)
 | (?P<bad>.)
 | (?P<eof>\Z))
""".replace("DTYPE_NAMES", "|".join(sorted(DTYPES, key=len, reverse=True))), re.VERBOSE | re.DOTALL)
_KIND = itemgetter(0)  # a token's kind
INT = re.compile(r"-?\d+\Z")
LOCALITIES = {loc.value: loc for loc in Locality}
INT_BITS = 64  # integer literals hold i64 and u64 values
MAX_TYPE_BYTES = 2 ** 63 - 1  # XLA's shape sizes are int64
SHOWN = 1000  # the most characters of a line a ParseError shows


class ParseError(ValueError):
    """Malformed IR text; `line` and `col` are 1-based."""

    def __init__(self, message: str, text: str = "", pos: int = 0, filename: str = "<string>"):
        self.message, self.filename = message, filename
        self.line = text.count("\n", 0, pos) + 1
        start = text.rfind("\n", 0, pos) + 1
        end = text.find("\n", pos)
        end = end if end >= 0 else len(text)
        self.col = pos - start + 1
        # a very long line is shown as the stretch around the column
        lo, hi = start, end
        if end - start > SHOWN:
            lo = max(start, min(pos - SHOWN // 2, end - SHOWN))
            hi = lo + SHOWN
        self.source_line = ("..." if lo > start else "") + text[lo:hi] + ("..." if hi < end else "")
        self._caret_col = pos - lo + (3 if lo > start else 0) + 1
        super().__init__(self.format())

    def format(self) -> str:
        caret = " " * (self._caret_col - 1) + "^"
        return f"{self.filename}:{self.line}:{self.col}: {self.message}\n{self.source_line}\n{caret}"


class Tokens:
    """The tokens of a text, `(kind, text, offset)`, ending with an `eof` token, lexed as the
    parser reads them: `tokens[k]` lexes up to token k, and `release(k)` forgets the tokens
    before k, so parsing holds a window of tokens rather than all of them (memory stays
    linear in the input with a small factor, whatever the input)."""

    CHUNK = 512

    def __init__(self, text: str, filename: str):
        self.text, self.filename = text, filename
        self._matches = _TOKEN.finditer(text)
        self._buf: list[tuple[str, str, int]] = []
        self._base = 0  # the index of _buf[0]
        self._done = False
        self._bad: ParseError | None = None  # a bad character met while lexing ahead

    def __getitem__(self, k: int) -> tuple[str, str, int]:
        j = k - self._base
        try:
            return self._buf[j]
        except IndexError:
            self._fill(j)
            return self._buf[j]

    def _fill(self, j: int) -> None:
        """Lex until token j and a chunk beyond it exist (or the text ends). A character no
        token starts with raises when the parser needs a token at or after it."""
        if j < 0:
            raise RuntimeError(f"internal error: the parser went back to released token {j + self._base}")
        buf, text = self._buf, self.text
        if not self._done and self._bad is None:
            # one comprehension per chunk (the eof token, an empty match at the end, comes last);
            # every alternative of the pattern is a named group, so `lastgroup` is never None
            chunk = [(k, m[k], m.start(k)) for m in islice(self._matches, j + self.CHUNK + 1 - len(buf))
                     for k in [m.lastgroup or "eof"]]
            if "bad" in map(_KIND, chunk):
                at = next(n for n, tok in enumerate(chunk) if tok[0] == "bad")
                self._bad = ParseError(f"unexpected character {chunk[at][1]!r}", text, chunk[at][2], self.filename)
                del chunk[at:]
            elif not chunk or chunk[-1][0] == "eof":
                self._done = True
            buf += chunk
        if j >= len(buf):
            if self._bad is not None:
                raise self._bad
            buf.extend([("eof", "", len(text))] * (j + 1 - len(buf)))  # past the end: more eofs

    def release(self, k: int) -> None:
        """The parser will not look at tokens before k again."""
        n = k - self._base
        if n > self.CHUNK:
            del self._buf[:n]
            self._base = k


def int_problem(text: str) -> str | None:
    """Why the integer literal `text` cannot be read (it does not fit 64 bits), or None."""
    digits = text.lstrip("-")
    if len(digits) > 20 or not -2 ** (INT_BITS - 1) <= int(text) < 2 ** INT_BITS:
        shown = text if len(text) <= 24 else f"{text[:10]}...{text[-6:]} ({len(digits)} digits)"
        return f"integer literal {shown} does not fit in {INT_BITS} bits"
    return None


def shape_problem(shape: tuple[int, ...], dtype) -> str | None:
    """Why a tensor of `shape` and `dtype` cannot exist (its size overflows int64), or None."""
    nbytes = np.dtype(dtype).itemsize
    for d in shape:
        nbytes *= d
    if nbytes > MAX_TYPE_BYTES:
        return f"a tensor of shape {list(shape)} and dtype {np.dtype(dtype).name} is larger than 2**63 bytes"
    return None


def whole_type(text: str) -> TensorType:
    """A type token `f32[2,3]` or `f32[2,3] mirrored` (already checked by the lexer, but for its
    size: see `shape_problem`)."""
    name, _, rest = text.partition("[")
    dims, _, locality = rest.partition("]")
    shape = tuple(int(d) for d in dims.split(",")) if dims else ()
    return TensorType(shape, DTYPES[name], LOCALITIES[locality.strip()] if locality else None)


class EscapeError(ValueError):
    """A bad escape in a string literal, `offset` characters into the literal's text."""

    def __init__(self, message: str, offset: int):
        super().__init__(message)
        self.offset = offset


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"'}
_HEX = frozenset("0123456789abcdefABCDEF")
_UNKNOWN_ESCAPE = r'unknown escape \%s in a string (known: \\ \" \n \t \r \xNN)'


def unescape(s: str) -> str:
    r"""The text of a quoted string literal, escapes resolved; EscapeError for an escape the
    format does not have (it has \\ \" \n \t \r \xNN)."""
    if "\\" not in s:
        return s[1:-1]
    out, i = [], 1
    while i < len(s) - 1:
        ch = s[i]
        if ch == "\\":
            nxt = s[i + 1]
            if nxt == "x":
                digits = s[i + 2:i + 4]
                if len(digits) != 2 or not _HEX.issuperset(digits):
                    raise EscapeError("\\x takes two hexadecimal digits", i)
                out.append(chr(int(digits, 16)))
                i += 4
                continue
            if nxt not in _ESCAPES:
                raise EscapeError(_UNKNOWN_ESCAPE % (nxt if nxt.isprintable() else f"x{ord(nxt):02x}"), i)
            out.append(_ESCAPES[nxt])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)
