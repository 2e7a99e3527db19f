"""The retracing warning, like tf.function's: when 5 of a function's last 10 calls traced it
again, log a warning (logger "strategax") naming what changed between the last two traces:
an argument (its path, old and new value or type) or a captured value. At most 2 warnings per
function. Calls are counted per Python function (its code), so a `strategy.function` made
anew in a loop is caught too, as TensorFlow catches it."""
from __future__ import annotations

import logging
import threading
import weakref
from collections import deque
from typing import Any, Callable

from .signature import MIRRORED, PER_REPLICA, SCALAR, STATIC, leaf_names  # noqa: F401 - re-exported

THRESHOLD, HISTORY, MAX_WARNINGS = 5, 10, 2  # tf.function's FREQUENT_TRACING_WARNING_* values
_MAX_NAMED = 3  # changes named in one warning

log = logging.getLogger("strategax")


class Detector:
    """Counts one Python function's calls and traces; warns when most recent calls traced."""

    __slots__ = ("calls", "_traces", "_warnings", "_last", "__weakref__")

    def __init__(self):
        self.calls = 0  # every call (the compiled functions' hit path adds 1)
        self._traces: deque[int] = deque()  # the call numbers that traced, within HISTORY calls
        self._warnings = 0
        self._last: tuple | None = None  # (key, treedef, parts, owner) of the previous trace

    def traced(self, fn: Callable, key: tuple, treedef, parts: list, cache_size: int, owner: Any = None) -> None:
        """Record a call that traces `fn` for the cache key `key` (structure `treedef`; `parts`:
        the (name, key) of its captured values; `owner`: the compiled function that traced);
        warn when too many recent calls traced."""
        with _lock:
            self.calls += 1
            self._traces.append(self.calls)
            while self.calls - self._traces[0] >= HISTORY:
                self._traces.popleft()
            previous, self._last = self._last, (key, treedef, list(parts), _ref(owner))
            if len(self._traces) < THRESHOLD or self._warnings >= MAX_WARNINGS:
                return
            self._warnings += 1
            count, window = len(self._traces), self.calls - self._traces[0] + 1
        what, fix = _describe(fn, previous, self._last, cache_size)
        log.warning("%s", f"{count} out of the last {window} calls to {_where(fn)} triggered retracing "
                    f"(as tf.function warns): each traced it again and compiled a new program, which is "
                    f"slow and keeps the program in memory. What changed: {what}.\n  fix: {fix}")


def _ref(owner: Any) -> Callable[[], Any]:
    """A weak reference to `owner` where it takes one (a dead one reads None)."""
    try:
        return weakref.ref(owner)
    except TypeError:
        return lambda: owner


_lock = threading.Lock()
_detectors: "weakref.WeakKeyDictionary[Any, Detector]" = weakref.WeakKeyDictionary()


def detector_for(fn: Callable) -> Detector:
    """The detector of `fn`'s Python code (shared by every compiled function made from it)."""
    target = fn
    while hasattr(target, "__wrapped__"):
        target = target.__wrapped__
    target = getattr(target, "__func__", target)
    target = getattr(target, "__code__", target)
    with _lock:
        try:
            found = _detectors.get(target)
            if found is None:
                found = _detectors[target] = Detector()
            return found
        except TypeError:  # neither hashable nor weakly referable: one detector for this function
            return Detector()


def _where(fn: Callable) -> str:
    name = getattr(fn, "__name__", None) or type(fn).__name__
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    return f"{name} ({code.co_filename}:{code.co_firstlineno})" if code is not None else name


def _show(item: tuple) -> str:
    """An entry of the cache key, in words."""
    kind = item[0]
    if kind == STATIC:
        assert len(item) >= 3, "a static entry is (STATIC, its type, its value...)"
        value = item[2:] if len(item) > 3 else item[2]
        if isinstance(value, tuple) and value and value[0] == "nan":
            value = "nan"
        text = repr(value) if not isinstance(value, str) or item[1] is str else value
        return f"a Python {item[1].__name__} {text[:60]}"
    if kind in (MIRRORED, PER_REPLICA):
        dims = ",".join(str(d) for d in item[1])
        return f"{'a per-replica ' if kind == PER_REPLICA else 'an '}array {item[2]}[{dims}]"
    if kind == SCALAR:
        return f"a traced Python {item[1].__name__}"
    if kind == "I":
        return "an iterator of another element spec"
    if kind == "D":
        return "a dataset of another element spec"
    if kind == "n":
        return f"data of {', '.join(map(str, item[1]))} batch(es) iterated whole"
    if kind == "rows":
        return f"a padded batch of {item[1]} rows"
    return repr(item)[:80]


def _show_part(key: tuple) -> str:
    if key[0] in ("id", "mutable"):
        return "another object"
    if key[0] == "fn":
        return "another function"
    if isinstance(key[0], type):
        assert len(key) >= 2, "a Python value's key is (its type, its value...)"
        value = key[1:] if len(key) > 2 else key[1]
        if isinstance(value, tuple) and value and value[0] == "nan":
            value = "nan"
        return f"a Python {key[0].__name__} {str(value)[:60]}"
    return repr(key)[:60]


_FIX_SCALAR = ("pass Python numbers that change as arrays (e.g. jnp.float32(lr)), or make the function with "
               "strategy.function(fn, reduce_retracing=True), which traces Python numbers as values")


def _describe(fn: Callable, previous: tuple | None, now: tuple, cache_size: int) -> tuple[str, str]:
    """What changed between two traces, and the fix."""
    if previous is None:
        return "unknown", "call it with the same shapes, dtypes and Python values"
    (old_key, old_tree, old_parts, old_owner), (key, tree, parts, owner) = previous, now
    changed_parts = [(name, a, b) for (name, a), (_, b) in zip(parts, old_parts) if a != b] \
        if len(parts) == len(old_parts) else []
    if changed_parts:
        what = "; ".join(f"{n} ({_show_part(a)}, was {_show_part(b)})" for n, a, b in changed_parts[:_MAX_NAMED])
        return what, ("pass values that change as arguments, not captured by the function (numbers as "
                      "arrays: args=(x, jnp.float32(lr)))")
    other_function = owner() is None or old_owner() is not owner()
    if (old_tree != tree and str(old_tree) == str(tree)) and other_function:
        return ("another compiled function of the same Python function traced it (each such function, e.g. "
                "made by one factory line, compiles its own program)",
                "make the strategy.function once and call it for every use, or ignore this warning when "
                "the functions are meant to differ")
    if old_tree != tree or len(old_key) != len(key):
        if str(old_tree) == str(tree):
            return (f"the arguments' containers: the same nesting ({str(tree)[:120]}) but unequal node types "
                    "or data (a class defined twice, or a custom pytree node's auxiliary data)",
                    "pass containers of the same classes every time (define namedtuples and dataclasses once)")
        return (f"the structure of the arguments ({str(tree)[:120]}, was {str(old_tree)[:120]})",
                "call it with the same nesting of lists, tuples and dicts every time")
    names = leaf_names(fn, tree, len(key) - 1)
    changed = [i for i in range(1, len(key)) if key[i] != old_key[i]]
    mutable = [name for name, k in parts if k[0] == "mutable"]
    if not changed and mutable:
        return (f"nothing in the arguments: a new function object each call, and it reads {', '.join(mutable[:3])}, "
                "which may have changed (a mutable object), so a new function of the same code traces again",
                "define the function once, outside the loop, and pass what changes as arguments")
    if not changed:
        return ("nothing in the arguments: a new compiled function of the same Python function was made, or "
                "its program had been evicted from the cache",
                f"make the strategy.function once, outside the loop, and call it; with many signatures "
                f"in use, raise STRATEGAX_CACHE_SIZE (now {cache_size})")
    what = "; ".join(f"argument `{names[i - 1] if i - 1 < len(names) else 'batch rows'}` "
                     f"({_show(key[i])}, was {_show(old_key[i])})" for i in changed[:_MAX_NAMED])
    first, before = key[changed[0]], old_key[changed[0]]
    if first[0] == STATIC and first[1] in (int, float, complex):
        fix = _FIX_SCALAR
    elif first[0] == STATIC:
        fix = "keep the Python value the same between calls, or pass what changes as an array"
    elif first[0] in (MIRRORED, PER_REPLICA) and before[0] == first[0] and first[1] != before[1]:
        fix = "keep shapes fixed: pad or bucket inputs to a few shapes (distributed datasets pad partial batches)"
    elif first[0] in (MIRRORED, PER_REPLICA) and before[0] == first[0]:
        fix = "cast inputs to one dtype"
    else:
        fix = "call it with the same kinds of arguments every time"
    return what, fix
