"""mask-padding: padded rows of a partial batch (and padded entries of values whose shapes
differ across replicas) never count.

A padded input batch arrives marked `sx.rows %x, %count` (axis 0 is its row axis, the first
`count` rows are real); a value whose shape differs across replicas is padded to the largest
extent along each differing axis k and marked `sx.rows %x, %extent {axis = k, extent}`. Every
marked axis is a "row axis" below: the analysis is the same for all. The pass:

1. finds every axis that is a row axis (`axis_rules.rule` says how each op moves axes; axis
   identities are unified in both directions, so the backward pass jax.grad emitted is covered
   as well as the forward one; through `cond`/`while`/`scan` the operands, region arguments,
   region results and loop carries are unified as `control_flow.region_flows` pairs them, which
   makes the carries' row axes a fixpoint over the body);
2. makes an `sx.all_gather` along a row axis an `sx.all_gather_real`: the replicas' real
   entries concatenated (as TensorFlow concatenates values of different lengths), padded after
   them, with their total as the new count (the same on every replica); then follows again;
3. masks each op that combines rows: every operand axis it combines that is a row axis is
   passed through `sx.mask_rows` (a select against the op's identity, with the reason
   `padded rows`) first;
4. makes means count real rows: a row sum divided by the number of elements it added (what
   `jnp.mean`, `jnp.var`... lower to), and that division's transpose (a cotangent divided by
   that number, then broadcast along the rows), divide by the real count instead;
5. where a row axis reaches an op it cannot follow, records the gap (op, user's line, fix) in
   the module attribute `padding_gaps` instead of masking: a full batch has no padded rows and
   runs; a call that brings padding raises the gap's error (`padding_gap_error`). A collective
   that combines padded entries with the other replicas' (an all_reduce of rows, an all_gather
   along another axis) is right while every replica has the same real count: its gap raises
   only for a call whose counts differ (TensorFlow raises there too);
6. records how results of the entry function are trimmed after the program runs:
   `per_example_results`, those whose rows are an input batch's (row axis first), and
   `padded_results`, every result with a row axis, as (result, axis, "arg" or "out", index)
   entries: the count is that argument, or a result the pass appends to the function;
7. drops the marks.
Inside a region the real row count is threaded in as a new region constant
(`BlockRewriter.add_region_const`). A divisor inside a region is followed out through the
region's constant operands (`divisors.py`); one the pass cannot evaluate and that no runtime
value reaches is a gap (step 5): it is never taken for the row count by its shape.

A `jnp.where(sx.nn.batch_mask(x), x, fill)` written by the user already says what padded rows
hold: the analysis does not follow rows through it.

One module per step: `rows.py` (1), `counts.py` (2, and where each count is visible),
`masker.py` (3, 4), `divisors.py` (what a divisor is), `gaps.py` (5: the gaps and their
errors), `fixed_extents.py` (5: a value of a fixed size met along a padded axis, `x @ W`
contracting widths that differ, is a gap), `results.py` (6), `pass_.py` (the pass, in order).
"""
from .gaps import (GAPS, PADDED, PADDED_RESULTS, REASON, UNEVEN, Gap, PaddedResult, gaps_raised,
                   padded_results, padding_gap_error, padding_gaps)
from .pass_ import MaskPadding

__all__ = ["GAPS", "PADDED", "PADDED_RESULTS", "REASON", "UNEVEN", "Gap", "MaskPadding", "PaddedResult",
           "gaps_raised", "padded_results", "padding_gap_error", "padding_gaps"]
