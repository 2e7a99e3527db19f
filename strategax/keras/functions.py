"""What a Keras model compiled in a strategax scope runs for `fit`, `evaluate` and `predict`:
its `train_function(state, iterator)` (Keras' contract: one call per `steps_per_execution`
steps, `(logs, state)` back), built from strategax functions of its replica steps.

Each step takes the next global batch from Keras' iterator, splits it across the replicas as
`experimental_distribute_dataset` does (padded per-replica batches, each replica's real row
count a hidden input; a batch that fills every replica is handed over without them, so its
program has no padded-row masks: `full_batch`), and runs one
`strategy.function` whose body is `strategy.run` of Keras' own step (`steps.py`). With
`steps_per_execution=N > 1`, fit's and evaluate's function is one program of N steps: an
`sx.range(N)` loop taking `next(iterator)` of the distributed iterator in its body (one
on-device loop; the last call of an epoch runs the batches left, fewer than N, the loop's step
count being an input). State comes back as `Mirrored` values (Keras keeps them between steps,
and `jax_state_sync` reads them into the model's variables); a result that differs across
replicas raises."""
from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from ..errors import OutOfRangeError
from ..input import InputOptions
from ..trace import Mirrored, PerReplica
from ..trace import range as sx_range
from ..trace.distributed_values import PerReplicaBatch, is_distributed
from .errors import KerasAdapterError

_NO_PREFETCH = InputOptions(experimental_fetch_to_device=False)


def _one_shot(iterator) -> Any:
    """Keras' iterator as a one-shot source of global batches (read one at a time)."""
    yield from iterator


class Runner:
    """The strategax functions of one Keras model under `strategy`."""

    def __init__(self, model, strategy, replica_steps):
        self.model, self.strategy = model, strategy
        self.replica_steps = replica_steps  # kind -> fn(model, state, data) -> outputs (steps.py / _keras3.py)
        self.functions: dict[tuple[str, int], Any] = {}  # (kind, steps per call) -> strategy.function
        self._source: tuple[Any, Any] | None = None  # (Keras iterator, its distributed iterator)

    # --- the strategax functions ---------------------------------------------------------
    def steps(self, kind: str) -> int:
        """How many steps one call of `kind`'s function runs: the model's `steps_per_execution`
        for fit and evaluate (an on-device loop), 1 for predict (see `make`)."""
        if kind == "predict":
            return 1
        return max(1, int(getattr(self.model, "steps_per_execution", 1) or 1))

    def function(self, kind: str):
        """The `strategy.function` fit ("train"), evaluate ("test") or predict ("predict") calls:
        `f(state, batch)` for one step, or `f(state, iterator)`, an `sx.range` loop of
        `steps(kind)` steps, each taking `next(iterator)`."""
        n = self.steps(kind)
        f = self.functions.get((kind, n))
        if f is None:
            replica_fn = self.replica_steps[kind]
            model, strategy = self.model, self.strategy

            def step(state, batch):
                return strategy.run(replica_fn, args=(model, state, batch))

            def loop(state, iterator):
                for _ in sx_range(n):
                    logs, state = strategy.run(replica_fn, args=(model, state, next(iterator)))
                return logs, state  # the last step's (the loop runs at least once)

            fn = step if n == 1 else loop
            fn.__name__ = fn.__qualname__ = f"keras_{kind}_step" if n == 1 else f"keras_{kind}_{n}_steps"
            f = self.functions[(kind, n)] = strategy.function(fn, name=f"{model.name}_{fn.__name__[6:]}")
        return f

    # --- batches -------------------------------------------------------------------------
    def batches(self, iterator) -> Any:
        """Keras' `iterator` of global batches as a distributed iterator (one per Keras iterator:
        the batches it has read are not read again)."""
        if self._source is None or self._source[0] is not iterator:
            dist = self.strategy.experimental_distribute_dataset(_one_shot(iterator), _NO_PREFETCH)
            self._source = (iterator, iter(dist))
        return self._source[1]

    def next_batch(self, iterator) -> Any:
        """The next global batch of Keras' `iterator`, split across the replicas (StopIteration
        at its end, as Keras' step functions raise); a full one without its row counts
        (`full_batch`)."""
        return full_batch(next(self.batches(iterator)))

    # --- what Keras calls ----------------------------------------------------------------
    def make(self, kind: str) -> Callable:
        """Keras' `train_function`/`test_function`/`predict_function` for `kind`."""
        f = self.function(kind)
        model = self.model

        def keras_loop(state, iterator):
            try:
                logs, state = f(state, self.batches(iterator))
            except OutOfRangeError:  # no batch left: Keras' epoch ends
                raise StopIteration from None
            return _mirrored(logs, f"{kind} step's logs"), _mirrored(state, f"{kind} step's state")

        if self.steps(kind) > 1:
            return keras_loop

        def keras_function(state, iterator):
            outputs = []
            for i in range(max(1, int(getattr(model, "steps_per_execution", 1) or 1))):
                try:
                    batch = self.next_batch(iterator)
                except StopIteration:
                    if i == 0:
                        raise
                    break
                result, state = f(state, batch)
                state = _mirrored(state, f"{kind} step's state")
                outputs.append(result)
            if kind == "predict":
                return _concat([self._rows(o) for o in outputs]), state
            return _mirrored(outputs[-1], f"{kind} step's logs"), state

        return keras_function

    def _rows(self, outputs) -> Any:
        """Predictions: every replica's real rows, in order."""
        def rows(v):
            if isinstance(v, PerReplica):
                return self.strategy.gather(v, axis=0)
            return v
        return jax.tree_util.tree_map(rows, outputs, is_leaf=is_distributed)


def full_batch(batch) -> Any:
    """A batch that fills every replica's rows as plain `PerReplica` values (the same global
    arrays), so its program has no padded rows to mask: Keras' own step. The masks `mask-padding`
    puts before each op that combines rows cost a full batch time for nothing (32 on the
    activations of a 2-layer Transformer's train step: docs/performance.md). A partial batch
    keeps its row counts and gets its own, masked, program when one first comes (Keras alone
    compiles one for a last batch of another size too). Every worker of a multi-worker job
    holds every replica's count, so all pick the same program."""
    leaves = jax.tree_util.tree_leaves(batch, is_leaf=is_distributed)
    if not leaves or not all(_fills_rows(x) for x in leaves):
        return batch
    return jax.tree_util.tree_map(lambda x: PerReplica.from_global(*x.held_global), batch, is_leaf=is_distributed)


def _fills_rows(x) -> bool:
    return (isinstance(x, PerReplicaBatch) and x.held_global is not None and x.padded_rows > 0
            and all(c == x.padded_rows for c in x.real_counts))


def _mirrored(tree, what: str) -> Any:
    """`tree` with every leaf known to be the same on every replica, else a named error."""
    def check(v):
        if isinstance(v, PerReplica):
            raise KerasAdapterError(
                f"the Keras {what} differs across replicas after the step, so strategax cannot hand "
                "Keras one value for it (a model state or metric updated by each replica on its own "
                "rows, outside Keras' compute_loss / compute_metrics and the optimizer)",
                "update state through Keras' train_step contract: compute the loss with compute_loss, "
                "apply gradients with self.optimizer.stateless_apply, update metrics in compute_metrics")
        return v
    return jax.tree_util.tree_map(check, tree, is_leaf=is_distributed)


def _concat(outputs: list) -> Any:
    if len(outputs) == 1:
        return outputs[0]
    return jax.tree_util.tree_map(lambda *xs: jnp.concatenate([jnp.asarray(x) for x in xs]), *outputs)


__all__ = ["Mirrored", "Runner"]
