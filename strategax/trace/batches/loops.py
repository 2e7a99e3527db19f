"""`sx.range`: TensorFlow's `tf.range` loop idiom, one on-device loop for many steps.

Outside a trace `sx.range(...)` is Python's `range`. Inside a strategax trace a loop of two or
more iterations runs its body twice in Python, between markers (`sx.loop_mark` equations):
`outline.py` compares the two traced iterations, finds what the body carries from one
iteration to the next, and replaces them by one `lax.while_loop` whose body is the second
iteration. A loop of zero or one iteration is plain Python iteration.
"""
from __future__ import annotations

import builtins
import itertools
from typing import Any, Iterator

import jax.numpy as jnp
import numpy as np
from jax import core as jax_core
from jax.extend import core as jex

from ... import _context
from ...dialects.effects import INPUT
from ...errors import DistributionTypeError, DistributionValueError

loop_mark_p = jex.Primitive("sx.loop_mark")
loop_mark_p.multiple_results = True
BEGIN, NEXT, END = "begin", "next", "end"
_INDEX = jax_core.ShapedArray((), jnp.int32)


def _mark_abstract(*bounds, loop, kind):
    return ([] if kind == END else [_INDEX]), {INPUT}


loop_mark_p.def_effectful_abstract_eval(_mark_abstract)
_loop_ids = itertools.count()


def _static_int(x: Any) -> int | None:
    """`x` as a Python int when it is known now (an int, or a concrete scalar array)."""
    if isinstance(x, jax_core.Tracer):
        return None  # traced: known only when the program runs
    return int(x)


class range:  # noqa: A001,N801 - `sx.range`, like `tf.range`
    """`range(stop)` / `range(start, stop[, step])`. Inside a `strategy.function`, a
    `for i in sx.range(n):` loop compiles to one on-device loop (`i` is an int32 scalar):
    one dispatch for `n` steps, `next(iterator)` in the body taking one batch per step.
    `stop` may be traced when the body takes no batches; `start` and `step` are ints."""

    def __init__(self, start, stop=None, step: int = 1):
        for name, x in (("start", start), ("stop", stop), ("step", step)):
            if x is not None and not isinstance(x, jax_core.Tracer) and (
                    isinstance(x, bool) or not isinstance(x, (int, np.integer))
                    and not (hasattr(x, "dtype") and np.issubdtype(x.dtype, np.integer) and np.ndim(x) == 0)):
                raise DistributionTypeError(f"sx.range's {name} must be an int, not {type(x).__name__} {x!r:.40}",
                                            "pass ints (the stop may be a traced int32 scalar)")
        if step == 0:
            raise DistributionValueError("sx.range's step must not be zero", "pass a non-zero step")
        if stop is None:
            start, stop = 0, start
        self.start, self.stop, self.step = start, stop, step

    def __repr__(self) -> str:
        return f"sx.range({self.start}, {self.stop}, {self.step})"

    def _python_range(self) -> builtins.range | None:
        start, stop, step = (_static_int(x) for x in (self.start, self.stop, self.step))
        return None if start is None or stop is None or step is None else builtins.range(start, stop, step)

    def __iter__(self) -> Iterator:
        python = self._python_range()
        if not _context.is_tracing():
            if python is None:
                raise DistributionTypeError("sx.range got a traced bound outside a strategy.function",
                                            "pass Python ints")
            return iter(python)
        start, step = _static_int(self.start), _static_int(self.step)
        if start is None or not step:
            raise DistributionTypeError(
                f"sx.range's start and step must be Python ints (step not 0), not {self.start!r}, {self.step!r}",
                "pass ints; only the stop may be a traced value")
        if python is not None and len(python) <= 1:
            return iter(python)  # nothing to loop over: trace it as Python does
        return self._traced(start, step)

    def _traced(self, start: int, step: int) -> Iterator:
        loop = next(_loop_ids)
        bounds = [jnp.asarray(x, jnp.int32) for x in (start, self.stop, step)]
        (first,) = loop_mark_p.bind(*bounds, loop=loop, kind=BEGIN)
        yield first
        (second,) = loop_mark_p.bind(loop=loop, kind=NEXT)
        yield second
        loop_mark_p.bind(loop=loop, kind=END)
