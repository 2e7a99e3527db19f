"""The IR side of differential fuzzing (issue 35): the module a random program (`programs.py`)
traces to is printed, and its text goes through `strategax-opt`'s code path with every pass
and pipeline: the verifier accepts each output (after every pass: `--verify-each`), the output
re-parses to the same text, and the reference interpreter (`backends/reference.py`) computes
the same numbers from the same inputs before and after.

"Before" is the traced module after the passes that make TensorFlow's semantics explicit
(`BASE`: padded rows masked, variable aggregations inserted, localities inferred); every other
pass is then one optimisation that must keep its numbers, alone, in random orders, and as the
whole default pipeline run from the traced text."""
from __future__ import annotations

import io
from typing import Any

import jax
import numpy as np

from strategax import backends, ir
from strategax.passes.manager import DEFAULT_PIPELINE
from strategax.tools import strategax_opt

from .programs import Program, make_inputs, quiet, run_strategax_function, strategy_for

BASE = "canonicalize,dce,mask-padding,insert-collectives,central-storage,infer-locality"
OPTIMISATIONS = ("check-locality", "simplify-collectives", "cse", "compress-collectives", "canonicalize", "dce",
                 "fold-double-negation", "propagate-sharding,fuse-collectives",
                 "propagate-sharding,fuse-collectives{bytes_per_pack=16}",
                 "propagate-sharding,fuse-collectives{bytes_per_pack=1}")


def opt(text: str, passes: str) -> str:
    """`strategax-opt -p PASSES --verify-each` of `text` (raises what the tool raises)."""
    args = strategax_opt.build_parser().parse_args(["-p", passes, "--verify-each"])
    out = strategax_opt.run(text, args, "fuzz.sxir", err=io.StringIO())
    assert ir.print_module(ir.parse(out)) == out, "the output does not re-parse to the same text"
    return out


def traced(p: Program) -> tuple[str, list, Any] | None:
    """The traced module's text, the program's global arguments and the executable's input
    layouts (None when strategax refuses the program)."""
    strategy = strategy_for(p.n)
    x, _ = make_inputs(p, strategy)
    f = run_strategax_function(p, strategy)
    with quiet():
        try:
            compiled, sig = f._specialization((x,), {})
        except (ValueError, TypeError, RuntimeError):
            return None
        args = [np.asarray(jax.device_get(a)) for a in compiled.global_args(sig)]
        return f.ir(x, stage="traced"), args, compiled.executable.in_layouts


def reference(text: str, args: list, layouts: list, n: int) -> list:
    module = ir.parse(text)
    inputs = []
    for a, layout in zip(args, layouts):
        if layout.per_replica:
            pieces = np.split(np.asarray(a), n)
            inputs.append([p.reshape(()) if layout.stacked else p for p in pieces])
        else:
            inputs.append(a)
    return backends.run_reference(module, *inputs, num_replicas=n)


def assert_same(before: list, after: list, what: str, loose: bool) -> None:
    rtol, atol = (3e-2, 3e-2) if loose else (1e-5, 1e-5)
    assert len(before) == len(after), what
    for k, (b, a) in enumerate(zip(before, after)):
        for r, (x, y) in enumerate(zip(b, a)):
            x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
            assert x.shape == y.shape, f"{what}: output {k} replica {r}: shape {x.shape} != {y.shape}"
            np.testing.assert_allclose(y, x, rtol=rtol, atol=atol * (1 + float(np.max(np.abs(x), initial=0))),
                                       err_msg=f"{what}: output {k}, replica {r}")


def check_ir(p: Program, order: list[int]) -> str:
    """Every optimisation (in `order`, then all of them, then the default pipeline) keeps the
    reference interpreter's numbers of the module `p` traces to."""
    got = traced(p)
    if got is None:
        return "refused"
    text, args, layouts = got
    base = opt(text, BASE)
    want = reference(base, args, layouts, p.n)
    loose = p.compression is not None
    for i in order:
        passes = OPTIMISATIONS[i % len(OPTIMISATIONS)]
        assert_same(want, reference(opt(base, passes), args, layouts, p.n), f"-p {BASE},{passes}", loose)
    chain = ",".join(OPTIMISATIONS[i % len(OPTIMISATIONS)] for i in order)
    if chain:
        assert_same(want, reference(opt(base, chain), args, layouts, p.n), f"-p {BASE},{chain}", loose)
    default = opt(text, ",".join(DEFAULT_PIPELINE))
    assert_same(want, reference(default, args, layouts, p.n), "-p default", loose)
    return "ok"
