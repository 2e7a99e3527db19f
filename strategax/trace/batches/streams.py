"""The input streams of one call of a compiled function: where its `next()` calls and its
`for x in dataset` loops take batches from.

An iterator argument is one stream, named by its argument leaf: `(ITERATOR, leaf)`. Each
`iter()` of a dataset argument inside the function (a `for x in dataset` loop, or an explicit
`iter(dataset)`) opens a stream of its own, `(DATASET, leaf, k)` for the k-th: a fresh pass over
the dataset, as TensorFlow's `iter(dataset)` inside a tf.function. A call reads its streams on
the host on demand; the trace that compiles a program and the call that runs it share what was
read, so compiling takes no batch of its own.
"""
from __future__ import annotations

import ctypes
import dis
import functools
import sys
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ..._markers import is_distributed_dataset

ITERATOR, DATASET = "iterator", "dataset"


def is_dataset(x: Any) -> bool:
    return is_distributed_dataset(x)


def called_by_for(depth: int = 2) -> bool:
    """Whether the frame `depth` levels up calls `__iter__` to start a `for` loop or a
    comprehension, directly (`for x in dataset`) or through a call whose result the loop
    iterates (`for i, x in enumerate(dataset)`), rather than for `iter(dataset)` or `list()`."""
    frame = sys._getframe(depth)
    op, following = _instructions(frame.f_code).get(frame.f_lasti, (None, None))
    return op == "GET_ITER" or (op == "CALL" and following == "GET_ITER")


@functools.lru_cache(maxsize=256)
def _instructions(code) -> dict[int, tuple[str, str | None]]:
    """offset -> (its instruction, the next instruction) of `code`'s bytecode."""
    ins = list(dis.get_instructions(code))
    return {a.offset: (a.opname, b.opname if b is not None else None) for a, b in zip(ins, ins[1:] + [None])}


_NUMBERS = (bool, int, float, complex, np.generic)


def python_numbers(frame) -> dict[str, Any]:
    """The Python numbers among `frame`'s local variables."""
    return {k: v for k, v in frame.f_locals.items() if isinstance(v, _NUMBERS)}


def as_tensor(x) -> Any:
    """A Python number as AutoGraph makes it a tensor: int32, float32, bool, complex64 (a NumPy
    scalar keeps its dtype), not weakly typed (so a step computes with it alike every time)."""
    dtype = x.dtype if isinstance(x, np.generic) else jax.dtypes.canonicalize_dtype(type(x))
    return jnp.asarray(x, dtype)


def set_locals(frame, values: dict[str, Any]) -> None:
    """Rebind local variables of `frame`, a frame that is running (what a debugger does): how a
    loop makes the Python numbers its body changes into values it carries, as AutoGraph does."""
    if sys.version_info >= (3, 13):  # f_locals writes through (PEP 667)
        for k, v in values.items():
            frame.f_locals[k] = v
        return
    frame.f_locals.update(values)
    ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))


def changed_numbers(before: dict, after: dict) -> list[tuple[str, Any, Any]]:
    """(name, before, after) for each Python number that changed its value or type."""
    out = []
    for k, v in after.items():
        if k not in before:
            continue
        a = before[k]
        if type(a) is not type(v) or not (a == v or (_nan(a) and _nan(v))):  # NaN stays NaN: unchanged
            out.append((k, a, v))
    return out


def _nan(x) -> bool:
    return bool(np.isnan(x)) if not isinstance(x, (bool, int, np.bool_, np.integer)) else False


class Streams:
    """The host side of one call's streams: each one's distributed iterator, made once."""

    def __init__(self, leaves: Sequence[Any]):
        self.leaves = leaves
        self._open: dict[tuple, Any] = {}

    def source(self, stream: tuple) -> Any:
        """The distributed iterator of `stream` (the argument itself, or a fresh pass over a
        dataset argument, made on first use)."""
        it = self._open.get(stream)
        if it is None:
            x = self.leaves[stream[1]]
            it = self._open[stream] = x if stream[0] == ITERATOR else x._host_iterator()
        return it

    def count(self, stream: tuple) -> int:
        """How many elements `stream` holds now (read ahead to its end, nothing consumed)."""
        return self.source(stream)._remaining()
