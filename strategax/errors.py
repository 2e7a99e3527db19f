"""The error family: misuse errors that name the user's file and line and say how to fix it."""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_JAX_DIRS = tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep
                  for m in [__import__("jax"), __import__("jaxlib")])


def _is_internal(filename: str) -> bool:
    path = os.path.abspath(filename)
    return (path.startswith(_PACKAGE_DIR + os.sep) or path.startswith(_JAX_DIRS)
            or "importlib" in path and "<frozen" in filename or filename.startswith("<frozen"))


def _generated_by_strategax(frame) -> bool:
    """A dataclass's generated `__init__` (file "<string>") of a strategax class."""
    if frame.f_code.co_filename != "<string>":
        return False
    owner = frame.f_locals.get("self")
    return type(owner).__module__.startswith("strategax.")


def user_location(skip: int = 1) -> tuple[str, int]:
    """(file, line) of the innermost stack frame outside strategax and JAX."""
    frame = sys._getframe(skip)
    while frame is not None:
        if not _is_internal(frame.f_code.co_filename) and not _generated_by_strategax(frame):
            return frame.f_code.co_filename, frame.f_lineno
        frame = frame.f_back
    return "<unknown>", 0


class StrategaxError(Exception):
    """Mixin for strategax's misuse errors; `file` and `line` locate the user's code; `op`, the
    IR op a pass found the problem at (its location is the user's line, and tools that read IR
    text point at the op's line)."""

    op: Any = None

    def __init__(self, message: str, fix: str | None = None, *,
                 location: tuple[str, int] | None = None, op: Any = None):
        if location is None and op is not None:
            loc = op.loc
            location = (loc.file, loc.line) if loc is not None else ("<unknown>", 0)
        self.file, self.line = location or user_location(2)
        self.fix, self.op = fix, op
        text = f"{self.file}:{self.line}: {message}"
        if fix:
            text += f"\n  fix: {fix}"
        super().__init__(text)

    def __reduce__(self):
        """Pickled whole (an error raised in a parameter-server worker reaches the coordinator as is)."""
        return _rebuild_error, (type(self), self.args, self.file, self.line, self.fix)


def _rebuild_error(cls, args, file, line, fix):
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.file, error.line, error.fix = file, line, fix
    return error


class DistributionValueError(StrategaxError, ValueError):
    """A value is wrong for the distribution rules (e.g. a per-replica value where one is needed)."""


class DistributionTypeError(StrategaxError, TypeError):
    """An argument has the wrong kind (e.g. mismatched pytree structures across replicas)."""


class DistributionRuntimeError(StrategaxError, RuntimeError):
    """A call made in the wrong context (e.g. `reduce` inside a replica function)."""


class CheckpointError(StrategaxError, ValueError):
    """A checkpoint cannot be written or restored faithfully: names that cannot be stored, or a
    file that does not match the objects (structure, shape, dtype), is damaged or is not one."""


class OutOfRangeError(StrategaxError, RuntimeError):
    """An input iterator has no batch left for a `next()` inside a compiled function
    (TensorFlow's `tf.errors.OutOfRangeError`); the call ran nothing and took nothing."""


class InternalError(StrategaxError, RuntimeError):
    """A bug in strategax, not in the user's program: an exception that is not one of
    strategax's named errors (a KeyError, an AssertionError...) escaped a pass, the import of
    the traced program, its lowering or a compiled call. The original is its `__cause__`;
    `stage` names where it happened, `op` the IR op being worked on (when known), and the
    message names the user's line that op came from."""

    stage: str = ""


REPORT = ("this is a bug in strategax, not in your program: please report it with this message, the "
          "traceback of its cause and the program (STRATEGAX_DUMP_TO=DIR writes its IR after every pass)")


def is_named(err: BaseException) -> bool:
    """Whether `err` is one of strategax's own errors (a misuse error, a parse or verify error,
    a lost worker...), which reach the user as they are."""
    return isinstance(err, StrategaxError) or type(err).__module__.split(".")[0] == "strategax"


_STDLIB = os.path.dirname(os.__file__) + os.sep


def _call_site() -> tuple[str, int]:
    """(file, line) of the innermost frame outside strategax, JAX and Python's own library (a
    `with` block's exit runs in contextlib): the user's call that reached the failure."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not (_is_internal(name) or os.path.abspath(name).startswith(_STDLIB) or _generated_by_strategax(frame)):
            return name, frame.f_lineno
        frame = frame.f_back
    return "<unknown>", 0


def _op_of(err: BaseException) -> Any:
    """The IR op (or JAX equation) the innermost frame of `err`'s traceback that held one was
    working on: a local named `op` or `eqn`."""
    found, tb = getattr(err, "op", None), err.__traceback__
    if found is not None:
        return found
    while tb is not None:
        local = tb.tb_frame.f_locals
        for name in ("op", "eqn"):
            candidate = local.get(name)
            if candidate is not None and (hasattr(candidate, "loc") or hasattr(candidate, "source_info")):
                found = candidate
        tb = tb.tb_next
    return found


def _describe(op: Any) -> tuple[str, tuple[str, int] | None]:
    """(how the message names `op`, the user's (file, line) it came from, if known)."""
    if hasattr(op, "loc"):  # an IR op
        loc = op.loc
        results = ", ".join(f"%{r.name}" for r in getattr(op, "results", ()) if getattr(r, "name", None))
        return f"{op.name}{f' (defining {results})' if results else ''}", (loc.file, loc.line) if loc else None
    where = None
    try:  # a JAX equation: its user frame
        from jax._src import source_info_util
        frame = source_info_util.user_frame(op.source_info.traceback)
        if frame is not None:
            where = (frame.file_name, frame.start_line)
    except Exception:  # noqa: BLE001 - the location is a courtesy; the error stands without it
        pass
    return f"the equation {op.primitive}", where


def internal_error(cause: BaseException, stage: str, op: Any = None, detail: str | None = None,
                   kind: type[InternalError] = InternalError) -> InternalError:
    """The InternalError (or subclass `kind`) for `cause` (not a named error) raised in `stage`
    at `op` (found in the traceback when not given); raise it `from cause`."""
    op = op if op is not None else _op_of(cause)
    at, location = _describe(op) if op is not None else ("", None)
    text = detail or f"{type(cause).__name__}: {cause}"
    error = kind(f"internal error in {stage}{f' at {at}' if at else ''}: {text}", REPORT,
                 location=location or _call_site())
    error.stage, error.op = stage, op
    return error


@contextmanager
def internal_stage(stage: str, keep: tuple[type, ...] = ()) -> Iterator[None]:
    """Re-raise any exception from the block that is not a named error (nor one of `keep`) as
    an InternalError naming `stage`."""
    try:
        yield
    except Exception as e:
        if is_named(e) or isinstance(e, keep):
            raise
        raise internal_error(e, stage) from e


# --- argument checks: each raises the matching error naming the user's line and a fix -------
def check_callable(value, what: str, fix: str) -> None:
    """`value` can be called (a function, lambda, or object with __call__)."""
    if not callable(value):
        raise DistributionTypeError(f"{what} must be callable, not {type(value).__name__} {value!r:.60}", fix,
                                    location=user_location(2))


def check_int(value, what: str, minimum: int | None = None, allow_none: bool = False) -> None:
    """`value` is an int (not a bool; NumPy ints count), at least `minimum` if given."""
    if value is None and allow_none:
        return

    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise DistributionTypeError(f"{what} must be an int{' or None' if allow_none else ''}, not "
                                    f"{type(value).__name__} {value!r:.60}", f"pass a Python int for {what}",
                                    location=user_location(2))
    if minimum is not None and value < minimum:
        raise DistributionValueError(f"{what} must be >= {minimum}, not {value}", f"pass {what} >= {minimum}",
                                     location=user_location(2))


def check_type(value, types, what: str, fix: str, allow_none: bool = False) -> None:
    """`value` is an instance of `types` (or None where `allow_none`)."""
    if value is None and allow_none:
        return
    if not isinstance(value, types):
        raise DistributionTypeError(f"{what} must be {_names(types)}{' or None' if allow_none else ''}, not "
                                    f"{type(value).__name__} {value!r:.60}", fix, location=user_location(2))


def check_sequence(value, what: str, fix: str) -> None:
    """`value` is a tuple or list (the `args=` of run, merge_call, update)."""
    if not isinstance(value, (tuple, list)):
        raise DistributionTypeError(f"{what} must be a tuple or list, not {type(value).__name__} {value!r:.60}",
                                    fix, location=user_location(2))


def check_mapping(value, what: str, fix: str) -> None:
    """`value` is a dict-like mapping or None (the `kwargs=` of run, merge_call, update)."""
    if value is not None and not hasattr(value, "keys"):
        raise DistributionTypeError(f"{what} must be a dict or None, not {type(value).__name__} {value!r:.60}",
                                    fix, location=user_location(2))


def _names(types) -> str:
    types = types if isinstance(types, tuple) else (types,)
    return " or ".join(getattr(t, "__name__", str(t)) for t in types)
