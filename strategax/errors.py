"""The error family: misuse errors that name the user's file and line and say how to fix it."""
from __future__ import annotations

import os
import sys

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_JAX_DIRS = tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep
                  for m in [__import__("jax"), __import__("jaxlib")])


def _is_internal(filename: str) -> bool:
    path = os.path.abspath(filename)
    return (path.startswith(_PACKAGE_DIR + os.sep) or path.startswith(_JAX_DIRS)
            or "importlib" in path and "<frozen" in filename or filename.startswith("<frozen"))


def user_location(skip: int = 1) -> tuple[str, int]:
    """(file, line) of the innermost stack frame outside strategax and JAX."""
    frame = sys._getframe(skip)
    while frame is not None:
        if not _is_internal(frame.f_code.co_filename):
            return frame.f_code.co_filename, frame.f_lineno
        frame = frame.f_back
    return "<unknown>", 0


class StrategaxError(Exception):
    """Mixin for strategax's misuse errors; `file` and `line` locate the user's code."""

    def __init__(self, message: str, fix: str | None = None, *,
                 location: tuple[str, int] | None = None):
        self.file, self.line = location or user_location(2)
        self.fix = fix
        text = f"{self.file}:{self.line}: {message}"
        if fix:
            text += f"\n  fix: {fix}"
        super().__init__(text)


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
