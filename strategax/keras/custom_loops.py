"""Keras objects in a custom training loop (TensorFlow's "Custom training with
tf.distribute.Strategy" with a Keras model, optimizer and metrics): a Keras variable created
inside a strategax scope is stored in a strategax variable of the same `synchronization` and
`aggregation` (tf.distribute's words, kept by Keras 3: a metric's total is a sync-on-read SUM
variable, a weight a mirrored one), so a `strategy.function` reads and updates it as program
state; and a Keras optimizer's `apply_gradients` in replica context does the seed's recipe:
`merge_call`, `batch_reduce_to(SUM)` of the gradients, then Keras' own update in cross-replica
context. Called from `_keras3.install()` (this module touches Keras' variable and optimizer
classes too, for the versions `_keras3.SUPPORTED` names)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.core import Tracer

from .. import _context
from ..distribute.context import get_replica_context
from ..distribute.reduce_op import ReduceOp
from ..variables import Variable, VariableAggregation, VariableSynchronization
from . import steps
from .errors import KerasAdapterError

_SYNC = {"auto": VariableSynchronization.AUTO, "on_write": VariableSynchronization.ON_WRITE,
         "on_read": VariableSynchronization.ON_READ, "none": VariableSynchronization.NONE}
_AGG = {"none": VariableAggregation.NONE, "mean": VariableAggregation.MEAN, "sum": VariableAggregation.SUM,
        "only_first_replica": VariableAggregation.ONLY_FIRST_REPLICA}
_BACKED: dict[type, type] = {}


def backed_class(cls: type) -> type:
    """`cls` whose `_value` is its strategax variable's value (read and assigned through it)."""
    made = _BACKED.get(cls)
    if made is None:
        def get(self):
            shadow = self.__dict__.get("_sx_shadow")
            if shadow is not None:
                return shadow
            if _context.is_tracing():
                return self.__dict__["_sx_var"].read_value()
            with jax.ensure_compile_time_eval():  # eager, even inside a JAX trace of Keras' own
                return self.__dict__["_sx_var"].read_value()

        def put(self, value):
            if value is None:  # Keras' fit drops values between epochs (`_purge_model_variables`)
                return
            if isinstance(value, Tracer) and not _context.is_tracing():
                # Keras assigning inside a JAX trace of its own (building the model symbolically):
                # held beside the variable, as Keras holds it, until a real value is assigned
                self.__dict__["_sx_shadow"] = value
                return
            self.__dict__.pop("_sx_shadow", None)
            if _context.is_tracing():
                self.__dict__["_sx_var"].assign(value)
                return
            with jax.ensure_compile_time_eval():
                self.__dict__["_sx_var"].assign(value)

        made = _BACKED[cls] = type(cls.__name__, (cls,), {"_value": property(get, put), "__module__": cls.__module__})
    return made


def back(variable) -> None:
    """Store a Keras variable just created in a strategax scope in a strategax variable."""
    value = variable.__dict__.get("_value")
    if "_sx_var" in variable.__dict__ or value is None or isinstance(value, Tracer):
        return  # already backed, not initialised, or made inside a JAX trace of Keras' own
    del variable.__dict__["_value"]
    sx_var = Variable(value, trainable=variable.trainable, name=variable.path,
                      synchronization=_SYNC[variable.synchronization], aggregation=_AGG[variable.aggregation])
    variable.__dict__["_sx_var"] = sx_var
    variable.__class__ = backed_class(type(variable))


def wrap_variable(cls) -> None:
    """Keras variables initialised inside a strategax scope (cross-replica context) are backed."""
    for name in ("_initialize", "_initialize_with_initializer"):
        original = getattr(cls, name)

        def initialize(self, *args, _original=original):
            _original(self, *args)
            if _context.has_strategy() and not _context.in_replica_context():
                back(self)

        initialize.__wrapped__ = original  # type: ignore[attr-defined]
        setattr(cls, name, initialize)


def wrap_apply(cls) -> None:
    """`optimizer.apply(grads, variables)` (what `apply_gradients` calls) in replica context of
    a traced strategax function: merge_call, batch_reduce_to(SUM), Keras' update."""
    original = cls.apply

    def apply(self, grads, trainable_variables=None):
        from keras.src.backend.common.stateless_scope import in_stateless_scope
        if not (_context.is_tracing() and _context.in_replica_context()) or steps.active() is not None \
                or in_stateless_scope():
            return original(self, grads, trainable_variables)
        variables = list(self._trainable_variables if trainable_variables is None else trainable_variables)
        missing = [v.path for v in variables if "_sx_var" not in v.__dict__]
        if missing:
            raise KerasAdapterError(
                f"optimizer.apply_gradients in a replica function updates Keras variables created "
                f"outside the strategy's scope ({', '.join(missing[:3])}), which strategax does not hold",
                "create the model (and the optimizer) inside `with strategy.scope():`")
        grads = list(grads)

        def merge_fn(strategy, grads):
            pairs = [(g, v.__dict__["_sx_var"]) for g, v in zip(grads, variables) if g is not None]
            reduced = iter(strategy.extended.batch_reduce_to(ReduceOp.SUM, pairs))
            summed = [None if g is None else jnp.asarray(next(reduced)) for g in grads]
            if not self.built:  # its slots are variables: made now, from constants, in cross-replica context
                with jax.ensure_compile_time_eval():
                    self.build(variables)
                self.built = True
            return original(self, summed, variables)

        return get_replica_context().merge_call(merge_fn, args=(grads,))

    apply.__wrapped__ = original  # type: ignore[attr-defined]
    cls.apply = apply
