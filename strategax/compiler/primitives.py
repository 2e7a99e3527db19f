"""strategax's JAX primitives: the distribution operations as they appear while tracing.

Each primitive is named like the IR op it becomes (`sx.all_reduce`), so the importer turns
it into that op with its parameters as attributes. Abstract evaluation gives shapes;
linear rules make them differentiable (TensorFlow's rule: the gradient of an all_reduce is the
same all_reduce of the gradient).
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import core as jax_core
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import ad

from ..ir import register_primitive


def _primitive(name: str) -> Primitive:
    p = Primitive(name)
    register_primitive(p)
    return p


def _no_impl(*args, **params):
    raise RuntimeError("strategax distribution primitives only run inside a compiled strategax "
                       "program; call them inside strategy.run")


# --- sx.all_reduce -----------------------------------------------------------------------
all_reduce_p = _primitive("sx.all_reduce")
all_reduce_p.def_impl(_no_impl)
all_reduce_p.def_abstract_eval(lambda x, *, op, reason, **extra: jax_core.ShapedArray(x.shape, x.dtype))


def _all_reduce_transpose(ct, x, *, op, reason, **extra):
    if op not in ("sum", "mean"):
        raise TypeError(f"all_reduce({op.upper()}) is not differentiable; use SUM or MEAN")
    return [all_reduce_p.bind(ct, op=op, reason=f"gradient of {reason}", **extra)]


ad.deflinear2(all_reduce_p, _all_reduce_transpose)


def all_reduce(x, op: str, reason: str, *, bytes_per_pack: int | None = None):
    """All-reduce `x`; `bytes_per_pack` (from CommunicationOptions) becomes an op attribute that
    `fuse-collectives` reads (absent: the pass's default, one bucket per op and group)."""
    extra = {} if bytes_per_pack is None else {"bytes_per_pack": int(bytes_per_pack)}
    return all_reduce_p.bind(jnp.asarray(x), op=op, reason=reason, **extra)


# --- sx.all_gather -----------------------------------------------------------------------
all_gather_p = _primitive("sx.all_gather")
all_gather_p.def_impl(_no_impl)


def _all_gather_abstract(x, *, axis, num_replicas, reason):
    shape = list(x.shape)
    shape[axis] *= num_replicas
    return jax_core.ShapedArray(tuple(shape), x.dtype)


all_gather_p.def_abstract_eval(_all_gather_abstract)


def _all_gather_transpose(ct, x, *, axis, num_replicas, reason):
    # Each replica's piece receives the sum over replicas of that piece's cotangent.
    total = all_reduce_p.bind(ct, op="sum", reason=f"gradient of {reason}")
    size = total.shape[axis] // num_replicas
    start = replica_id() * size
    return [lax.dynamic_slice_in_dim(total, start, size, axis)]


ad.deflinear2(all_gather_p, _all_gather_transpose)


def all_gather(x, axis: int, num_replicas: int, reason: str):
    x = jnp.asarray(x)
    if x.ndim == 0:
        from .errors import DistributionValueError

        raise DistributionValueError("all_gather of a scalar: there is no axis to concatenate along",
                                     "gather a value of rank >= 1 (e.g. x[None])")
    return all_gather_p.bind(x, axis=axis % x.ndim, num_replicas=num_replicas, reason=reason)


# --- sx.replica_id -----------------------------------------------------------------------
replica_id_p = _primitive("sx.replica_id")
replica_id_p.def_impl(_no_impl)
replica_id_p.def_abstract_eval(lambda: jax_core.ShapedArray((), np.dtype(np.int32)))


def replica_id():
    return replica_id_p.bind()
