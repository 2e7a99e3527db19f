"""The pass table, the pass manager and the default pipeline.

A pass is a small frozen dataclass with a class-level `name` and `requires`, its options as
fields and one `apply(module) -> bool` that changes the module in place and says whether it
changed anything. The manager checks that every pass's requirements run before it (or already
hold on the module it is given), verifies after each pass when asked (`verify_each`, on by
default when the environment has STRATEGAX_VERIFY=1, as the test suite does) and, on failure,
names the pass and those that ran before it. An exception from a pass that is not one of
strategax's named errors (a KeyError, an AssertionError...) is a bug: it is re-raised as
`InternalError` naming the pass, the op and the user's line.
"""
from __future__ import annotations

import dataclasses
import importlib
import os
import time
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Protocol

from ..errors import InternalError, internal_error, is_named
from ..ir import Module, VerifyError, print_module, verify


class Pass(Protocol):
    name: ClassVar[str]
    requires: ClassVar[tuple[str, ...]]  # passes whose results this one reads

    def apply(self, module: Module) -> bool: ...


# name -> "module:Class", imported on first use
PASSES: dict[str, str] = {
    "infer-locality": "strategax.passes.locality.infer_locality:InferLocality",
    "dce": "strategax.passes.dce:DeadCodeElimination",
    "propagate-sharding": "strategax.passes.propagate_sharding:PropagateSharding",
    "insert-collectives": "strategax.passes.insert_collectives:InsertCollectives",
    "check-locality": "strategax.passes.locality.check_locality:CheckLocality",
    "central-storage": "strategax.passes.central_storage:CentralStorage",
    "canonicalize": "strategax.passes.canonicalize:Canonicalize",
    "mask-padding": "strategax.passes.mask_padding:MaskPadding",
    "cse": "strategax.passes.cse:CommonSubexpressionElimination",
    "simplify-collectives": "strategax.passes.simplify_collectives:SimplifyCollectives",
    "fuse-collectives": "strategax.passes.fuse_collectives:FuseCollectives",
    "compress-collectives": "strategax.passes.compress_collectives:CompressCollectives",
    "shard-optimizer-state": "strategax.passes.shard_optimizer_state:ShardOptimizerState",
    "fold-double-negation": "strategax.passes.examples.fold_double_negation:FoldDoubleNegation",  # docs' example
}
# Why this order: fold identities first so every later pattern sees one form; drop dead code
# before collectives are inserted for it; mask-padding then follows the padded rows through
# what is left (dead code could only raise spurious errors), and its masks are ordinary ops to
# every later pass; localities are needed to check TensorFlow's rules and
# to simplify collectives of mirrored values; cse then merges what simplification exposed;
# shardings propagate before fusion, which must not pack values split over logical devices;
# central-storage right after insert-collectives (a no-op except under CentralStorageStrategy)
# so that every later pass sees its broadcasts and reductions like any other collective;
# shard-optimizer-state makes the gradient reductions a sharded optimizer takes pieces of
# reduce-scatters before compression and fusion, which then treat them like all_reduces;
# compression casts the all_reduces that ask for it before fusion, which buckets by dtype;
# fusion packs the collectives that are left (after cse, so duplicates are not packed twice);
# dce removes what the rewrites orphaned.
DEFAULT_PIPELINE: tuple[str, ...] = ("canonicalize", "dce", "mask-padding", "insert-collectives", "central-storage",
                                     "infer-locality",
                                     "check-locality", "simplify-collectives", "cse", "shard-optimizer-state",
                                     "compress-collectives", "propagate-sharding", "fuse-collectives", "dce")


class PassLookupError(KeyError, ValueError):
    """No pass is registered under that name."""

    def __str__(self) -> str:
        return str(self.args[0])


def pass_class(name: str) -> type:
    """The class of the pass registered as `name`."""
    target = PASSES.get(name)
    if target is None:
        raise PassLookupError(f"unknown pass {name!r}; known passes: {', '.join(sorted(PASSES))}")
    module_name, cls_name = target.split(":")
    return getattr(importlib.import_module(module_name), cls_name)


def get_pass(name: str, **options) -> Pass:
    """Instantiate the pass registered as `name` with `options`."""
    return pass_class(name)(**options)


class PassOptionError(ValueError):
    """A pass option in a pipeline is unknown or cannot be read as its declared type."""


def pass_options(name: str) -> dict[str, type]:
    """The options of pass `name` (its dataclass fields) and their types."""
    cls = pass_class(name)
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


def convert_option(pass_name: str, key: str, text: str, kind: type) -> Any:
    """`text` read as option `key` of `pass_name`, of type `kind` (str, bool, int or float)."""
    text = text.strip()
    if kind is str:
        return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == '"' else text
    if kind is bool and text.lower() in _TRUE + _FALSE:
        return text.lower() in _TRUE
    if kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    raise PassOptionError(f"pass {pass_name!r}: option {key!r} takes {kind.__name__} values, "
                          f"not {text!r}")


class PassFailure(InternalError):
    """The module a pass produced does not verify: a bug in strategax, so an `sx.InternalError`
    (API.md) naming the pass, the passes before it, the op and the user's line; the verifier's
    `VerifyError` is its cause."""


class PassOrderError(ValueError):
    """A pass runs before a pass it requires, on a module its requirement does not hold for."""


def check_requirements(p: Pass, done: list[str], later: list[str], module: Module) -> None:
    """Raise PassOrderError unless each pass `p` requires ran before it (in `done`) or, when it is
    not in the pipeline at all, already holds on `module` (its class's `satisfied(module)`)."""
    for need in p.requires:
        if need in done:
            continue
        if need in later:
            raise PassOrderError(f"pass {p.name!r} reads what {need!r} computes, but {need!r} runs "
                                 f"after it: put {need!r} before {p.name!r} in the pipeline")
        satisfied = getattr(pass_class(need), "satisfied", None)
        if satisfied is None or not satisfied(module):
            raise PassOrderError(f"pass {p.name!r} needs {need!r} to have run, and the module does not "
                                 f"show it has: add {need!r} before {p.name!r} in the pipeline")


def verify_from_env() -> bool:
    """STRATEGAX_VERIFY=1: verify the module after every pass (the test suite sets it)."""
    return os.environ.get("STRATEGAX_VERIFY", "") not in ("", "0")


@dataclass
class PassManager:
    passes: list[Pass]
    verify_each: bool = field(default_factory=verify_from_env)
    print_after_all: bool = False
    printer: Callable[[str], None] = print
    timings: dict[str, float] = field(default_factory=dict)
    snapshots: dict[str, str] | None = None  # stage name -> IR text kept when given
    changed: dict[str, bool] = field(default_factory=dict)  # pass name -> whether it changed anything

    def run(self, module: Module) -> Module:
        """Run the passes on `module` in place (and return it)."""
        done: list[str] = []
        names = [p.name for p in self.passes]
        for i, p in enumerate(self.passes):
            check_requirements(p, done, names[i + 1:], module)
            start = time.perf_counter()
            try:
                changed = p.apply(module)
            except Exception as e:
                if is_named(e):
                    raise
                before = ", ".join(done) or "none"
                raise internal_error(e, f"pass {p.name!r} (passes before it: {before})") from e
            self.changed[p.name] = changed or self.changed.get(p.name, False)
            self.timings[p.name] = self.timings.get(p.name, 0.0) + time.perf_counter() - start
            done.append(p.name)
            if self.verify_each:
                try:
                    verify(module)
                except VerifyError as e:
                    before = ", ".join(done[:-1]) or "none"
                    raise internal_error(e, f"pass {p.name!r} (passes before it: {before})", e.op,
                                         f"the module it left does not verify: {e}", PassFailure) from e
            if self.snapshots is not None:
                stage = p.name if p.name not in self.snapshots else f"{p.name}#{done.count(p.name)}"
                self.snapshots[stage] = print_module(module)
            if self.print_after_all:
                self.printer(f"// -----// IR after {p.name} //----- //\n{print_module(module)}")
        return module


def default_pipeline(**kwargs) -> PassManager:
    """A PassManager running DEFAULT_PIPELINE."""
    return PassManager([get_pass(n) for n in DEFAULT_PIPELINE], **kwargs)


def parse_pipeline(spec: str) -> list[Pass]:
    """Passes from `a,b{opt=1,other=x},c`; `default` stands for DEFAULT_PIPELINE.

    Options are converted to the types the pass dataclass declares. Raises ValueError for
    unknown passes, unknown or ill-typed options and unbalanced braces."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(spec + ","):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth < 0:
                raise PassOptionError(f"unbalanced '}}' in pass pipeline {spec!r}")
        elif ch == "," and depth == 0:
            if spec[start:i].strip():
                items.append(spec[start:i].strip())
            start = i + 1
    if depth:
        raise PassOptionError(f"unbalanced '{{' in pass pipeline {spec!r}")
    passes: list[Pass] = []
    for item in items:
        name, _, rest = item.partition("{")
        name = name.strip()
        if name == "default" and not rest:
            passes.extend(get_pass(n) for n in DEFAULT_PIPELINE)
            continue
        known = pass_options(name)
        options = {}
        for pair in filter(None, (x.strip() for x in rest.rstrip("}").split(","))):
            key, eq, value = pair.partition("=")
            key = key.strip().replace("-", "_")
            if not eq:
                raise PassOptionError(f"pass {name!r}: option {pair!r} is not `name=value`")
            if key not in known:
                raise PassOptionError(f"pass {name!r} has no option {key!r}; its options: "
                                      f"{', '.join(known) or 'none'}")
            options[key] = convert_option(name, key, value, known[key])
        passes.append(get_pass(name, **options))
    return passes
