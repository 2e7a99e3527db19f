"""`ReplicaContext`: what a replica function sees (its id, the replica count, collectives)."""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax._src import core as jax_core

from ..dialects import collectives
from ..errors import DistributionTypeError
from .merge import merge_call
from .options import check_options
from .reduce_op import ReduceOp


def _check_values(value: Any, api: str) -> None:
    for x in jax.tree_util.tree_leaves(value):
        if not hasattr(x, "dtype") and not isinstance(x, (int, float, complex, bool)):
            raise DistributionTypeError(f"{api} got a {type(x).__name__} ({x!r:.60}) where it takes arrays or numbers",
                                        "pass arrays or numbers (or pytrees of them)")


class ReplicaContext:
    """The context inside `strategy.run`: `sx.get_replica_context()` returns it."""

    def __init__(self, strategy):
        self._strategy = strategy
        self._trace = jax_core.trace_ctx.trace  # the replica function's own JAX trace

    @property
    def strategy(self):
        return self._strategy

    @property
    def num_replicas_in_sync(self) -> int:
        return self._strategy.num_replicas_in_sync

    @property
    def devices(self) -> tuple:
        return tuple(self._strategy.extended.worker_devices)

    @property
    def replica_id_in_sync_group(self):
        """This replica's index, an int32 scalar (traced: it differs per replica)."""
        return collectives.replica_id()

    def all_reduce(self, reduce_op, value: Any, options=None) -> Any:
        """Every replica gets the SUM or MEAN over replicas of `value` (any pytree)."""
        op = ReduceOp.parse(reduce_op).ir_name
        _check_values(value, "ReplicaContext.all_reduce")
        check_options(options, "ReplicaContext.all_reduce")
        merged = self._strategy._communication_options.merge(options)  # the strategy's default, then these
        pack = None if options is None else options.bytes_per_pack  # read by fuse-collectives
        return jax.tree_util.tree_map(
            lambda x: collectives.all_reduce(x, op, "ReplicaContext.all_reduce", bytes_per_pack=pack,
                                             compression=merged.compress_to, carries="gradient"), value)

    def all_gather(self, value: Any, axis: int, options=None) -> Any:
        """Every replica gets all replicas' values concatenated along `axis`."""
        collectives.check_axis_type(axis, "ReplicaContext.all_gather")
        n = self.num_replicas_in_sync

        return jax.tree_util.tree_map(lambda x: collectives.all_gather(x, axis, n, "ReplicaContext.all_gather"),
                                      value)

    def merge_call(self, merge_fn, args=(), kwargs=None) -> Any:
        """Run `merge_fn(strategy, *args, **kwargs)` once in cross-replica context (see `merge`).
        Inside control flow or a nested JAX transformation it raises, as TensorFlow does."""
        return merge_call(self, merge_fn, args, kwargs, top_level_trace=self._trace)

    def _merge_anywhere(self, merge_fn, args=(), kwargs=None) -> Any:
        """merge_call for strategax's own updates (the optimizer), which TensorFlow runs without a
        merge_call (`maybe_merge_call`) and so allows inside loops and branches."""
        return merge_call(self, merge_fn, args, kwargs)

    def __repr__(self) -> str:
        return f"ReplicaContext(strategy={type(self._strategy).__name__}, replicas={self.num_replicas_in_sync})"


class DefaultReplicaContext(ReplicaContext):
    """The replica context of the default strategy: one replica, collectives are identities."""

    @property
    def replica_id_in_sync_group(self):
        return jnp.int32(0)

    def all_reduce(self, reduce_op, value: Any, options=None) -> Any:
        ReduceOp.parse(reduce_op)
        return value

    def all_gather(self, value: Any, axis: int, options=None) -> Any:
        jax.tree_util.tree_map(lambda x: collectives.check_axis(axis, jnp.ndim(x), "ReplicaContext.all_gather"), value)
        return value
