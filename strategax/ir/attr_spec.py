"""Declared attributes: which attributes an op (or a variable, or a module) takes, of which
kind, with which allowed values. The parser and the verifier check them, so a misspelt enum
(`agg = "summ"`) is an error naming the attribute and the values it may take."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from .attr_values import Splat, SymbolRef
from .attributes import format_attr


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


# kind -> (test, what it is called in an error)
_KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "int": (_is_int, "an integer"),
    "str": (lambda x: isinstance(x, str), "a string"),
    "bool": (lambda x: isinstance(x, bool), "true or false"),
    "symbol": (lambda x: isinstance(x, SymbolRef), "a symbol (@name)"),
    "symbols": (lambda x: isinstance(x, tuple) and all(isinstance(s, SymbolRef) for s in x),
                "a tuple of symbols ((@a, @b))"),
    "dense": (lambda x: isinstance(x, (np.ndarray, Splat)), "a dense literal"),
    "ints": (lambda x: isinstance(x, tuple) and all(map(_is_int, x)), "a tuple of integers"),
    "strs": (lambda x: isinstance(x, list) and all(isinstance(s, str) for s in x), "a list of strings"),
    "axes": (lambda x: isinstance(x, tuple) and all(
        isinstance(d, tuple) and all(isinstance(a, str) for a in d) for d in x),
             "a tuple of tuples of axis names"),
    "mesh": (lambda x: isinstance(x, tuple) and all(
        isinstance(a, tuple) and len(a) == 2 and isinstance(a[0], str) and _is_int(a[1]) and a[1] >= 1
        for a in x), 'a tuple of (name, size) pairs ((("l0", 2),))'),
    "any": (lambda x: True, "any value"),
}


@dataclass(frozen=True)
class Attr:
    """One declared attribute."""

    kind: str
    required: bool = True
    choices: tuple = ()  # the allowed values, when the attribute is an enum
    minimum: int | None = None  # for "int" and "ints"

    def problem(self, name: str, value: Any) -> str | None:
        """Why `value` is not allowed for attribute `name`, or None."""
        test, what = _KINDS[self.kind]
        if self.choices:
            if not test(value) or value not in self.choices:
                allowed = ", ".join(format_attr(c) for c in self.choices)
                return f"attribute `{name}` is {format_attr(value)}; allowed values: {allowed}"
            return None
        if not test(value):
            return f"attribute `{name}` must be {what}, not {format_attr(value)}"
        if self.minimum is not None:
            items = value if isinstance(value, tuple) else (value,)
            if any(v < self.minimum for v in items):
                return f"attribute `{name}` must be >= {self.minimum}, not {format_attr(value)}"
        return None


def Enum(*choices: str, required: bool = True) -> Attr:  # noqa: N802 - reads as a type
    return Attr("str", required, tuple(choices))


def Int(minimum: int | None = None, required: bool = True) -> Attr:  # noqa: N802
    return Attr("int", required, minimum=minimum)


def Str(required: bool = True) -> Attr:  # noqa: N802
    return Attr("str", required)


def Flag() -> Attr:  # noqa: N802 - an optional boolean marker set by a pass
    return Attr("bool", required=False)


def attrs_problem(attrs: Mapping[str, Any], specs: Mapping[str, Attr] | None,
                  strict: bool = True) -> tuple[str, str | None] | None:
    """The first problem of `attrs` against `specs` as (message, attribute name or None).

    `specs` None: nothing is declared (a generic JAX op). `strict`: attributes that are not
    declared are errors too."""
    if specs is None:
        return None
    missing = [k for k, a in specs.items() if a.required and k not in attrs]
    if missing:
        return f"missing attribute{'s' if len(missing) > 1 else ''} {', '.join(missing)}", None
    for key, value in attrs.items():
        spec = specs.get(key)
        if spec is None:
            if strict:
                known = ", ".join(specs) or "none"
                return f"unknown attribute `{key}` (declared attributes: {known})", key
            continue
        problem = spec.problem(key, value)
        if problem:
            return problem, key
    return None
