"""Place a value on one logical device: a Shardy maximal-sharding constraint.

JAX's `with_sharding_constraint` takes no maximal shardings, so a private primitive lowers
to `sdy.sharding_constraint` on a maximal mesh (`device_ids=[k]`), which XLA's partitioner
reads as "compute this on device k".
"""
from __future__ import annotations

from jax._src.interpreters import mlir
from jax._src.lib.mlir import dialects
from jax._src.named_sharding import SdyArray
from jax.extend.core import Primitive
from jax.interpreters import ad

maximal_p = Primitive("strategax_place_on_logical_device")
maximal_p.def_impl(lambda x, *, device: x)
maximal_p.def_abstract_eval(lambda x, *, device: x)
ad.deflinear2(maximal_p, lambda ct, x, *, device: [maximal_p.bind(ct, device=device)])


def _lower(ctx, x, *, device):
    from jax._src import config

    if not config.use_shardy_partitioner.value:
        return [x]  # GSPMD: no maximal constraint inside shard_map; the value stays replicated
    attr = SdyArray(mesh_shape=(), dim_shardings=(), logical_device_ids=(device,))
    return [dialects.sdy.sharding_constraint(x, attr.build(ctx.module_context.sharding_attr_cache))]


mlir.register_lowering(maximal_p, _lower)


def place_on_logical_device(x, device: int):
    """`x`, computed on logical device `device` of the replica."""
    return maximal_p.bind(x, device=int(device))
