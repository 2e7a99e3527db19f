"""The garbage collector paused while a program is traced, passed and lowered.

Tracing a model allocates hundreds of thousands of short-lived objects next to everything JAX
already holds, so Python's collector runs many times mid-compile and each full collection scans
the whole heap: on a 32-layer Transformer LM that was a third of strategax's own compile time
and grew faster than the model (docs/performance.md, issue 36). Reference counting still frees
what a compile drops; cycles made while paused are collected at the collector's next run after
it. Nested and threaded pauses are counted, and a collector the user turned off stays off.
"""
from __future__ import annotations

import contextlib
import gc
import threading
from typing import Iterator

_lock = threading.Lock()
_depth = 0
_resume = False  # whether the outermost pause found the collector on


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Run the block with the garbage collector off (restored when the last pause ends)."""
    global _depth, _resume
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _resume:
                gc.enable()
