"""The op families, each whole in one module: declaration, JAX primitive, abstract evaluation,
effects, AD, batching, lowering and reference rules side by side (as JAX's
`lax/parallel.py` keeps a primitive's rules together).

- `jax_ops`: every JAX primitive as a generic `jax.<name>` op (`primitives`: found by name;
  `jax_attrs`: its parameters as IR attributes and back);
- `collectives`: `sx.constant`, `sx.replica_id`, `sx.all_reduce`, `sx.all_gather`;
- `bucket`: `sx.all_reduce_bucket` (made by fuse-collectives);
- `variables`: `sx.var_read`, `sx.var_assign*`, `sx.broadcast`;
- `logical`: the logical-device annotations;
- `control_flow`: `jax.cond`, `jax.while`, `jax.scan` with regions;
- `rows`: `sx.rows` (a padded batch's row axis), `sx.mask_rows` (its padded rows hidden) and
  `sx.row_ones` (a 1 per row, which a masked sum counts real rows with).
"""
from . import bucket, collectives, control_flow, jax_attrs, jax_ops, logical, rows, variables
from .jax_attrs import AttrError, from_attr, to_attr
from .jax_ops import INLINED_PRIMITIVES, DERIVED_PARAMS, bind_params, generic_lowering, generic_reference
from .primitives import find_primitive, register_primitive
from .registry import LOWERINGS, REFERENCE

__all__ = ["AttrError", "DERIVED_PARAMS", "INLINED_PRIMITIVES", "LOWERINGS", "REFERENCE", "bind_params", "bucket",
           "collectives", "control_flow", "find_primitive", "from_attr", "generic_lowering",
           "generic_reference", "jax_attrs", "jax_ops", "logical", "register_primitive", "rows",
           "to_attr", "variables"]
