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
}
DEFAULT_PIPELINE: tuple[str, ...] = ("dce", "insert-collectives", "central-storage", "infer-locality",
                                     "check-locality", "propagate-sharding")


def get_pass(name: str, **options) -> Pass:
    """Instantiate the pass registered as `name` with `options`."""
    target = PASSES.get(name)
    if target is None:
        raise KeyError(f"unknown pass {name!r}; known passes: {', '.join(sorted(PASSES))}")
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
                    raise PassFailure(f"after pass {p.name!r} (passes before it: {before}): {e}") from None
            if self.snapshots is not None:
                self.snapshots[p.name] = print_module(module)
            if self.print_after_all:
                self.printer(f"// -----// IR after {p.name} //----- //\n{print_module(module)}")
        return module


def default_pipeline(**kwargs) -> PassManager:
    return PassManager([get_pass(n) for n in DEFAULT_PIPELINE], **kwargs)
