"""The Keras adapter's errors: strategax's named errors, located at the user's line (the first
frame outside strategax, JAX and Keras: the `model.fit(...)` or `model.compile(...)` call)."""
from __future__ import annotations

import os
import sys

from ..errors import DistributionRuntimeError, DistributionValueError, _is_internal


def _is_keras(filename: str) -> bool:
    parts = os.path.abspath(filename).split(os.sep)
    return "keras" in parts and ("site-packages" in parts or "dist-packages" in parts)


def user_line(skip: int = 1) -> tuple[str, int]:
    """(file, line) of the innermost frame outside strategax, JAX and Keras."""
    frame = sys._getframe(skip)
    while frame is not None:
        name = frame.f_code.co_filename
        if not _is_internal(name) and not _is_keras(name):
            return name, frame.f_lineno
        frame = frame.f_back
    return "<unknown>", 0


class KerasAdapterError(DistributionValueError):
    """A Keras model cannot be run through strategax with a result strategax can prove right."""

    def __init__(self, message: str, fix: str | None = None):
        super().__init__(message, fix, location=user_line(2))


class KerasBackendError(DistributionRuntimeError):
    """Keras runs on another backend than JAX inside a strategax scope, or is an unsupported version."""

    def __init__(self, message: str, fix: str | None = None):
        super().__init__(message, fix, location=user_line(2))
