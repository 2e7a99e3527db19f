"""The op families, each whole in one module: declaration, JAX primitive, abstract evaluation,
effects, AD, batching, lowering and reference rules side by side (as JAX's
`lax/parallel.py` keeps a primitive's rules together).

- `jax_ops`: every JAX primitive as a generic `jax.<name>` op;
- `collectives`: `sx.constant`, `sx.replica_id`, `sx.all_reduce`, `sx.all_gather`;
- `bucket`: `sx.all_reduce_bucket` (made by fuse-collectives);
- `variables`: `sx.var_read`, `sx.var_assign*`, `sx.broadcast`;
- `logical`: the logical-device annotations;
- `control_flow`: `jax.cond`, `jax.while`, `jax.scan` with regions;
- `rows`: `sx.rows` (a padded batch's row axis) and `sx.mask_rows` (its padded rows hidden).
"""
from . import bucket, collectives, control_flow, jax_ops, logical, rows, variables
from .jax_ops import INLINED_PRIMITIVES, DERIVED_PARAMS, generic_lowering, generic_reference, register_primitive
from .registry import LOWERINGS, REFERENCE

__all__ = ["DERIVED_PARAMS", "INLINED_PRIMITIVES", "LOWERINGS", "REFERENCE", "bucket", "collectives",
           "control_flow", "generic_lowering", "generic_reference", "jax_ops", "logical",
           "register_primitive", "rows", "variables"]
