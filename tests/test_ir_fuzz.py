"""Fuzzing the IR tools: the pass suite's `.sxir` inputs, mutated (tokens replaced, dropped or
repeated; hostile literals; attributes dropped or swapped between ops; op names and types
swapped), go through parse, verify and the default pipeline as `strategax-opt -p default`
runs them. Whatever happens, the only errors that escape are located strategax errors: a
ParseError or a verifier diagnostic with the file's line and column, or a distribution error
naming its line. A Python traceback from inside (KeyError, IndexError, OverflowError, ...) is
a bug. Time-bounded: a fixed number of derandomized examples (set STRATEGAX_FUZZ_EXAMPLES to
fuzz longer)."""
from __future__ import annotations

import io
import os
import re

from hypothesis import HealthCheck, given, settings, strategies as st

from strategax import ir
from strategax.errors import StrategaxError
from strategax.ir.lexer import _TOKEN
from strategax.tools import strategax_opt

from passes.sxir_cases import all_cases

SEEDS = [c.input for c in all_cases()]
EXAMPLES = int(os.environ.get("STRATEGAX_FUZZ_EXAMPLES", "4000"))
# Literals that have broken the reader before: huge or odd numbers, complex values, bad
# escapes, huge splats and dimensions, wrong kinds of values.
HOSTILE = ["1e309", "-1e309", "inf", "-inf", "nan", "0", "-1", "9" * 5000, "(1.0, 2.0)", '"\\q"',
           '"\\x4"', '"\\xzz"', "dense<f32[1000000000]: splat 1.0>", "dense<f32[2]: (1.0, 2.0), 3.0>",
           "dense<i32[2]: 1.5, 2>", "dense<bool[1]: 7>", "dense<u8[1]: -1>", "dense<i4[1]: 9>",
           "18446744073709551616", "()", "(0,)", "[]", "@nosuch", "none", "true", "f32",
           "#Precision.HIGHEST", "((1,), (0,))", '"x"', "f32[99999999999999999999]",
           "f32[4294967296,4294967296]", "f32[0]", "i32[1,2,3,4,5,6,7,8,9]", "loc(\"x\":99999999999999999999)",
           # the named kinds: JAX records, enums, held objects and primitives by name
           '#held<"f#1">', "#held<1>", '#primitive<"nosuch">', "#Foo.BAR", "#AxisType.Explicit", "#X{a = 1}",
           "#a..b", "#X{a = 1, a = 2}", "#Device{platform = \"cpu\", id = 99}", "#PartitionSpec{partitions = 3}",
           "#NamedSharding{mesh = #AbstractMesh{axis_sizes = (2,), axis_names = (), axis_types = ()}, "
           "spec = #PartitionSpec{partitions = (\"x\",)}}", "#jaxpr<{^(%a: f32[]):\n  yield %a}>",
           "#jaxpr<{^(%a: f32[2]):\n  %b = jax.neg %a : f32[3]\n  yield %b}>", "#jaxpr<{^(): yield}>"]


def _tokens(text: str) -> list[tuple[int, int, str, str]]:
    return [(m.start(m.lastgroup), m.end(), m.group(m.lastgroup), m.lastgroup)
            for m in _TOKEN.finditer(text) if m.lastgroup != "eof"]


def _attr_entries(toks) -> list[tuple[int, int, int]]:
    """(key token, first value token, token after the value) of each `key = value` entry."""
    out = []
    for k in range(1, len(toks) - 2):
        if toks[k][3] == "ident" and toks[k + 1][2] == "=" and toks[k - 1][2] in ("{", ","):
            depth, j = 0, k + 2
            while j < len(toks):
                t = toks[j][2]
                if t in "([{<":
                    depth += 1
                elif t in ")]}>":
                    depth -= 1
                    if depth < 0:
                        break
                elif t == "," and depth == 0:
                    break
                j += 1
            out.append((k, k + 2, j))
    return out


VOCABULARY = sorted({t[2] for s in SEEDS for t in _tokens(s)})
OP_NAMES = sorted({t[2] for s in SEEDS for t in _tokens(s) if re.match(r"(jax|sx)\.", t[2])})
TYPES = sorted({t[2] for s in SEEDS for t in _tokens(s) if t[3] == "type"})
VALUES = sorted({s[toks[v][0]:toks[e - 1][1]] for s in SEEDS for toks in [_tokens(s)]
                 for _, v, e in _attr_entries(toks) if e > v})


@st.composite
def mutated(draw) -> str:
    """A suite input with one to three mutations."""
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 3))):
        toks = _tokens(text)
        how = draw(st.sampled_from(["token", "hostile", "drop", "repeat", "drop-attr", "swap-value",
                                    "op-name", "type", "locality", "locality"]))
        if how in ("token", "hostile", "drop", "repeat"):
            start, end, tok, _ = toks[draw(st.integers(0, len(toks) - 1))]
            new = {"token": lambda: draw(st.sampled_from(VOCABULARY)),
                   "hostile": lambda: draw(st.sampled_from(HOSTILE)), "drop": lambda: "",
                   "repeat": lambda: f"{tok} {tok}"}[how]()
            text = f"{text[:start]} {new} {text[end:]}"
            continue
        entries = _attr_entries(toks)
        if how in ("drop-attr", "swap-value") and entries:
            k, v, e = entries[draw(st.integers(0, len(entries) - 1))]
            if how == "drop-attr":
                end = toks[e][1] if e < len(toks) and toks[e][2] == "," else toks[e - 1][1]
                text = text[:toks[k][0]] + text[end:]
            else:
                text = text[:toks[v][0]] + draw(st.sampled_from(VALUES)) + text[toks[e - 1][1]:]
        elif how == "locality":  # valid text more often: the passes see unusual modules
            where = [t for t in toks if t[3] == "type" or t[2] in ("per_replica", "mirrored")]
            if where:
                start, end, tok, _ = where[draw(st.integers(0, len(where) - 1))]
                bare = re.sub(r" ?(per_replica|mirrored)$", "", tok)
                text = text[:start] + bare + draw(st.sampled_from(["", " per_replica", " mirrored"])) + text[end:]
        elif how in ("op-name", "type"):
            pool = OP_NAMES if how == "op-name" else TYPES
            where = [t for t in toks if t[2] in pool]
            if where:
                start, end, _, _ = where[draw(st.integers(0, len(where) - 1))]
                text = text[:start] + draw(st.sampled_from(pool)) + text[end:]
    return text


ARGS = strategax_opt.build_parser().parse_args(["-p", "default"])
_LOCATED = re.compile(r"fuzz\.sxir:(\d+):(\d+): ")


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mutated())
def test_mutated_ir_raises_only_located_strategax_errors(text):
    # Intent: parse + verify + the default pipeline never crash on hostile IR: every failure
    # is a ParseError or verifier diagnostic at a line and column inside the text, or a
    # distribution error naming its line; a module that gets through prints and re-parses.
    lines = text.count("\n") + 1
    try:
        out = strategax_opt.run(text, ARGS, "fuzz.sxir", err=io.StringIO())
    except ir.ParseError as e:
        assert 1 <= e.line <= lines and e.col >= 1
        assert str(e).startswith(f"fuzz.sxir:{e.line}:{e.col}: ")
        return
    except strategax_opt.Diagnostic as e:
        m = _LOCATED.match(str(e))
        assert m and 1 <= int(m.group(1)) <= lines, str(e)
        return
    except StrategaxError as e:
        assert isinstance(e.file, str) and isinstance(e.line, int) and "fix:" in str(e)
        return
    ir.verify(ir.parse(out))
