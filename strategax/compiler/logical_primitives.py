"""JAX primitives for the logical-device annotations; each becomes the IR op of its name.

They are identities on values; the gradient of an annotated value carries the same
annotation (as XLA's partitioner shards a cotangent like its primal).
"""
from __future__ import annotations

from jax.extend.core import Primitive
from jax.interpreters import ad

from ..ir import register_primitive
from ..ir.logical_ops import ASSIGN, REPLICATE, SPLIT
from .primitives import _no_impl


def _annotation(name: str) -> Primitive:
    p = Primitive(name)
    register_primitive(p)
    p.def_impl(_no_impl)
    p.def_abstract_eval(lambda x, **params: x)
    ad.deflinear2(p, lambda ct, x, **params: [p.bind(ct, **params)])
    return p


split_p = _annotation(SPLIT)
assign_p = _annotation(ASSIGN)
replicate_p = _annotation(REPLICATE)
