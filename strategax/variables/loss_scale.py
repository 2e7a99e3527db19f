"""The loss scale of `sx.Optimizer(tx, loss_scale=...)`: TensorFlow's `LossScaleOptimizer` rule
for float16 training (tf_keras 2.21, the API with `get_scaled_loss`/`get_unscaled_gradients`).

"dynamic": the scale starts at 2**15; a step whose (all-reduced) gradients hold an inf or NaN
is skipped and halves the scale (never below 1); `growth_steps` good steps in a row double it
(when the double is finite). The scale and its good-step counter are variables, so checkpoints
keep them. A fixed number never changes and never skips a step, as TensorFlow's.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from ..errors import DistributionTypeError, DistributionValueError
from .enums import VariableAggregation
from .variables import Variable

INITIAL_SCALE = 2.0 ** 15
GROWTH_STEPS = 2000


def all_finite(grads: list) -> jax.Array:
    """True when no gradient holds an inf or NaN (TF's `_is_all_finite`)."""
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(g)) for g in grads])) if grads else jnp.bool_(True)


class FixedLossScale:
    """A constant scale: gradients are always applied."""

    def __init__(self, scale: float):
        self.initial_scale = float(scale)

    def value(self) -> jax.Array:
        return jnp.float32(self.initial_scale)

    def variables(self) -> dict[tuple[str, ...], Variable]:
        return {}


class DynamicLossScale:
    """The scale and its good-step counter as variables, updated at every apply_gradients."""

    def __init__(self, optimizer_name: str, initial_scale: float = INITIAL_SCALE,
                 growth_steps: int = GROWTH_STEPS):
        self.initial_scale, self.growth_steps = float(initial_scale), int(growth_steps)
        kwargs = {"trainable": False, "aggregation": VariableAggregation.ONLY_FIRST_REPLICA}
        # TF's names (its checkpoint keys under the optimizer): loss_scale/current_loss_scale, good_steps
        self.current = Variable(self.initial_scale, name=f"{optimizer_name}/loss_scale/current_loss_scale",
                                dtype=jnp.float32, **kwargs)
        self.good_steps = Variable(0, name=f"{optimizer_name}/loss_scale/good_steps", dtype=jnp.int32, **kwargs)

    def value(self) -> jax.Array:
        return self.current.read_value()

    def variables(self) -> dict[tuple[str, ...], Variable]:
        return {("loss_scale", "current_loss_scale"): self.current, ("loss_scale", "good_steps"): self.good_steps}

    def update(self, finite) -> None:
        """Halve (at least 1) and restart the count on a non-finite step; count a good one,
        doubling the scale and restarting the count at `growth_steps`."""
        scale, good = self.current.read_value(), self.good_steps.read_value()
        grow = good + 1 >= self.growth_steps
        doubled = scale * 2.0
        grown = jnp.where(grow & jnp.isfinite(doubled), doubled, scale)
        self.current.assign(jnp.where(finite, grown, jnp.maximum(scale / 2.0, 1.0)))
        self.good_steps.assign(jnp.where(finite & ~grow, good + 1, 0).astype(jnp.int32))


def make(loss_scale, optimizer_name: str) -> FixedLossScale | DynamicLossScale | None:
    """The loss scale `sx.Optimizer(loss_scale=...)` asks for: None, "dynamic" or a number."""
    fix = "pass loss_scale=\"dynamic\" (TensorFlow's LossScaleOptimizer) or a fixed scale such as 1024.0"
    if loss_scale is None:
        return None
    if loss_scale == "dynamic":
        return DynamicLossScale(optimizer_name)
    if isinstance(loss_scale, bool) or not isinstance(loss_scale, (int, float, str)):
        raise DistributionTypeError(f"loss_scale must be None, \"dynamic\" or a number, not "
                                    f"{type(loss_scale).__name__} {loss_scale!r:.60}", fix)
    if isinstance(loss_scale, str) or not (math.isfinite(loss_scale) and loss_scale > 0):
        raise DistributionValueError(f"loss_scale must be \"dynamic\" or a positive finite number, not "
                                     f"{loss_scale!r:.60}", fix)
    return FixedLossScale(loss_scale)
