"""Deliberately broken passes, for checking the fuzzer itself (issue 35): each mutant replaces
one snippet of one pass's source and re-executes the module in place (its functions and
classes replaced; `PASSES` resolves the pass class by name on use). `tools/fuzz.py --mutants`
runs the suite-budget fuzzer against each and records which it catches."""
from __future__ import annotations

import contextlib
import importlib
import inspect
from typing import Iterator

# name -> (module, the snippet, what replaces it, what the mutation means)
MUTANTS: dict[str, tuple[str, str, str, str]] = {
    "gather-sum-as-mean": (
        "strategax.passes.simplify_collectives", '{"op": "sum", "reason": reason}',
        '{"op": "mean", "reason": reason}',
        "simplify-collectives: the all_reduce SUM made from a summed all_gather is a MEAN"),
    "mirrored-sum-times-n-minus-1": (
        "strategax.passes.simplify_collectives", "new = _times_n(op, x, num_replicas)",
        "new = _times_n(op, x, num_replicas - 1)",
        "simplify-collectives: SUM of a mirrored value is (N-1) times it"),
    "mirrored-sum-is-value": (
        "strategax.passes.simplify_collectives", '_SAME_ON_MIRRORED = ("mean", "max", "min")',
        '_SAME_ON_MIRRORED = ("mean", "max", "min", "sum")',
        "simplify-collectives: SUM of a mirrored value is the value"),
    "merged-gather-use-uncounted": (
        "strategax.passes.simplify_collectives", "and rw.num_uses(g.result) == 1):",
        "and len(rw.users(g.result)) + sum(r is g.result for r in rw.block.results) == 1):",
        "simplify-collectives: a gather's uses counted without those of a duplicate merged into it"),
    "mean-aggregation-as-sum": (
        "strategax.passes.insert_collectives", '{"op": agg, "reason": reason, "carries": "variable"}',
        '{"op": "sum" if agg == "mean" else agg, "reason": reason, "carries": "variable"}',
        "insert-collectives: a MEAN variable's update is summed"),
    "bucket-results-reversed": (
        "strategax.passes.fuse_collectives", "for m, r in zip(members, bucket.results):",
        "for m, r in zip(members, list(bucket.results)[::-1]):",
        "fuse-collectives: a bucket's results handed to its members in the wrong order"),
    "bucket-ignores-variable-order": (
        "strategax.passes.fuse_collectives", "deps |= effects  #", "deps |= frozenset()  #",
        "fuse-collectives: a bucket takes in a reduction that follows a write of its result (issue 35's bug)"),
    "cse-ignores-attributes": (
        "strategax.passes.cse", "first.setdefault(op_key(op), op.results)",
        "first.setdefault(op_key(op)[:2], op.results)",
        "cse: ops differing only in attributes (SUM and MEAN all_reduces) merged"),
    "dce-drops-writes": (
        "strategax.passes.dce", "if not may_write(op) and not any(r in live for r in op.results):",
        "if not any(r in live for r in op.results):",
        "dce: a variable update whose value nobody reads is dropped"),
    "canonicalize-x-plus-1": (
        "strategax.passes.canonicalize", '"jax.add": _neutral(0, (0, 1)),', '"jax.add": _neutral(1, (0, 1)),',
        "canonicalize: x + 1 folded to x"),
    "mask-dropped": (
        "strategax.passes.mask_padding.masker", 'self.rw.set_operand(op, k, self.new(op, "sx.mask_rows"',
        '(lambda *_: None)(op, k, self.new(op, "sx.mask_rows"',
        "mask-padding: the mask of a padded row reduction dropped"),
    "real-divisor-dropped": (
        "strategax.passes.mask_padding.masker", "self.real_divisor(op, d, total, count, padded, None)", "pass",
        "mask-padding: a mean over padded rows divides by the padded count"),
    "fixed-extent-contracted": (
        "strategax.passes.mask_padding.fixed_extents", "            found.append((at, f\"{name} meets",
        "            (lambda *_: None)((at, f\"{name} meets",
        "mask-padding: a value of a fixed size met along a padded axis (x @ W) contracted, not a gap"),
}


@contextlib.contextmanager
def mutated(name: str) -> Iterator[str]:
    """Run the block with mutant `name` in place; the module's original code is restored after."""
    module_name, old, new, what = MUTANTS[name]
    module = importlib.import_module(module_name)
    source = inspect.getsource(module)
    assert source.count(old) == 1, f"mutant {name}: the snippet is not found once in {module_name}"
    saved = dict(module.__dict__)
    exec(compile(source.replace(old, new), module.__file__ or module_name, "exec"), module.__dict__)
    try:
        yield what
    finally:
        module.__dict__.clear()
        module.__dict__.update(saved)
