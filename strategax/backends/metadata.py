"""XLA metadata for each lowered op: the IR op's name (a collective's reason with it) as the
op's name scope and the user's file:line as its source location, so the compiled HLO
(`f.hlo()`), TensorBoard's profile and Perfetto traces name `sx.all_reduce (reason)` at
`train.py:52` where they would name `all-reduce.3` at the line that called the function.

JAX takes an op's source location from the Python traceback current when the op is bound
(its innermost frame outside JAX and strategax). The IR keeps only file:line, so a tiny
function whose code object claims that file and line captures the traceback: its own frame
is then the innermost user frame. Nothing runs from the user's file.
"""
from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator

import jax
from jax._src import source_info_util
from jaxlib import xla_client

from ..ir import Operation, is_collective


def _capture():
    return xla_client.Traceback.get_traceback()


_tracebacks: dict[tuple[str, int, str], object] = {}


def _traceback_at(file: str, line: int, name: str):
    """A traceback whose innermost frame is function `name` at `file`:`line` (cached)."""
    key = (file, line, name)
    tb = _tracebacks.get(key)
    if tb is None:
        code = _capture.__code__.replace(co_filename=file, co_firstlineno=max(line - 1, 0),
                                         co_name=name, co_qualname=name)
        tb = types.FunctionType(code, {"xla_client": xla_client})()
        _tracebacks[key] = tb
    return tb


def op_label(op: Operation) -> str:
    """The op's name in XLA's metadata: `jax.dot_general`, `sx.all_reduce (gradients)`."""
    reason = op.attrs.get("reason") if is_collective(op) or "reason" in op.attrs else None
    label = f"{op.name} ({reason})" if reason else op.name
    return label.replace("/", "|")  # "/" separates name scopes


@contextlib.contextmanager
def op_metadata(op: Operation) -> Iterator[None]:
    """Bind what `op` lowers to under its name scope and at its user's line."""
    with contextlib.ExitStack() as stack:
        if op.loc is not None:
            stack.enter_context(source_info_util.user_context(_traceback_at(op.loc.file, op.loc.line, op.name)))
        stack.enter_context(jax.named_scope(op_label(op)))
        yield
