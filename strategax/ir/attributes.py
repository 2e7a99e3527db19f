"""Attribute values: the kinds of plain data an op may carry, each printed and parsed by two
functions side by side, and the table (`KINDS`) that the printer and the parser dispatch on.

Every kind is plain data that knows no JAX (the values that are not Python's own are in
`attr_values.py`): numbers, strings, symbols, dtypes, tuples, lists,
dense arrays, and four forms for what a framework puts in its parameters: an enum member
`#Precision.HIGHEST`, a record `#GatherDimensionNumbers{offset_dims = (0,), ...}` (a sharding,
a mesh, a partition spec, a dataclass: fields by name), a primitive by name `#primitive<"ge">`,
and a sub-program `#jaxpr<{^(%a: f32[]): ... yield %b}>` (a block of ops). Which framework object
each one stands for is the dialects' business (`strategax.dialects.jax_attrs`); the parser
rebuilds data only, and never runs code.

What has no text (a Python callback) is `Held` by reference and prints as a placeholder that
names it, `#held<"my_callback#1">`: the text parses back in the process that printed it (which
still holds the object) and is a located ParseError in any other.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .attr_values import (EnumAttr, Held, PrimitiveRef, Record, Splat, Subprogram, SymbolRef, dtype_kind,
                          int_bounds)
from .lexer import INT
from .types import DTYPE_NAMES, DTYPES, TensorType, dtype_name

if TYPE_CHECKING:  # annotations only: the reader imports this module, the printer registers itself
    from .ops import Block
    from .reader import Reader


# --- scalars: none, booleans, integers, floats, strings, symbols, dtypes -----------------------
def print_none(value: None) -> str:
    return "none"


def print_bool(value: bool) -> str:
    return "true" if value else "false"


def print_int(value: int) -> str:
    return str(value)


def parse_number(r: "Reader", text: str, pos: int) -> int | float:
    if INT.match(text):  # up to 18 characters always fit 64 bits
        return int(text) if len(text) <= 18 else r.integer(text, pos)
    return float(text)


def format_float(x: float) -> str:
    """Shortest text that reads back to the same float (`1.0`, `1e-05`, `inf`, `nan`)."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return repr(float(x))


_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}


_PLAIN = re.compile(r'[^\\"\x00-\x1f\x7f]*\Z')  # nothing to escape


def format_string(s: str) -> str:
    """A double-quoted string; control characters escaped as \\n, \\t, \\r or \\xNN."""
    if _PLAIN.match(s):
        return f'"{s}"'
    out = []
    for ch in s:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def parse_string(r: "Reader", text: str, pos: int) -> str:
    return r.string(text, pos)


def print_symbol(value: SymbolRef) -> str:
    return f"@{value.name}"


def parse_symbol(r: "Reader", text: str, pos: int) -> SymbolRef:
    return SymbolRef(text[1:])


def print_dtype(value: np.dtype) -> str:
    return dtype_name(value)


_WORDS = {"true": True, "false": False, "none": None, "inf": math.inf, "nan": math.nan}


def parse_word(r: "Reader", text: str, pos: int) -> Any:
    """A word: true, false, none, inf, nan, a dtype (`f32`), or `dense<...>`."""
    if text in _WORDS:
        return _WORDS[text]
    if text == "dense":
        return parse_dense(r, text, pos)
    if text in DTYPES:
        return DTYPES[text]
    raise r.error(f"unknown attribute value {text!r}", pos)


# --- tuples and lists ------------------------------------------------------------------------
def print_tuple(value: tuple) -> str:
    if len(value) == 1:
        return f"({format_attr(value[0])},)"
    return "(" + ", ".join(format_attr(v) for v in value) + ")"


def parse_tuple(r: "Reader", text: str, pos: int) -> tuple:
    r.enter()
    items = r.comma_list(")", r.parse_attr)
    r.leave()
    if len(items) == 1 and not r.trailing:
        raise r.error("a one-element tuple is written `(x,)`", pos)
    return tuple(items)


def print_list(value: list) -> str:
    return "[" + ", ".join(format_attr(v) for v in value) + "]"


def parse_list(r: "Reader", text: str, pos: int) -> list:
    r.enter()
    items = r.comma_list("]", r.parse_attr)
    r.leave()
    return items


# --- dense arrays: `dense<f32[2]: 1.0, 2.0>`, `dense<f32[1000]: splat 0.0>` ---------------------
def format_dense(array: np.ndarray) -> str:
    """`dense<f32[2]: 1.0, 2.0>`; all-equal arrays print as `dense<f32[1000]: splat 0.0>`."""
    ty = TensorType(array.shape, array.dtype)
    flat = array.reshape(-1)
    if flat.size > 1 and (flat == flat[0]).all() and not _has_nan(flat):
        return f"dense<{ty}: splat {_format_element(flat[0])}>"
    kind = dtype_kind(array.dtype)
    if kind == "f":  # NumPy prints the shortest digits that read back to the same value in this dtype
        items = [_format_element(x) for x in flat]
    else:
        convert = {"c": complex, "b": bool}.get(kind, int)
        items = [_format_scalar(convert(x)) for x in flat]
    return f"dense<{ty}: {', '.join(items)}>"


def print_splat(value: Splat) -> str:
    return f"dense<{TensorType(value.shape, value.dtype)}: splat {_format_element(value.value)}>"


def parse_dense(r: "Reader", text: str, pos: int) -> np.ndarray | Splat:
    """`dense<T: v, ...>` (an array) or `dense<T: splat v>` (a Splat, however large T is)."""
    r.expect("<")
    tpos = r.pos()
    ty = r.parse_type()
    if ty.locality is not None or ty.sharding is not None:
        raise r.error("a dense literal's type has no locality or sharding", tpos)
    r.expect(":")
    kind = dtype_kind(ty.dtype)
    if r.accept("splat"):
        vpos = r.pos()
        value = _fit(r, [_parse_element(r, kind)], ty, vpos)[0]
        r.expect(">")
        return Splat(value, ty.shape)
    size = math.prod(ty.shape)
    items: list = []

    def element():
        if len(items) == size:
            raise r.error(f"dense literal of type {ty} needs {size} values, has more")
        return _parse_element(r, kind)

    items = r.comma_list(">", element, into=items)
    if len(items) != size:
        raise r.error(f"dense literal of type {ty} needs {size} values, has {len(items)}", tpos)
    return _fit(r, items, ty, r.last_close).reshape(ty.shape)


def _format_scalar(x: Any) -> str:
    if isinstance(x, (bool, np.bool_)):
        return "true" if x else "false"
    if isinstance(x, (float, np.floating)):
        return format_float(float(x))
    if isinstance(x, (complex, np.complexfloating)):
        return f"({format_float(float(x.real))}, {format_float(float(x.imag))})"
    return str(int(x))


def _format_element(x) -> str:
    """One element of a dense array: floats with the shortest digits exact for their dtype."""
    if dtype_kind(x.dtype) != "f":
        return _format_scalar(x.item() if hasattr(x, "item") else x)
    if x.dtype not in (np.float32, np.float64):  # bf16, f16, f8: exact as float32
        x = np.float32(x)
    return str(x)


def _has_nan(flat: np.ndarray) -> bool:
    kind = dtype_kind(flat.dtype)
    return kind in "fc" and bool(np.isnan(flat.astype(np.complex128 if kind == "c" else np.float64)).any())


_WANT = {"b": "true or false", "i": "an integer", "u": "an integer", "f": "a number", "c": "a number or (re, im)"}


def _parse_element(r: "Reader", kind: str) -> Any:
    """One element of a dense literal of dtype kind `kind` ("b", "i", "u", "f" or "c"): true or
    false for booleans, an integer for integer dtypes, a number for floating ones, and a number
    or `(re, im)` for complex ones; nothing is rounded or truncated silently."""
    pos = r.pos()
    if kind == "c" and r.accept("("):
        re_ = _parse_element(r, "f")
        r.expect(",")
        im = _parse_element(r, "f")
        r.expect(")")
        return complex(re_, im)
    v = r.parse_attr()
    if kind == "b":
        ok = isinstance(v, bool)
    elif kind in "iu":
        ok = isinstance(v, int) and not isinstance(v, bool)
    else:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool)
    if not ok:
        raise r.error(f"expected {_WANT[kind]}, not {format_attr(v)}", pos)
    return v


def _fit(r: "Reader", items: list, ty: TensorType, pos: int) -> np.ndarray:
    """`items` as a 1-D array of `ty`'s dtype; a ParseError at `pos` when an integer does not
    fit (floats round to the dtype, as in any literal)."""
    bounds = int_bounds(ty.dtype)
    if bounds is not None and items and not bounds[0] <= min(items) <= max(items) <= bounds[1]:
        lo, hi = bounds
        for k, x in enumerate(items):
            if not lo <= x <= hi:
                which = f"element {k}" if len(items) > 1 else "the value"
                raise r.error(f"{which} of the dense literal, {x}, does not fit "
                              f"{dtype_name(ty.dtype)} ({lo}..{hi})", pos)
    return np.array(items, dtype=ty.dtype)


# --- named forms: enums, records, primitives, held objects -----------------------------------
def print_enum(value: EnumAttr) -> str:
    return f"#{value.type_name}.{value.member}"


def print_record(value: Record) -> str:
    inner = ", ".join(f"{k} = {format_attr(v)}" for k, v in value.fields)
    return f"#{value.type_name}{{{inner}}}"


def parse_named(r: "Reader", text: str, pos: int) -> EnumAttr | Record:
    """`#Type{field = value, ...}` (a record) or `#Type.MEMBER` (an enum member); a type's name
    may be qualified (`#my.module.Thing{...}`), so what follows the name tells which."""
    name = text[1:]
    if r.peek("{"):
        r.enter()
        fields = r.parse_attr_dict().items()
        r.leave()
        return Record(name, fields)
    type_name, _, member = name.rpartition(".")
    if not type_name or not member:
        raise r.error(f"expected `#Type.MEMBER` or `#Type{{...}}`, found {text}", pos)
    return EnumAttr(type_name, member)


def print_primitive(value: PrimitiveRef) -> str:
    return f"#primitive<{format_string(value.name)}>"


def parse_primitive(r: "Reader", text: str, pos: int) -> PrimitiveRef:
    return PrimitiveRef(_quoted_name(r, "a primitive's name"))


def print_held(value: Held) -> str:
    return f"#held<{format_string(value.name)}>"


def parse_held(r: "Reader", text: str, pos: int) -> Held:
    name = _quoted_name(r, "the name of a held object")
    held = Held.find(name)
    if held is None:
        raise r.error(f"#held<{format_string(name)}> is a Python object (a callback) that only the process "
                      "that printed this text holds; it has no text form, so this program can be read "
                      "back only there (fix: keep the callback out of the program, or compile it in "
                      "this process)", pos)
    return held


def _quoted_name(r: "Reader", what: str) -> str:
    r.expect("<")
    kind, text, spos = r.next()
    if kind != "string":
        raise r.error(f"expected {what} in quotes, found {text!r}", spos)
    r.expect(">")
    return r.string(text, spos)


# --- sub-programs: `#jaxpr<{^(%a: T): ops yield %r}>` -----------------------------------------
def _no_block_printer(block: "Block") -> str:
    raise RuntimeError("import strategax.ir to print a sub-program")


_block_text: Callable[["Block"], str] = _no_block_printer


def set_block_printer(print_block: Callable[["Block"], str]) -> None:
    """Give sub-program attributes their printer (`printer.py` registers it: it imports this
    module, so this module does not import it)."""
    global _block_text
    _block_text = print_block


def print_subprogram(value: Subprogram) -> str:
    return f"#jaxpr<{_block_text(value.block)}>"


def parse_subprogram(r: "Reader", text: str, pos: int) -> Subprogram:
    r.expect("<")
    block = r.parse_region()
    r.expect(">")
    return Subprogram(block)


# --- the table ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Kind:
    """One kind of attribute value: the Python types it prints, the token its text starts with
    (a token kind, and the token's text where it matters), and its two functions."""

    name: str
    types: tuple[type, ...]
    starts: tuple[tuple[str, str | None], ...]
    print: Callable[[Any], str]
    parse: Callable[["Reader", str, int], Any] | None  # None: parsed as part of another kind


KINDS: tuple[Kind, ...] = (
    Kind("none", (type(None),), (), print_none, None),  # the words: parse_word
    Kind("bool", (bool,), (), print_bool, None),
    Kind("int", (int,), (("number", None),), print_int, parse_number),
    Kind("float", (float,), (), format_float, None),  # numbers, and the words inf and nan
    Kind("string", (str,), (("string", None),), format_string, parse_string),
    Kind("symbol", (SymbolRef,), (("symbol", None),), print_symbol, parse_symbol),
    Kind("word", (np.dtype,), (("ident", None),), print_dtype, parse_word),
    Kind("tuple", (tuple,), (("punct", "("),), print_tuple, parse_tuple),
    Kind("list", (list,), (("punct", "["),), print_list, parse_list),
    Kind("dense", (np.ndarray,), (), format_dense, None),  # `dense` is a word
    Kind("splat", (Splat,), (), print_splat, None),
    Kind("enum", (EnumAttr,), (), print_enum, None),  # named forms: parse_named
    Kind("record", (Record,), (("hash", None),), print_record, parse_named),
    Kind("primitive", (PrimitiveRef,), (("hash", "#primitive"),), print_primitive, parse_primitive),
    Kind("held", (Held,), (("hash", "#held"),), print_held, parse_held),
    Kind("jaxpr", (Subprogram,), (("hash", "#jaxpr"),), print_subprogram, parse_subprogram),
)
_PRINTERS: dict[type, Callable[[Any], str]] = {t: k.print for k in KINDS for t in k.types}
PARSERS: dict[tuple[str, str | None], Callable] = {s: k.parse for k in KINDS for s in k.starts if k.parse}


def format_attr(value: Any) -> str:
    """The text of one attribute value; `Reader.parse_attr` reads it back."""
    printer = _PRINTERS.get(type(value))
    if printer is None:  # a subclass (NumPy's dtype classes): found once, then remembered
        printer = next((k.print for k in KINDS for t in k.types
                        if isinstance(value, t) and not isinstance(value, (np.generic, bool))), None)
        if printer is None:
            raise TypeError(f"not an attribute value: {value!r}")
        _PRINTERS[type(value)] = printer
    return printer(value)


def is_attr(value: Any) -> bool:
    """Whether `value` is attribute data (of a kind in `KINDS`, all the way down)."""
    if isinstance(value, (tuple, list)):
        return all(map(is_attr, value))
    if isinstance(value, Record):
        return all(is_attr(v) for v in value)
    if isinstance(value, (np.ndarray, Splat)):
        return value.dtype in DTYPE_NAMES
    if isinstance(value, np.dtype):
        return value in DTYPE_NAMES
    return type(value) in _PRINTERS
