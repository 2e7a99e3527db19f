"""Backends: the JAX lowering (one jit(shard_map) program) and a reference interpreter."""
from .jax_backend import Executable, LoweringContext, make_mesh
from .layout import AXIS, ReplicaLayout
from .reference import ReferenceContext, run_reference

__all__ = ["AXIS", "Executable", "LoweringContext", "ReferenceContext", "ReplicaLayout",
           "make_mesh", "run_reference"]
