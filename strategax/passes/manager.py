"""The pass table, the pass manager and the default pipeline.

A pass is a small frozen dataclass with a `name`, its options as fields and one
`apply(module) -> module`. The manager verifies after each pass when asked and, on failure,
names the pass and those that ran before it.
"""
from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

from ..ir import Module, VerifyError, print_module, verify


class Pass(Protocol):
    name: str

    def apply(self, module: Module) -> Module: ...


# name -> "module:Class", imported on first use
PASSES: dict[str, str] = {
    "infer-locality": "strategax.passes.infer_locality:InferLocality",
    "dce": "strategax.passes.dce:DeadCodeElimination",
    "propagate-sharding": "strategax.passes.propagate_sharding:PropagateSharding",
    "insert-collectives": "strategax.passes.insert_collectives:InsertCollectives",
    "check-locality": "strategax.passes.check_locality:CheckLocality",
    "central-storage": "strategax.passes.central_storage:CentralStorage",
    "canonicalize": "strategax.passes.canonicalize:Canonicalize",
    "cse": "strategax.passes.cse:CommonSubexpressionElimination",
    "simplify-collectives": "strategax.passes.simplify_collectives:SimplifyCollectives",
    "fuse-collectives": "strategax.passes.fuse_collectives:FuseCollectives",
}
# Why this order: fold identities first so every later pattern sees one form; drop dead code
# before collectives are inserted for it; localities are needed to check TensorFlow's rules and
# to simplify collectives of mirrored values; cse then merges what simplification exposed;
# shardings propagate before fusion, which must not pack values split over logical devices;
# central-storage right after insert-collectives (a no-op except under CentralStorageStrategy)
# so that every later pass sees its broadcasts and reductions like any other collective;
# fusion packs the collectives that are left (after cse, so duplicates are not packed twice);
# dce removes what the rewrites orphaned.
DEFAULT_PIPELINE: tuple[str, ...] = ("canonicalize", "dce", "insert-collectives", "central-storage",
                                     "infer-locality",
                                     "check-locality", "simplify-collectives", "cse",
                                     "propagate-sharding", "fuse-collectives", "dce")


class PassLookupError(KeyError, ValueError):
    """No pass is registered under that name."""

    def __str__(self) -> str:
        return str(self.args[0])


def get_pass(name: str, **options) -> Pass:
    """Instantiate the pass registered as `name` with `options`."""
    target = PASSES.get(name)
    if target is None:
        raise PassLookupError(f"unknown pass {name!r}; known passes: {', '.join(sorted(PASSES))}")
    module_name, cls_name = target.split(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    return cls(**options)


class PassFailure(VerifyError):
    """The module a pass produced does not verify."""


@dataclass
class PassManager:
    passes: list[Pass]
    verify_each: bool = False
    print_after_all: bool = False
    printer: Callable[[str], None] = print
    timings: dict[str, float] = field(default_factory=dict)
    snapshots: dict[str, Module] | None = None  # stage name -> IR text kept when given

    def run(self, module: Module) -> Module:
        done: list[str] = []
        for p in self.passes:
            start = time.perf_counter()
            module = p.apply(module)
            self.timings[p.name] = self.timings.get(p.name, 0.0) + time.perf_counter() - start
            done.append(p.name)
            if self.verify_each:
                try:
                    verify(module)
                except VerifyError as e:
                    before = ", ".join(done[:-1]) or "none"
                    failure = PassFailure(f"after pass {p.name!r} (passes before it: {before}): {e}")
                    failure.op = e.op
                    raise failure from None
            if self.snapshots is not None:
                stage = p.name if p.name not in self.snapshots else f"{p.name}#{done.count(p.name)}"
                self.snapshots[stage] = print_module(module)
            if self.print_after_all:
                self.printer(f"// -----// IR after {p.name} //----- //\n{print_module(module)}")
        return module


def default_pipeline(**kwargs) -> PassManager:
    """A PassManager running DEFAULT_PIPELINE."""
    return PassManager([get_pass(n) for n in DEFAULT_PIPELINE], **kwargs)


def _option_value(text: str):
    text = text.strip()
    if text in ("true", "false"):
        return text == "true"
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text.strip('"')


def parse_pipeline(spec: str) -> list[Pass]:
    """Passes from `a,b{opt=1,other=x},c`; `default` stands for DEFAULT_PIPELINE.

    Raises ValueError for unknown passes, unknown options or unbalanced braces."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(spec + ","):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced '}}' in pass pipeline {spec!r}")
        elif ch == "," and depth == 0:
            if spec[start:i].strip():
                items.append(spec[start:i].strip())
            start = i + 1
    if depth:
        raise ValueError(f"unbalanced '{{' in pass pipeline {spec!r}")
    passes: list[Pass] = []
    for item in items:
        name, _, rest = item.partition("{")
        name = name.strip()
        if name == "default" and not rest:
            passes.extend(get_pass(n) for n in DEFAULT_PIPELINE)
            continue
        options = {}
        for pair in filter(None, (x.strip() for x in rest.rstrip("}").split(","))):
            key, eq, value = pair.partition("=")
            if not eq:
                raise ValueError(f"pass option {pair!r} is not `name=value`")
            options[key.strip().replace("-", "_")] = _option_value(value)
        try:
            passes.append(get_pass(name, **options))
        except TypeError:
            raise ValueError(f"pass {name!r} has no option(s) {', '.join(options)}") from None
    return passes
