"""strategax's effects in JAX's effect system, so that no JAX transformation (jit, remat,
grad, vmap, cond, while, scan, custom_vjp) drops or duplicates a variable access or a
collective: JAX's dead-code elimination keeps effectful equations whose results are unused,
and remat never recomputes them. They are unordered: strategax never lowers its primitives
through JAX's MLIR path (the IR fixes their order), so no token threading is needed."""
from __future__ import annotations

from jax._src import effects as jax_effects


class VariableEffect(jax_effects.Effect):
    """Reads or writes a strategax variable."""

    def __str__(self) -> str:
        return "StrategaxVariable"


class CollectiveEffect(jax_effects.Effect):
    """Communicates across replicas."""

    def __str__(self) -> str:
        return "StrategaxCollective"


class InputEffect(jax_effects.Effect):
    """Takes the next batch from an input iterator, or marks an `sx.range` loop: trace-time
    only, turned into program inputs and a loop before the IR is made (`trace/batches/outline.py`)."""

    def __str__(self) -> str:
        return "StrategaxInput"


VARIABLE = VariableEffect()
COLLECTIVE = CollectiveEffect()
INPUT = InputEffect()

for _type in (VariableEffect, CollectiveEffect, InputEffect):
    jax_effects.control_flow_allowed_effects.add_type(_type)
    jax_effects.custom_derivatives_allowed_effects.add_type(_type)
    jax_effects.remat_allowed_effects.add_type(_type)
